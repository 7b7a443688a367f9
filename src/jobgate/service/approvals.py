"""Content and code approval (seed 004): an admin blesses one definition version's exact content
(its digest) and the code it executes (its code digest, ``jobgate.governance.code``).

``approve`` hashes what jobgate holds — the stored current version, re-read and re-digested —
and reads the code off this host; a caller may (the API must) name the digest it reviewed, and
a different current digest is a conflict naming both: a version applied between review and
approval is never approved unseen. An edited definition (a new version, a new digest) or edited
code (a new code digest) has no approval until someone approves it again.

Four eyes (``core.governance.approval_refusal``): with ``governance.four_eyes`` the principal
who applied a version never approves it, and a definition whose runner executes its body as code
always needs a second person. Every approval is a row of its own: approving a digest again keeps
the first approver in the history.

Revoking stops future runs: new triggers are refused, runs not yet started are cancelled in the
same transaction, and a run executing now gets no further attempt (the worker's gate cancels
it, ``approval_revoked``).
"""

from __future__ import annotations

import platform
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobgate.core import transitions
from jobgate.core.code_identity import CodeIdentity, changed_parts
from jobgate.core.errors import ConflictError, GovernanceRefusal, NotFoundError, ValidationError
from jobgate.core.governance import ApprovalRule, Person, approval_refusal
from jobgate.core.models import JobDefinition
from jobgate.core.params import check_text
from jobgate.core.records import Approval
from jobgate.core.states import PENDING, TransitionReason
from jobgate.scheduling.records import PAUSED_UNAPPROVED, ScheduleChange
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.store.base import RunFilter, StoredDefinition
from jobgate.store.sqlstore import StoreTx
from jobgate.workflows.spec import workflow_spec_of

MAX_CANCELLED_PER_REVOKE = 100_000
# What an approval's code digest does not cover, said in the approval's audit entry.
NOT_COVERED = (
    "third-party libraries the code imports, unless listed under `code:` (the deployment pins them); the interpreter"
)
INTERPRETER = f"{platform.python_implementation()} {platform.python_version()}"


@dataclass(frozen=True)
class ApprovalStatus:
    """What the definition is now, and whether what an admin approved still matches it: its
    content (``approval`` is of the current digest) and its code (``code`` is what this host
    reads now; ``code_changed`` names the parts that differ from the approved identity)."""

    job_definition_id: str
    current_version: int
    current_digest: str
    approval: Approval | None  # of the current content: its newest active approval, else its newest
    history: list[Approval]
    code: CodeIdentity | None = None  # None: the code cannot be read on this host
    code_problem: str | None = None
    code_changed: tuple[str, ...] = ()

    @property
    def approved(self) -> bool:
        return self.approval is not None and self.approval.active

    @property
    def code_matches(self) -> bool:
        a = self.approval
        return a is not None and self.code is not None and a.code_digest == self.code.digest

    @property
    def matches(self) -> bool:
        """The current content and the code on this host are both what was approved."""
        return self.approved and self.code_matches

    @property
    def changed(self) -> list[str]:
        """Why it does not match, in words: ``content`` (no approval of what is loaded now),
        ``approval revoked`` (there was one), the code parts that differ, or unreadable code."""
        a = self.approval
        why = ["content"] if a is None else [] if a.active else ["approval revoked"]
        why += list(self.code_changed)
        if self.approved and self.code is None:
            why.append("code (unreadable here)")
        return why


@dataclass(frozen=True)
class Revoked:
    revoked: list[Approval]
    cancelled_runs: list[str]


def _current(engine: Engine, tx: StoreTx, tenant_id: str, job_definition_id: str) -> StoredDefinition:
    stored = tx.definition_get(tenant_id, job_definition_id)
    if stored is None:
        raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
    engine.definitions.build(stored)  # re-digests the stored content: a tampered row is refused here
    return stored


def executes_body(engine: Engine, definition: JobDefinition) -> bool:
    """Whether the definition's runner executes its body as a program (``executes_body``)."""
    spec = definition.executor
    if spec.kind != "command" or spec.runner is None:
        return False
    runner = engine.config.runners.get(spec.runner)
    return runner is None or runner.executes_body


