"""The request workflow (seed 004, four eyes): propose -> test (dry run) -> approve or reject.

A proposer asks for one run of a definition with parameters, a title and a reason. A
reviewer (operator or admin) can dry-run it — every admission check the run would meet, with
nothing stored or executed — and then approve it, which creates the run through the normal
trigger pipeline (so every gate applies again at that moment), or reject it with a note. The
proposer can never approve their own request. Every step is in the audit log.

Approval is safe to repeat after a crash: the run's trigger is keyed by the request id, so a
second approve finds the run the first one made and records the decision.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core.errors import ConflictError, GovernanceRefusal, JobgateError, NotFoundError, ValidationError
from jobgate.core.governance import Moment, Person, request_refusal
from jobgate.core.models import DefinitionStatus, Scope, TriggerType
from jobgate.core.params import check_text, validate_params
from jobgate.core.records import RunRequest
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import StoreTx

MAX_TITLE = 200
MAX_REASON = 2000


@dataclass(frozen=True)
class Check:
    check: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Verdict:
    """A dry run's answer: admissible only when every check passed; each check says why."""

    admissible: bool
    checks: list[Check] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"admissible": self.admissible, "checks": [c.__dict__ for c in self.checks]}


def _get(engine: Engine, tenant_id: str, request_id: str, *, visible_to: str | None = None) -> RunRequest:
    with engine.store.read(tenant_id=tenant_id) as tx:
        found = tx.request_get(tenant_id, request_id)
    if found is None or (visible_to is not None and found.requested_by != visible_to):
        raise NotFoundError(f"no request {request_id!r}", field="request_id")
    return found


def propose(
    engine: Engine,
    *,
    tenant_id: str,
    requester: str,
    job_definition_id: str,
    params: dict[str, str],
    title: str,
    reason: str,
    requester_lineage: tuple[str, ...] = (),
) -> RunRequest:
    """Record a proposal of the definition's current version (its digest is kept: approval
    runs that version, or the one a later dry run saw). ``requester_lineage``: who minted the
    proposer's credential (four eyes)."""
    title, reason = title.strip(), reason.strip()
    if not 0 < len(title) <= MAX_TITLE:
        raise ValidationError(f"1 to {MAX_TITLE} characters", field="title")
    if not 0 < len(reason) <= MAX_REASON:
        raise ValidationError(f"say why, in 1 to {MAX_REASON} characters", field="reason")
    check_text(title, "title")
    check_text(reason, "reason", lines=True)
    with engine.store.read(tenant_id=tenant_id) as tx:
        definition = engine.definition(tx, tenant_id, job_definition_id)
        if definition.status is DefinitionStatus.RETIRED:  # retirement is final: it could never be approved
            raise ConflictError(f"{job_definition_id} is retired: it never runs again", field="job_definition_id")
        # A proposal that could never run is refused now, not handed to a second person: its
        # params, and for a workflow what its steps would be given, as a start checks them.
        valid = validate_params(definition.params, params, source=job_definition_id)
        if "workflow" in definition.content:
            engine.definitions.check_workflow_inputs(tx, definition, tenant_id, valid)
    now = engine.clock.now()
    request = RunRequest(
        request_id=f"TGREQ-{uuid.uuid4().hex[:20]}",
        tenant_id=tenant_id,
        job_definition_id=job_definition_id,
        params=dict(params),
        title=title,
        reason=reason,
        requested_by=requester,
        status="pending",
        created_at=now,
        digest=definition.digest,
        version=definition.version,
        requester_lineage=requester_lineage,
    )
    with engine.store.write() as tx:
        tx.request_put(request)
        audit.record(
            tx,
            audit.event(
                tenant_id,
                requester,
                "request.submitted",
                "request",
                request.request_id,
                now,
                reason=reason,
                payload={
                    "job_definition_id": job_definition_id,
                    "params": dict(params),
                    "title": title,
                    "digest": definition.digest,
                    "version": definition.version,
                },
            ),
        )
    return request


def get(engine: Engine, tenant_id: str, request_id: str, *, visible_to: str | None = None) -> RunRequest:
    """``visible_to``: a proposer who may see only their own requests (others answer 404)."""
    return _get(engine, tenant_id, request_id, visible_to=visible_to)


