"""The trigger pipeline of seed 000 §10-11, one named step per stage.

``submit`` runs, one named method each: ``resolve_definition`` -> ``resolve_config`` ->
``validate_preconditions`` -> ``compute_idempotency_key`` -> ``existing_results`` ->
``acquire_lock_and_create``. The run then waits in SCHEDULED for a worker, which does the
rest of the seed's pipeline (``jobgate.runtime.worker``: ``_launch`` dispatches, ``_execute``
tracks, ``_settle`` decides success, retry or failure), and the events written with every
transition leave through the outbox. A refused trigger stores nothing.

The execution lock is the run row itself: its id is derived from the idempotency key and is
inserted with ON CONFLICT DO NOTHING inside a write transaction, so of any number of
concurrent identical triggers exactly one creates the run and the others find it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from jobgate.clock import Clock
from jobgate.config import JobgateConfig
from jobgate.core.audit import ACTING, AuditEvent, attributed
from jobgate.core.canonical import canonical_json, isoformat_utc
from jobgate.core.errors import ConflictError, GovernanceRefusal, JobgateError, ValidationError
from jobgate.core.governance import Moment, SafeModeFact, admit
from jobgate.core.idempotency import client_request_key, event_slot, idempotency_key, retry_key, retry_run_id
from jobgate.core.lineage import retry_refusal
from jobgate.core.models import (
    ConfigSnapshot,
    DefinitionStatus,
    JobDefinition,
    JobRun,
    Scope,
    Trigger,
    TriggerType,
)
from jobgate.core.params import validate_params
from jobgate.core.policy import Policy
from jobgate.core.records import SafeModePeriod
from jobgate.core.runs import new_run, rebound, trigger_document
from jobgate.service import gates, policies
from jobgate.service.admission import Admission, AdmissionBatch
from jobgate.service.definitions import Definitions
from jobgate.service.group_commit import GroupCommit, InFlight
from jobgate.service.letters import letter_closed
from jobgate.service.snapshots import resolve_snapshot
from jobgate.service.submission import (
    SYSTEM_ACTOR,
    PreparedSubmission,
    RefusedSubmission,
    SubmitRequest,
    SubmitResult,
    approval_fact,
)
from jobgate.store.base import RunCreate
from jobgate.store.sqlstore import Store, StoreTx


class Pipeline:
    """Triggers into runs, over one store and one configuration."""

    def __init__(
        self, store: Store, config: JobgateConfig, clock: Clock, definitions: Definitions, admission: Admission
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.definitions = definitions
        self.admission = admission
        # Snapshots are a pure function of (configuration, profile, tenant): digesting the
        # profile's values once per submit was a third of a submit's CPU.
        self._snapshots: dict[tuple[str, str, int, str], ConfigSnapshot] = {}
        # Concurrent submissions share write transactions (``group_commit``).
        self.group_commit: GroupCommit[PreparedSubmission, SubmitResult] = GroupCommit(self._write_prepared)
        self.in_flight = InFlight()

    def submit_many(self, requests: Sequence[SubmitRequest], *, actor: str | None = None) -> list[SubmitResult]:
        """Submit a batch in one transaction: all are validated before anything is stored.

        On SQLite validation and the building of the runs happen in a read transaction, before
        the write lock is taken: there is one write lock for every worker and submitter, and
        holding it through this Python work stalled the workers. A definition changed between
        the two transactions is seen as it was at the read, as if the change came just after.
        PostgreSQL has no such lock, and there a second transaction only adds round trips (a
        connection check, BEGIN and COMMIT: a fifth of a single submission's), so a caller alone
        in this process (``InFlight``) prepares its runs inside the transaction that stores them.
        So does a lone trigger on SQLite: its preparation holds the lock a quarter of a
        millisecond, and saves a transaction and the re-check under the lock.

        Callers with company share write transactions on either backend (``GroupCommit``): on
        PostgreSQL each manual submission of a tenant waits for that tenant's audit chain head,
        which a transaction holds until it commits, so sixteen API clients queued behind one
        another's commits; grouped, they take it once a group (``benchmarks/api_load.py``:
        152-166 against 111-142 submits/s, p99 150-166 against 211-465 ms).
        """
        now = self.clock.now()
        with self.in_flight.submitting() as alone:
            if alone and (len(requests) == 1 or not self.store.prepares_apart):
                return self.prepare_and_create(requests, now, actor=actor)
            return self.store_prepared(self.prepare(requests, now=now, actor=actor), now, actor=actor)

    def prepare_and_create(
        self, requests: Sequence[SubmitRequest], now: datetime, *, actor: str | None
    ) -> list[SubmitResult]:
        """``prepare`` and ``store_prepared`` in one write transaction; a refusal, whether while
        preparing or under the lock, rolls everything back and is then audited against the
        request it refused, as the two apart do."""
        cache: dict[tuple[str, str], JobDefinition] = {}
        batch = AdmissionBatch(self.admission.scheduler_policy(actor=actor, now=now))
        prepared: list[PreparedSubmission] = []
        preparing: SubmitRequest | None = None
        try:
            with self.store.write() as tx:
                for preparing in requests:
                    read_ahead(tx, preparing, cache)
                    prepared.append(self.prepare_one(tx, preparing, now=now, actor=actor, batch=batch, cache=cache))
                preparing = None
                # read in this very transaction a moment ago: a re-read shows nothing newer
                return self.create(tx, prepared, now, recheck=False)
        except GovernanceRefusal as exc:
            if preparing is not None:
                self.admission.record_refusal(preparing, exc, actor=actor, now=now)
            else:
                self.admission.record_refusal_for(prepared, exc, actor=actor, now=now)
            raise

    def store_prepared(
        self, prepared: Sequence[PreparedSubmission], now: datetime, *, actor: str | None
    ) -> list[SubmitResult]:
        """Create prepared submissions in a write transaction of their own (on SQLite perhaps
        shared with concurrent callers' submissions, ``group_commit``: a shared transaction that
        fails is written again caller by caller). A refusal under the lock (a revocation, safe
        mode, the licence's slots) rolls everything back and is then audited against the
        submission it refused."""
        try:
            return self.group_commit.store(prepared, now)
        except GovernanceRefusal as exc:
            self.admission.record_refusal_for(prepared, exc, actor=actor, now=now)
            raise

    def _write_prepared(self, prepared: Sequence[PreparedSubmission], now: datetime) -> list[SubmitResult]:
        with self.store.write() as tx:
            return self.create(tx, prepared, now)

    def prepare(
        self,
        requests: Sequence[SubmitRequest],
        *,
        now: datetime,
        actor: str | None = None,
        record: bool = True,
        batch: AdmissionBatch | None = None,
    ) -> list[PreparedSubmission]:
        """Validate and build runs for ``requests`` in a read transaction (all or an error).
        A governance refusal is audited unless ``record`` is off (a dry run records its own
        verdict instead). ``batch``: the admissions these share with others prepared apart
        (runs created in one transaction count against one another's quotas)."""
        cache: dict[tuple[str, str], JobDefinition] = {}
        current: SubmitRequest | None = None
        if batch is None:
            batch = AdmissionBatch(self.admission.scheduler_policy(actor=actor, now=now))
        try:
            with self.store.read() as tx:
                out = []
                for current in requests:
                    read_ahead(tx, current, cache)
                    out.append(self.prepare_one(tx, current, now=now, actor=actor, batch=batch, cache=cache))
                return out
        except GovernanceRefusal as exc:
            assert current is not None
            if record:
                self.admission.record_refusal(current, exc, actor=actor, now=now)
            raise

    def prepare_one(
        self,
        tx: StoreTx,
        request: SubmitRequest,
        *,
        now: datetime,
        actor: str | None,
        batch: AdmissionBatch,
        cache: dict[tuple[str, str], JobDefinition] | None = None,
        moment: Moment | None = None,
    ) -> PreparedSubmission:
        """One request through every stage before storing: the definition, the admission rule,
        the configuration snapshot, the params, the trigger, the policies and the key."""
        definition = self.resolve_definition(tx, request, {} if cache is None else cache)
        # An inactive definition is the admission rule's first gate (lifecycle): refused as a
        # governance refusal, audited with the trigger, as every gate's refusal at creation is.
        moment = moment or request.moment
        if moment is None:
            moment = Moment.WORKFLOW_STEP if request.workflow_run_id is not None else Moment.TRIGGER
        facts, period = self.admission.check(tx, definition, request, now, moment=moment, batch=batch)
        policy = batch.policy
        permissions = tuple(definition.content.get("permissions") or ())
        snapshot = self.resolve_config(definition, request.scope, period, policy)
        params = validate_preconditions(definition, request)
        trigger = build_trigger(request, now)
        retry, timeout = policies.policies_for(self.config, definition)
        if request.retry_policy is not None:
            retry = policies.retry_policy(self.config, request.retry_policy)
        if request.timeout_policy is not None:
            timeout = policies.timeout_policy(self.config, request.timeout_policy)
        key = compute_idempotency_key(definition, trigger, request, snapshot)
        retry_of = request.retry_of
        run, transitions = new_run(
            definition,
            trigger,
            request.scope.as_dict(),
            snapshot,
            params,
            retry,
            timeout,
            now=now,
            due_at=request.due_at,
            actor=actor or request.requested_by or SYSTEM_ACTOR,
            key=key,
            code_digest=None if facts.approval is None else facts.approval.code_digest,
            run_id=None if retry_of is None else retry_run_id(request.scope.tenant_id, retry_of),
        )
        if retry_of is not None:
            run = run.evolve(retry_of=retry_of)
        if request.workflow_run_id is not None:
            run = run.evolve(workflow_run_id=request.workflow_run_id)
        slot = request.slot
        if slot is None and retry_of is None:  # a retry is another run of the same event
            slot = event_slot(trigger)
        if slot is not None:
            run = run.evolve(slot=slot)
        if request.via_request:  # a second person reviewed it: its approver (safe mode's manual review)
            run = run.evolve(reviewed_by=actor or request.requested_by or SYSTEM_ACTOR)
        create = RunCreate(
            run, trigger_document(trigger), transitions, definition.concurrency_limit, definition.rate_limit_per_second
        )
        return PreparedSubmission(
            create,
            snapshot,
            licensed=bool(permissions),
            request=request,
            facts=facts,
            actor=actor,
            acting=ACTING.get(),
        )

    def create(
        self, tx: StoreTx, prepared: Sequence[PreparedSubmission], now: datetime, *, recheck: bool = True
    ) -> list[SubmitResult]:
        """Store prepared submissions inside the caller's write transaction (the scheduler
        advances a schedule's watermark in the same one). ``recheck`` off: they were prepared
        in ``tx`` itself, so the approvals and safe mode they were admitted under are current."""
        existing = existing_results(tx, prepared)
        fresh = [p for p in prepared if p.create.run.idempotency_key not in existing]
        refuse_retired(tx, fresh)
        settle_retry_sources(tx, fresh, now)
        created = iter(self.acquire_lock_and_create(tx, fresh, now, recheck=recheck))
        out: list[SubmitResult] = []
        for p in prepared:
            key = p.create.run.idempotency_key
            if key in existing:
                out.append(SubmitResult(existing[key], False))
            else:
                out.append(SubmitResult(*next(created)))
        return out

    def recheck_under_lock(
        self, tx: StoreTx, prepared: Sequence[PreparedSubmission], now: datetime
    ) -> list[PreparedSubmission]:
        """The admission rule again, inside the write transaction that creates the runs, with the
        approvals and safe-mode periods read under the lock: a revocation or a safe-mode switch
        that committed after the (read-only) preparation refuses them too, instead of slipping
        past it. A submission prepared under another safe-mode period is prepared again here (its
        snapshot binds the period's overrides)."""
        keys = {
            (p.create.run.tenant_id, p.create.run.job_definition_id, p.create.run.definition_digest) for p in prepared
        }
        active = tx.approvals_active(list(keys))
        tenants = sorted({p.create.run.tenant_id for p in prepared})
        periods = {tenant: tx.safe_mode_current(tenant) for tenant in tenants}
        moved = {  # tenants whose safe-mode period changed since some of these were prepared
            p.create.run.tenant_id
            for p in prepared
            if p.facts is not None
            and p.request is not None
            and _activation(p.facts.safe_mode) != _activation(gates.safe_mode_fact(periods[p.create.run.tenant_id]))
        }
        counts: dict[str, list[int]] = {}  # shared by the submissions prepared again, in order
        out: list[PreparedSubmission] = []
        for p in prepared:
            run = p.create.run
            fact = gates.safe_mode_fact(periods[run.tenant_id])
            if p.facts is None or p.request is None:
                out.append(p)
                continue
            if run.tenant_id in moved:
                # Every submission of the tenant prepared again, in order, under the period the
                # lock shows and by the policy it was admitted under: its snapshot binds the new
                # overrides, and the quotas count the tenant's runs of this batch once each.
                batch = AdmissionBatch(p.facts.policy, counts=counts)
                try:
                    again = self.prepare_one(tx, p.request, now=now, actor=p.actor, batch=batch, moment=p.facts.moment)
                    out.append(replace(again, acting=p.acting))  # prepared again here: still its caller's
                except GovernanceRefusal as exc:
                    raise RefusedSubmission(exc, p.request) from None
                continue
            key = (run.tenant_id, run.job_definition_id, run.definition_digest)
            approval = approval_fact(active, key)
            if approval != p.facts.approval or fact != p.facts.safe_mode:  # what the lock shows changed
                facts = replace(p.facts, approval=approval, safe_mode=fact)
                verdict = admit(facts)
                if not verdict.admitted:
                    raise RefusedSubmission(verdict.refusal(), p.request)
                code = None if approval is None else approval.code_digest
                if code != (None if p.facts.approval is None else p.facts.approval.code_digest):
                    # admitted under an approval made since: the run binds that approval's code
                    create = replace(p.create, transitions=rebound(p.create.transitions, code))
                    p = replace(p, create=create, facts=facts)
            out.append(p)
        return out

    def acquire_lock_and_create(
        self, tx: StoreTx, prepared: Sequence[PreparedSubmission], now: datetime, *, recheck: bool = True
    ) -> list[tuple[JobRun, bool]]:
        """Seed §11 ``acquire_execution_lock`` + ``create_job_run``: the run row is the lock. Its
        idempotency key is unique and it is inserted with ON CONFLICT DO NOTHING, so of
        concurrent identical triggers exactly one creates it; the others get it back. Returns
        one (run, created) per entry of ``prepared``, in order."""
        if not prepared:
            return []
        if recheck:
            prepared = self.recheck_under_lock(tx, prepared, now)
        licensed = [p for p in prepared if p.licensed]
        if licensed:
            try:
                self.admission.check_licence_slots(tx, len(licensed), now)
            except GovernanceRefusal as exc:  # the batch's first licensed submission is refused
                raise RefusedSubmission(exc, licensed[0].request) from None
        for snapshot in {p.snapshot.config_snapshot_id: p.snapshot for p in prepared}.values():
            tx.snapshot_put(snapshot, now)
        # The runs a person asked for (manual triggers, backfills) append an entry each: with one
        # tenant's, its chain head travels with the insert (locked after the runs' keys, as every
        # path takes them).
        manual_tenants = {p.create.run.tenant_id for p in prepared if p.create.run.trigger_type in REQUESTED}
        audited = next(iter(manual_tenants)) if len(manual_tenants) == 1 else None
        made = tx.runs_create([p.create for p in prepared], audited=audited)
        if licensed:
            tx.licence_slots_take(
                [
                    (run.job_run_id, run.tenant_id)
                    for p, (run, created) in zip(prepared, made, strict=True)
                    if created and p.licensed
                ],
                now,
            )
        manual = [
            manual_scheduling_event(p, run, now)
            for p, (run, created) in zip(prepared, made, strict=True)
            if created and run.trigger_type in REQUESTED
        ]
        if manual:
            tx.audit_append(manual)
        return made

    def resolve_definition(
        self, tx: StoreTx, request: SubmitRequest, cache: dict[tuple[str, str], JobDefinition]
    ) -> JobDefinition:
        """The version a request runs: the one it pins (a workflow step), else the current one."""
        if request.definition_version is not None:
            return self.definitions.get(
                tx, request.scope.tenant_id, request.job_definition_id, request.definition_version
            )
        key = (request.scope.tenant_id, request.job_definition_id)
        if key not in cache:
            cache[key] = self.definitions.get(tx, request.scope.tenant_id, request.job_definition_id)
        return cache[key]

    def resolve_config(
        self,
        definition: JobDefinition,
        scope: Scope,
        safe_mode: SafeModePeriod | None = None,
        policy: Policy | None = None,
    ) -> ConfigSnapshot:
        """The configuration snapshot a run binds: its profile, tenant, safe-mode overrides and
        the scheduler policy's binding."""
        overrides = None if safe_mode is None else safe_mode.actions.get("profile_overrides") or None
        activation = safe_mode.activation if overrides and safe_mode else 0
        key = (definition.config_profile, scope.tenant_id, activation, "" if policy is None else policy.digest)
        cached = self._snapshots.get(key)
        if cached is not None:
            return cached
        binding = None if policy is None else policy.binding
        snapshot = resolve_snapshot(self.config, definition.config_profile, scope.tenant_id, overrides, binding)
        self._snapshots[key] = snapshot
        return snapshot


def read_ahead(tx: StoreTx, request: SubmitRequest, cache: dict[tuple[str, str], JobDefinition]) -> None:
    """Ask what ``prepare_one`` reads first (the definition's current version, its approvals,
    the tenant's safe mode) in one round trip, unless the batch read that definition already."""
    pair = (request.scope.tenant_id, request.job_definition_id)
    if request.definition_version is None and pair not in cache:
        tx.read_ahead(*pair)


def refuse_retired(tx: StoreTx, fresh: Sequence[PreparedSubmission]) -> None:
    """One run per trigger, ever: a trigger whose run retention deleted (its idempotency key or
    its slot, remembered in ``retired_runs``) has had its run, and is refused, naming it."""
    retired = tx.runs_retired_holders([p.create.run for p in fresh])
    if not retired:
        return
    first = next(iter(retired.values()))
    raise ConflictError(
        f"this trigger's run {first.job_run_id} ({first.status}, created {isoformat_utc(first.created_at)}) was"
        f" retired by retention at {isoformat_utc(first.retired_at)}: a trigger has one run, ever",
        field="idempotency_key",
    )


def settle_retry_sources(tx: StoreTx, fresh: Sequence[PreparedSubmission], now: datetime) -> None:
    """A retry is made only while its source run has ended, decided under a lock on the source
    (a requeue takes the same one): a requeue that committed while the retry was prepared has
    put the source back to work, and both would run it. The source's open dead letter, if any,
    is resolved by the retry (its work goes on there; a requeue of it is refused from now on),
    so it leaves the queue of letters waiting for someone and retention may retire it."""
    for p in fresh:
        retry = p.create.run
        if retry.retry_of is None:
            continue
        source = tx.run_lock(retry.retry_of)
        refusal = None if source is None else retry_refusal(source.status)
        if source is None or refusal is not None:
            why = "is gone" if source is None else f"was requeued meanwhile ({refusal})"
            raise ConflictError(f"run {retry.retry_of} {why}: its retry is not made", field="status")
        letter = tx.dead_letter_open_for(source.job_run_id)
        if letter is None and letter_closed(tx, source):  # closed after the retry was prepared
            raise ConflictError(
                f"run {retry.retry_of}'s dead letter was closed (no more attempts): its retry is not made",
                field="status",
            )
        if letter is not None:
            tx.dead_letter_resolve(letter.dead_letter_id, f"retried as {retry.job_run_id} by {retry.requested_by}", now)


def existing_results(tx: StoreTx, prepared: Sequence[PreparedSubmission]) -> dict[str, JobRun]:
    """Seed §11 ``job_already_completed``: a trigger whose run exists gets that run back,
    whatever its state, and nothing is written for it. Found by idempotency key, or by slot
    (a schedule's slot has one run even when the configuration, so the key, changed since);
    keyed by the prepared run's idempotency key."""
    return tx.run_holders([p.create.run for p in prepared])


RETRIED = "run.retried"
BACKFILLED = "run.backfilled"
# Trigger types a person asks for, one run at a time or a range of slots at once: each run they
# make is a material action (seed §49), audited with the run.
REQUESTED = frozenset({TriggerType.MANUAL, TriggerType.BACKFILL})


def manual_scheduling_event(prepared: PreparedSubmission, run: JobRun, now: datetime) -> AuditEvent:
    """Seed §49: manual scheduling is a material action, audited with the run it made. A retry
    (seed 001) is that one entry too, as ``run.retried`` naming its source run, and a backfilled
    slot's run as ``run.backfilled`` (its reason names the range and the schedule): committed with
    the run, so exactly one per run created, none when the insert found the run there."""
    payload: dict[str, object] = {
        "job_definition_id": run.job_definition_id,
        "definition_digest": run.definition_digest,
        "config_digest": run.config_digest,
        "idempotency_key": run.idempotency_key,
    }
    if run.retry_of is not None:
        payload["retry_of"] = run.retry_of
    event = AuditEvent(
        tenant_id=run.tenant_id,
        actor=run.requested_by or SYSTEM_ACTOR,
        action=(
            RETRIED
            if run.retry_of is not None
            else BACKFILLED
            if run.trigger_type is TriggerType.BACKFILL
            else "run.scheduled_manually"
        ),
        target_type="run",
        target_id=run.job_run_id,
        at=now,
        reason=prepared.create.trigger.get("reason"),
        payload=payload,
    )
    return attributed(event, prepared.acting)  # the caller's credential, whoever stores it


def compute_idempotency_key(
    definition: JobDefinition, trigger: Trigger, request: SubmitRequest, snapshot: ConfigSnapshot
) -> str:
    """Seed §24: definition, trigger identity, scope, config digest and window; a retry of a
    terminal run is keyed by its source run alone."""
    if request.run_key is not None:
        return request.run_key
    if request.retry_of is not None:
        return retry_key(request.scope.tenant_id, request.retry_of)
    if request.client_key is not None:
        return client_request_key(request.scope.tenant_id, request.client_key)
    return idempotency_key(
        job_definition_id=definition.job_definition_id,
        trigger=trigger,
        scope=request.scope.as_dict(),
        config_digest=snapshot.config_digest,
        policy=definition.idempotency_policy,
    )


def check_active(definition: JobDefinition) -> None:
    """An inactive definition is refused as invalid input before any gate is asked."""
    if definition.status is not DefinitionStatus.ACTIVE:
        raise ValidationError(
            f"definition is {definition.status.value}; only active definitions run",
            field="status",
            source=definition.job_definition_id,
        )


def same_params(
    definitions: Definitions,
    tx: StoreTx,
    tenant_id: str,
    job_definition_id: str,
    asked: Mapping[str, Any],
    stored: Mapping[str, Any],
    *,
    version: int | None = None,
) -> bool:
    """Whether parameters ``asked`` again are those ``stored`` with an earlier request, value by
    value as the definition (``version``, else its current one) reads them: a default left out
    is the default, ``12.5`` the decimal ``12.50``, ``+007`` the integer ``7``. Parameters it
    does not take are not the same request. How a repeated key is judged, for runs and
    workflow runs alike."""
    try:
        definition = definitions.get(tx, tenant_id, job_definition_id, version)
        return validate_params(definition.params, asked) == dict(stored)
    except JobgateError:
        return False


def validate_preconditions(definition: JobDefinition, request: SubmitRequest) -> dict[str, str]:
    """Refuse what must never run: an inactive definition, bad params (seed 000 §58)."""
    check_active(definition)
    for name, document in (("payload", request.payload), ("policy_context", request.policy_context)):
        try:
            canonical_json(document)  # stored as JSON: NaN, Infinity and non-JSON types refused here
        except ValueError as exc:
            raise ValidationError(str(exc), field=name, source=definition.job_definition_id) from None
    return validate_params(definition.params, request.params, source=definition.job_definition_id)


def build_trigger(request: SubmitRequest, now: datetime) -> Trigger:
    """The trigger record: its id from the request's, the caller's, or the batch window's."""
    request_id = request.request_id
    if request.trigger_type is TriggerType.MANUAL and request_id is None:
        request_id = f"REQ-{uuid.uuid4().hex}"
    if request.trigger_id:
        trigger_id = request.trigger_id
    elif request_id:
        trigger_id = f"TGTRIG-{request_id}"
    elif request.window is not None:  # a batch window identifies the trigger: one run per window
        trigger_id = f"TGTRIG-window-{request.window.start.isoformat()}-{request.window.end.isoformat()}"
    else:
        trigger_id = f"TGTRIG-{uuid.uuid4().hex}"
    if request.trigger_type in (TriggerType.EVENT, TriggerType.QUEUE) and not request.source_event_id:
        raise ValidationError("event triggers need the source event id", field="source_event_id")
    return Trigger(
        trigger_id=trigger_id,
        trigger_type=request.trigger_type,
        requested_by=request.requested_by,
        reason=request.reason,
        source_event_id=request.source_event_id,
        request_id=request_id,
        event_type=request.event_type,
        source_engine_meid=request.source_engine_meid,
        source_engine_cmi=request.source_engine_cmi,
        window=request.window,
        policy_context=dict(request.policy_context),
        payload=dict(request.payload),
        created_at=now,
        role=request.role,
    )


def _activation(fact: SafeModeFact | None) -> int | None:
    return None if fact is None else fact.activation