def check_may_approve(engine: Engine, definition: JobDefinition, *, approver: str, applier: str) -> None:
    """Raise what ``approver`` would meet approving ``definition`` applied by ``applier``: the
    four-eyes refusal, or code the approval would bind that cannot be read here (``jobgate apply
    --approve`` asks for every file before it stores anything: found by a review, one file's
    unreadable ``code:`` path failed the command after the files before it were approved)."""
    rule = ApprovalRule(engine.config.governance.four_eyes, executes_body(engine, definition))
    refusal = approval_refusal(rule, Person(approver), [Person(applier)])
    if refusal is not None:
        raise GovernanceRefusal(
            f"{definition.job_definition_id}: {refusal.message}; apply it, then let another person run "
            f"`jobgate definitions approve {definition.job_definition_id}`",
            code=refusal.code,
            rule=refusal.rule,
            field=refusal.field,
        )
    engine.definitions.code_reader.identity(definition)  # CodeUnreadable: what the approval cannot bind


def approve(
    engine: Engine,
    tenant_id: str,
    job_definition_id: str,
    *,
    actor: str,
    note: str | None = None,
    digest: str | None = None,
    code_digest: str | None = None,
    approver: Person | None = None,
    limit: Collection[str] | None = None,
) -> Approval:
    """Approve the current version's content and the code this host reads for it.

    ``digest`` / ``code_digest``: what the approver reviewed; a different current value is a
    ``ConflictError`` naming both (nothing is stored). ``approver``: the person, with who minted
    their credential (four eyes); by default ``actor`` alone. ``limit``: the definitions the
    approver's credential is limited to (None: any): a workflow whose steps run others is refused
    (every door that approves passes it)."""
    check_text(note, "note", lines=True)
    now = engine.clock.now()
    person = approver or Person(actor)
    with engine.store.write() as tx:
        stored = _current(engine, tx, tenant_id, job_definition_id)
        steps_within(stored.content, limit)
        definition = engine.definitions.build(stored)
        if digest is not None and digest != stored.digest:
            raise ConflictError(
                f"the current version {stored.version} of {job_definition_id} is {stored.digest}, "
                f"not the reviewed {digest}: review it again",
                field="digest",
            )
        identity = engine.definitions.code_reader.identity(definition)
        if code_digest is not None and code_digest != identity.digest:
            raise ConflictError(
                f"the code of {job_definition_id} here is {identity.digest}, not the reviewed {code_digest}",
                field="code_digest",
            )
        appliers = [Person(stored.applied_by, stored.applied_lineage)] if stored.applied_by else []
        rule = ApprovalRule(engine.config.governance.four_eyes, executes_body(engine, definition))
        refusal = approval_refusal(rule, person, appliers)
        if refusal is None:
            approval = tx.approval_put(
                Approval(
                    tenant_id, job_definition_id, stored.digest, stored.version, actor, now, note, None, None,
                    identity.digest, identity.as_dict(),
                )
            )  # fmt: skip
            audit.record(
                tx,
                audit.event(
                    tenant_id,
                    actor,
                    "definition.approved",
                    "definition",
                    job_definition_id,
                    now,
                    reason=note,
                    payload={
                        "digest": stored.digest,
                        "version": stored.version,
                        "code_digest": identity.digest,
                        "code_identity": identity.as_dict(),
                        "approval_id": approval.approval_id,
                        "not_covered": NOT_COVERED,
                        "interpreter": INTERPRETER,
                    },
                ),
            )
            _resume_waiting_schedules(tx, tenant_id, job_definition_id, actor, now)
            return approval
    _record_refusal(engine, tenant_id, actor, job_definition_id, refusal, stored)
    raise refusal


def _resume_waiting_schedules(tx: StoreTx, tenant_id: str, job_definition_id: str, actor: str, now: datetime) -> None:
    """Schedules stored paused until their definition is approved (``--allow-pending``) resume
    with the approval, in its transaction; each resumption is recorded as the approver's."""
    for item in tx.schedules_list(tenant_id):
        s = item.schedule
        if s.job_definition_id == job_definition_id and s.paused and item.pause_reason == PAUSED_UNAPPROVED:
            tx.schedule_set_paused(tenant_id, s.schedule_id, False, now)
            change = ScheduleChange(now, "resumed", "paused", "active", True, actor, "definition approved")
            tx.change_record(tenant_id, s.schedule_id, change)