def listed(
    engine: Engine,
    tenant_id: str,
    *,
    status: str | None = None,
    requested_by: str | None = None,
    job_definition_ids: Collection[str] | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> list[RunRequest]:
    """A tenant's requests, newest first, from ``before`` (a page's last: created, id) on."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        return tx.requests_list(
            tenant_id,
            status=status,
            requested_by=requested_by,
            job_definition_ids=job_definition_ids,
            before=before,
            limit=limit,
        )


def dry_run(engine: Engine, request: RunRequest, *, version: int | None = None) -> Verdict:
    """Every admission check the run would meet now, nothing stored, nothing executed.
    ``version``: the definition version to judge (default: the current one)."""
    submission = _submission(request, actor=request.requested_by, version=version, moment=Moment.REQUEST_TEST)
    checks: list[Check] = []
    try:
        prepared = engine.pipeline.prepare(
            [submission], now=engine.clock.now(), actor=request.requested_by, record=False
        )
        checks.append(Check("admission", True, "definition active and approved, parameters valid, gates passed"))
    except GovernanceRefusal as exc:
        checks.append(Check(exc.code, False, exc.message))
    except JobgateError as exc:
        checks.append(Check(exc.code, False, str(exc)))
    else:
        checks += _code_check(
            engine,
            request.tenant_id,
            prepared[0].create.run.job_definition_id,
            prepared[0].create.run.definition_version,
        )
    return Verdict(all(c.ok for c in checks), checks)


def _code_check(engine: Engine, tenant_id: str, job_definition_id: str, version: int) -> list[Check]:
    """The code gate, which binds at an attempt's start, asked now of the code this host reads:
    a request approved while the code differs from the approved code makes a run that is held
    (``code_changed``), so the dry run says so (found by a review: it said "admissible")."""
    from jobgate.service import approvals

    try:
        found = approvals.status(engine, tenant_id, job_definition_id)
    except JobgateError as exc:
        return [Check("code_unreadable", False, exc.message)]
    if found.current_version != version or not found.approved:
        return []  # another version judged, or the admission check above said why
    if found.code is None:
        return [Check("code_unreadable", False, f"the code cannot be read on this host: {found.code_problem}")]
    if not found.code_matches:
        parts = ", ".join(found.code_changed) or "code"
        return [
            Check(
                "code_changed",
                False,
                f"the code on this host differs from the approved code ({parts}): its run would be held"
                " (code_changed) until the code is approved again",
            )
        ]
    return [Check("code", True, "the code on this host is the approved code")]


def _current_version(engine: Engine, tenant_id: str, job_definition_id: str) -> tuple[str, int]:
    with engine.store.read(tenant_id=tenant_id) as tx:
        definition = engine.definition(tx, tenant_id, job_definition_id)
    return definition.digest, definition.version


def test(engine: Engine, tenant_id: str, request_id: str, *, actor: str) -> tuple[RunRequest, Verdict]:
    """Dry-run the request against the definition's current version, and pin that version:
    approval runs exactly what this test saw."""
    request = _get(engine, tenant_id, request_id)
    if request.status != "pending":
        raise ConflictError(f"request is {request.status}; only a pending request can be tested", field="status")
    digest, version = _current_version(engine, tenant_id, request.job_definition_id)
    verdict = dry_run(engine, request, version=version)
    now = engine.clock.now()
    with engine.store.write() as tx:
        if not tx.request_tested(tenant_id, request_id, actor, now, verdict.as_dict(), pinned=(digest, version)):
            raise ConflictError("request was decided meanwhile", field="status")
        payload = {**verdict.as_dict(), "digest": digest, "version": version}
        audit.record(tx, audit.event(tenant_id, actor, "request.tested", "request", request_id, now, payload=payload))
    return _get(engine, tenant_id, request_id), verdict


def approve(
    engine: Engine,
    tenant_id: str,
    request_id: str,
    *,
    actor: str,
    note: str | None = None,
    approver: Person | None = None,
) -> RunRequest:
    """Create the run of exactly the version the request's last dry run saw (every gate applies
    now) and link it. Four eyes: the proposer, and anyone whose credential minted or was minted
    by the proposer's, may not approve. A definition changed since the test is a conflict: test
    the request again."""
    check_text(note, "note", lines=True)
    request = _get(engine, tenant_id, request_id)
    if request.status != "pending":
        raise ConflictError(f"request is {request.status}; only a pending request can be approved", field="status")
    now = engine.clock.now()
    refusal = request_refusal(approver or Person(actor), Person(request.requested_by, request.requester_lineage))
    if refusal is not None:
        audit.record_now(
            engine,
            audit.event(
                tenant_id, actor, "request.refused", "request", request_id, now, reason=refusal.code,
                payload={"rule": refusal.rule, "requested_by": request.requested_by},
            ),
        )  # fmt: skip
        raise refusal
    try:
        digest, version = _current_version(engine, tenant_id, request.job_definition_id)
    except GovernanceRefusal as exc:  # the stored content itself is refused (its signature): on the record
        engine.admission.record_refusal(_submission(request, actor=actor), exc, actor=actor, now=now)
        raise
    if request.digest is not None and request.digest != digest:
        # A second person's approval refused: on the record, as a four-eyes refusal is.
        seen = {"digest": request.digest, "version": request.version}
        audit.record_now(
            engine,
            audit.event(
                tenant_id, actor, "request.refused", "request", request_id, now, reason="definition_changed",
                payload={"rule": "definition_changed", "requested_by": request.requested_by, "request_saw": seen,
                         "current": {"digest": digest, "version": version}},
            ),
        )  # fmt: skip
        raise ConflictError(
            f"{request.job_definition_id} changed since this request was "
            f"{'tested' if request.tested_at is not None else 'proposed'}: the request saw "
            f"{request.digest} (v{request.version}), the current version is {digest} (v{version}); test it again",
            field="digest",
        )
    submission = _submission(request, actor=actor, version=request.version, moment=Moment.REQUEST_APPROVAL)
    prepared = engine.pipeline.prepare([submission], now=now, actor=actor)  # refusals audited by the engine
    try:
        # The run and the decision commit together: a reject that lands first makes this a
        # conflict with no run, and a refusal under the write lock leaves the request pending.
        with engine.store.write() as tx:
            run = engine.pipeline.create(tx, prepared, now)[0].run
            if not tx.request_decide(
                tenant_id, request_id, status="approved", by=actor, at=now, note=note, job_run_id=run.job_run_id
            ):
                raise ConflictError("request was decided meanwhile", field="status")
            _record_approval(tx, tenant_id, actor, request_id, now, note, run.job_run_id, request.requested_by)
    except GovernanceRefusal as exc:
        engine.admission.record_refusal(submission, exc, actor=actor, now=now)
        raise
    return _get(engine, tenant_id, request_id)


def _record_approval(
    tx: StoreTx,
    tenant_id: str,
    actor: str,
    request_id: str,
    now: datetime,
    note: str | None,
    run_id: str,
    proposer: str,
) -> None:
    payload = {"job_run_id": run_id, "requested_by": proposer}
    audit.record(
        tx, audit.event(tenant_id, actor, "request.approved", "request", request_id, now, reason=note, payload=payload)
    )


def reject(engine: Engine, tenant_id: str, request_id: str, *, actor: str, note: str) -> RunRequest:
    note = note.strip()
    if not 0 < len(note) <= MAX_REASON:
        raise ValidationError(f"a note for the proposer, 1 to {MAX_REASON} characters", field="note")
    check_text(note, "note", lines=True)
    now = engine.clock.now()
    with engine.store.write() as tx:
        current = tx.request_get(tenant_id, request_id)
        if current is None:
            raise NotFoundError(f"no request {request_id!r}", field="request_id")
        if not tx.request_decide(
            tenant_id, request_id, status="rejected", by=actor, at=now, note=note, job_run_id=None
        ):
            raise ConflictError(f"request is {current.status}; only a pending request can be rejected", field="status")
        audit.record(tx, audit.event(tenant_id, actor, "request.rejected", "request", request_id, now, reason=note))
    return _get(engine, tenant_id, request_id)


def _submission(
    request: RunRequest, *, actor: str, version: int | None = None, moment: Moment | None = None
) -> SubmitRequest:
    return SubmitRequest(
        request.job_definition_id,
        definition_version=version,
        moment=moment,
        trigger_type=TriggerType.MANUAL,
        params=dict(request.params),
        scope=Scope(tenant_id=request.tenant_id),
        # The run was asked for by the proposer; the approver (``actor``) is its reviewer: the
        # sealed record names both, never the approver as requester and reviewer at once.
        requested_by=request.requested_by,
        reason=f"request {request.request_id}: {request.title}",
        request_id=f"request:{request.request_id}",
        payload={"request_id": request.request_id, "proposed_by": request.requested_by},
        via_request=True,
    )