def _record_refusal(
    engine: Engine,
    tenant_id: str,
    actor: str,
    job_definition_id: str,
    refusal: GovernanceRefusal,
    stored: StoredDefinition,
) -> None:
    payload = {"rule": refusal.rule, "message": refusal.message, "digest": stored.digest, "version": stored.version}
    audit.record_now(
        engine,
        audit.event(
            tenant_id, actor, "definition.approval_refused", "definition", job_definition_id, engine.clock.now(),
            reason=refusal.code, payload=payload,
        ),
    )  # fmt: skip


def status(engine: Engine, tenant_id: str, job_definition_id: str) -> ApprovalStatus:
    with engine.store.read(tenant_id=tenant_id) as tx:
        stored = _current(engine, tx, tenant_id, job_definition_id)
        history = tx.approvals_list(tenant_id, job_definition_id)
        mine = tx.approval_get(tenant_id, job_definition_id, stored.digest)
    code: CodeIdentity | None = None
    problem = None
    try:
        code = engine.definitions.code_reader.identity(engine.definitions.build(stored))
    except ValidationError as exc:
        problem = exc.message
    changed = () if mine is None or code is None else changed_parts(mine.code_identity or {}, code.parts)
    return ApprovalStatus(job_definition_id, stored.version, stored.digest, mine, history, code, problem, changed)


MAX_REVOKE_REASON = 2000  # a revocation's reason, from any face


def revoke(engine: Engine, tenant_id: str, job_definition_id: str, *, actor: str, reason: str | None = None) -> Revoked:
    """Revoke every active approval of the definition and cancel its runs not yet started."""
    check_text(reason, "reason", lines=True)
    if reason is not None and len(reason) > MAX_REVOKE_REASON:  # kept whole or refused, never cut
        raise ValidationError(f"at most {MAX_REVOKE_REASON} characters", field="reason")
    now = engine.clock.now()
    with engine.store.write() as tx:
        tx.gates_closing()  # no claim decides on this approval while it is being revoked
        _current(engine, tx, tenant_id, job_definition_id)
        active = [a for a in tx.approvals_list(tenant_id, job_definition_id) if a.active]
        if not active:
            raise ConflictError("the definition has no active approval to revoke", field="approval")
        for a in active:
            tx.approval_revoke(tenant_id, job_definition_id, a.digest, actor, now)
        digests = {a.digest for a in active}
        pending = tx.runs_list(
            RunFilter(
                tenant_id=tenant_id,
                statuses=tuple(PENDING),
                job_definition_id=job_definition_id,
                limit=MAX_CANCELLED_PER_REVOKE,
            )
        )
        changes = [
            transitions.cancelled(
                run, actor=actor, reason="approval_revoked", now=now, why=TransitionReason.APPROVAL_REVOKED
            )
            for run in pending
            if run.definition_digest in digests
        ]
        cancelled = [c.job_run_id for c in tx.runs_apply(changes)] if changes else []
        audit.record(
            tx,
            audit.event(
                tenant_id,
                actor,
                "definition.approval_revoked",
                "definition",
                job_definition_id,
                now,
                reason=reason,
                # One digest per approval row it closed (a digest approved twice names two rows):
                # each closing is accounted for by a name (``seal_trails.unaudited``; a review
                # found a revocation of a twice-approved digest reported as a forged one).
                payload={"digests": sorted(a.digest for a in active), "cancelled_runs": cancelled},
            ),
        )
    return Revoked(active, cancelled)


def record_load_refusal(
    engine: Engine, tenant_id: str, exc: ValidationError, *, actor: str, target: str | None = None
) -> None:
    """A definition refused at load for its signature is a governance fact: it goes to the
    audit log (nothing else was stored), under the definition it names (``target``)."""
    if exc.field != "signature":
        return
    audit.record_now(
        engine,
        audit.event(
            tenant_id,
            actor,
            "definition.refused",
            "definition",
            target or exc.source or "unknown",
            engine.clock.now(),
            reason="definition_not_signed",
            payload={"message": exc.message, "source": exc.source},
        ),
    )


def steps_within(content: Mapping[str, Any], limit: Collection[str] | None) -> None:
    """Refuse (403 ``token_limit``) a workflow whose steps or compensations run a definition
    beyond ``limit``: a credential limited to some definitions reaches no other through a
    workflow it writes or approves."""
    if limit is None or "workflow" not in content:
        return
    for job in workflow_spec_of(content, "workflow").jobs:
        if job not in limit:
            raise GovernanceRefusal(
                f"this credential is limited to {sorted(limit)}; a step of this workflow runs {job!r}",
                code="token_limit",
                field="workflow",
            )
