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

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobgate import trust
from jobgate.clock import Clock
from jobgate.config import JobgateConfig
from jobgate.core.audit import AuditEvent
from jobgate.core.canonical import canonical_json
from jobgate.core.errors import GovernanceRefusal, JobgateError, NotFoundError, ValidationError
from jobgate.core.governance import ApprovalFact, Facts, Moment, TrustFact, admit
from jobgate.core.idempotency import client_request_key, idempotency_key, retry_key
from jobgate.core.models import (
    ConfigSnapshot,
    DefinitionStatus,
    ExecutionWindow,
    JobDefinition,
    JobRun,
    Scope,
    Trigger,
    TriggerType,
)
from jobgate.core.params import validate_params
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryPolicy, TimeoutPolicy
from jobgate.core.policy import Policy
from jobgate.core.records import AuditFilter, SafeModePeriod
from jobgate.core.runs import new_run, trigger_document
from jobgate.definitions.schema import LoadedDefinition, parse_definition
from jobgate.governance.code import CodeReader, check_trusted, resolve_handler
from jobgate.policy import PolicyFile
from jobgate.scheduling.model import schedule_document
from jobgate.scheduling.owned import owned_schedule, owned_schedule_id
from jobgate.scheduling.records import OWNED_SOURCE, PAUSED_UNAPPROVED, ScheduleChange
from jobgate.service import gates
from jobgate.snapshots import resolve_snapshot
from jobgate.store.base import DefinitionPut, RunCreate, StoredDefinition
from jobgate.store.sqlstore import Store, StoreTx

SYSTEM_ACTOR = "system"
SYSTEM_TENANT = "_system"  # the deployment's own audit chain (the scheduler policy)
log = logging.getLogger("jobgate.engine")

# What a batch learnt of approvals, by (tenant, definition, digest): the active approval's fact
# (with the code digest it binds, recorded in each run it admits), or None (not approved).
Approved = dict[tuple[str, str, str], ApprovalFact | None]


def approval_fact(active: Mapping[tuple[str, str, str], str | None], key: tuple[str, str, str]) -> ApprovalFact | None:
    """The admission rule's approval fact for ``key`` from ``StoreTx.approvals_active``'s answer."""
    return ApprovalFact(key[2], active[key], gates.EPOCH) if key in active else None


@dataclass(frozen=True)
class SubmitRequest:
    """One trigger for one definition. ``request_id`` makes a manual submission idempotent."""

    job_definition_id: str
    trigger_type: TriggerType = TriggerType.MANUAL
    params: dict[str, Any] = field(default_factory=dict)
    scope: Scope = field(default_factory=Scope)
    requested_by: str | None = None
    reason: str | None = None
    request_id: str | None = None
    trigger_id: str | None = None
    source_event_id: str | None = None
    event_type: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    policy_context: dict[str, Any] = field(default_factory=dict)
    due_at: datetime | None = None
    window: ExecutionWindow | None = None  # batch runs: the [start, end) they cover, part of the key
    retry_of: str | None = None  # the terminal run this one retries: the key derives from it alone
    # A caller's idempotency key (API ``Idempotency-Key``): the run's key derives from it and
    # the tenant alone, so the same key always finds the same run, whatever else changed.
    client_key: str | None = None
    role: str | None = None  # the requester's role, when a token asked (scheduler policy ceilings)
    via_request: bool = False  # set only by an approved four-eyes request (safe mode's manual review)
    workflow_run_id: str | None = None  # a workflow step's run: the workflow it belongs to
    # A workflow step runs the version of its definition the workflow pinned at its start, under
    # a key derived from the workflow and the step alone (never from a caller's key: a caller
    # cannot claim a step's run by choosing an Idempotency-Key).
    definition_version: int | None = None
    run_key: str | None = None
    # A workflow step may name its own policies instead of its definition's (seed 000 §8 steps).
    retry_policy: str | None = None
    timeout_policy: str | None = None
    # When the admission rule is asked (``core.governance.Moment``); None: a trigger, or a
    # workflow step when ``workflow_run_id`` is set.
    moment: Moment | None = None
    # A schedule's slot (``schedule_id@instant``): the one run it may ever have, whatever the
    # key (which includes the configuration digest) says. Set by the scheduler and by backfill.
    slot: str | None = None


@dataclass(frozen=True)
class SubmitResult:
    run: JobRun
    created: bool


@dataclass(frozen=True)
class ApplyResult:
    job_definition_id: str
    version: int
    digest: str
    created: bool
    source: str | None


@dataclass(frozen=True)
class TrustGates:
    licence: trust.LicenceFile
    environment: trust.EnvironmentCheck


@dataclass(frozen=True)
class PreparedSubmission:
    """A validated submission, built and ready to store. ``licensed``: its definition declares
    permissions, so the run holds one of the licence's concurrent slots while open. ``facts``:
    what the admission rule admitted it on; under the write lock they are gathered again."""

    create: RunCreate
    snapshot: ConfigSnapshot
    licensed: bool = False
    request: SubmitRequest | None = None
    facts: Facts | None = None
    actor: str | None = None


class Engine:
    """The service layer over one store and one configuration."""

    def __init__(self, store: Store, config: JobgateConfig, clock: Clock | None = None) -> None:
        self.store = store
        self.config = config
        self.clock = clock or store.clock()  # database time on a shared database
        # Snapshots are a pure function of (configuration, profile, tenant): digesting the
        # profile's values once per submit was a third of a submit's CPU.
        self._snapshots: dict[tuple[str, str, int, str], tuple[JobgateConfig, ConfigSnapshot]] = {}
        self._policy_file: tuple[JobgateConfig, PolicyFile] | None = None
        self._gates: tuple[JobgateConfig, TrustGates] | None = None
        self._code: tuple[JobgateConfig, CodeReader] | None = None

    def code_reader(self) -> CodeReader:
        """What code definitions execute on this host (shared by approvals and the workers)."""
        if self._code is None or self._code[0] is not self.config:
            self._code = (self.config, CodeReader(self.config.registries, self.config.base_dir))
        return self._code[1]

    # ------------------------------------------------------------------ definitions
    def apply_definitions(
        self,
        loaded: Sequence[LoadedDefinition],
        *,
        tenant_id: str | None = None,
        progress: Callable[[int], None] | None = None,
        applied_by: str = SYSTEM_ACTOR,
        applied_lineage: tuple[str, ...] = (),
    ) -> list[ApplyResult]:
        """Store every definition or none: one transaction for the whole load. ``applied_by``
        (and who minted their credential, ``applied_lineage``) is recorded with each new version:
        four eyes keeps them from approving it."""
        for item in loaded:
            check_executable(item, self.config.worker.trusted_handlers)
        now = self.clock.now()
        out: list[ApplyResult] = []
        with self.store.write() as tx:
            tx.gates_closing()  # a status in the files may suspend or retire a definition
            for item in loaded:
                d = item.definition
                result = tx.definition_put(
                    DefinitionPut(
                        tenant_id=tenant_id or d.tenant_id,
                        job_definition_id=d.job_definition_id,
                        digest=d.digest,
                        content=d.content,
                        job_code=d.job_code,
                        job_class=d.job_class.value,
                        status=item.status,
                        source=item.source,
                        now=now,
                        applied_by=applied_by,
                        applied_lineage=applied_lineage,
                    )
                )
                out.append(
                    ApplyResult(d.job_definition_id, result.definition.version, d.digest, result.created, item.source)
                )
                if result.created:
                    self.keep_owned_schedule(tx, tenant_id or d.tenant_id, d, actor=applied_by, now=now)
                if progress:
                    progress(1)
        return out

    def keep_owned_schedule(
        self, tx: StoreTx, tenant_id: str, definition: JobDefinition, *, actor: str, now: datetime
    ) -> None:
        """A new version's own schedule (``trigger_type`` + ``schedule_expression``), in the
        version's transaction: stored paused until the version is approved (the approval resumes
        it), removed when the version declares none. A schedule of that name stored by someone
        else is not taken over: the apply is refused."""
        name = owned_schedule_id(definition.job_definition_id)
        existing = tx.schedule_get(tenant_id, name)
        if existing is not None and existing.source != OWNED_SOURCE:
            raise ValidationError(
                f"a schedule {name!r} stored by {existing.source} exists: delete or rename it, so the "
                "definition can keep its own",
                field="schedule_expression",
                source=definition.job_definition_id,
            )
        wanted = owned_schedule(
            definition,
            tenant_id=tenant_id,
            anchor=now if existing is None else existing.schedule.anchor,
            timezone=self.config.scheduling.timezone,
            misfire=self.config.scheduling.misfire,
        )
        before = None if existing is None else canonical_json(schedule_document(existing.schedule)).decode()
        if wanted is None:
            if existing is not None:
                tx.schedule_delete(tenant_id, name)
                tx.change_record(tenant_id, name, ScheduleChange(now, "deleted", before, "deleted", True, actor, None))
            return
        wanted = replace(wanted, paused=True)
        made = tx.schedule_put(wanted, watermark=now, source=OWNED_SOURCE, now=now, pause_reason=PAUSED_UNAPPROVED)
        after = canonical_json(schedule_document(wanted)).decode()
        reason = f"version of {definition.job_definition_id}; paused until approved"
        tx.change_record(
            tenant_id, name, ScheduleChange(now, "created" if made else "updated", before, after, True, actor, reason)
        )

    def definition(
        self, tx: StoreTx, tenant_id: str, job_definition_id: str, version: int | None = None
    ) -> JobDefinition:
        stored = tx.definition_get(tenant_id, job_definition_id, version)
        if stored is None:
            raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
        return self.build_definition(stored)

    def build_definition(self, stored: StoredDefinition, config: JobgateConfig | None = None) -> JobDefinition:
        """Re-read stored content through today's registries (a target that vanished is refused),
        or through ``config``'s (an audit replay's: today's with the run's recorded policies)."""
        source = stored.source or f"stored:{stored.job_definition_id}"
        try:
            loaded = parse_definition(stored.content, source, config or self.config)
        except ValidationError as exc:
            if exc.field != "signature":
                raise
            # Stored before signatures were required, or its key is no longer trusted: it
            # stays refused, as a governance refusal (audited), whatever triggers it.
            raise GovernanceRefusal(
                exc.message, code="definition_not_signed", rule="signed_definitions", field="signature"
            ) from None
        if loaded.definition.digest != stored.digest:
            raise ValidationError(
                f"stored content of version {stored.version} no longer matches its digest {stored.digest}",
                field="digest",
                source=source,
            )
        return _with_version(loaded.definition, stored)

    # ------------------------------------------------------------------ the pipeline
    def submit(self, request: SubmitRequest, *, actor: str | None = None) -> SubmitResult:
        return self.submit_many([request], actor=actor)[0]

    def submit_many(self, requests: Sequence[SubmitRequest], *, actor: str | None = None) -> list[SubmitResult]:
        """Submit a batch in one transaction: all are validated before anything is stored.

        Validation and the building of the runs happen in a read transaction, before the write
        lock is taken: on SQLite there is one write lock for every worker and submitter, and
        holding it through this Python work stalled the workers. A definition changed between
        the two transactions is seen as it was at the read, as if the change came just after.
        """
        now = self.clock.now()
        prepared = self.prepare_submissions(requests, now=now, actor=actor)
        try:
            with self.store.write() as tx:
                return self.create_submissions(tx, prepared, now)
        except GovernanceRefusal as exc:  # refused under the write lock (revoked, safe mode, slots): audited
            first = next((r for r, p in zip(requests, prepared, strict=True) if p.licensed), requests[0])
            self.record_refusal(first, exc, actor=actor, now=now)
            raise

    def scheduler_policy(self, *, actor: str | None, now: datetime) -> Policy | None:
        """The scheduler policy in force (re-read when its file changes). A policy whose digest
        differs from the last one recorded is written to the audit log first: a change of the
        rules is itself on the record before it refuses anything."""
        if self._policy_file is None or self._policy_file[0] is not self.config:
            self._policy_file = (self.config, PolicyFile(self.config.policy))
        policy, changed = self._policy_file[1].current()
        if policy is not None and changed:
            with self.store.write() as tx:
                seen = tx.audit_list(AuditFilter(tenant_id=SYSTEM_TENANT, action="policy.loaded", limit=100_000))
                if not seen or seen[-1].event.payload.get("digest") != policy.digest:
                    tx.audit_append(
                        [
                            AuditEvent(
                                SYSTEM_TENANT,
                                actor or SYSTEM_ACTOR,
                                "policy.loaded",
                                "policy",
                                policy.policy_id,
                                now,
                                reason=str(self.config.policy),
                                payload=policy.binding,
                            )
                        ]
                    )
            self._policy_file[1].confirm(policy)  # recorded: from now on it binds without a new entry
        return policy

    def trust_gates(self) -> TrustGates:
        """The licence file and environment check of the current configuration (built once)."""
        if self._gates is None or self._gates[0] is not self.config:
            t = self.config.trust_gates
            gates = TrustGates(
                trust.LicenceFile(t.licence, t.roots()),
                trust.EnvironmentCheck(
                    t.environment_url,
                    ttl=t.environment_ttl.total_seconds(),
                    timeout=t.environment_timeout.total_seconds(),
                ),
            )
            self._gates = (self.config, gates)
        return self._gates[1]

    def prepare_submissions(
        self, requests: Sequence[SubmitRequest], *, now: datetime, actor: str | None = None, record: bool = True
    ) -> list[PreparedSubmission]:
        """Validate and build runs for ``requests`` in a read transaction (all or an error).
        A governance refusal is audited unless ``record`` is off (a dry run records its own
        verdict instead)."""
        cache: dict[tuple[str, str], JobDefinition] = {}
        approved: Approved = {}
        safe_modes: dict[str, SafeModePeriod | None] = {}
        current: SubmitRequest | None = None
        policy = self.scheduler_policy(actor=actor, now=now)
        counts: dict[str, list[int]] = {}  # tenant -> [runs today, open runs], this batch included
        try:
            with self.store.read() as tx:
                out = []
                for current in requests:
                    out.append(
                        self._prepare(
                            tx,
                            current,
                            now=now,
                            actor=actor,
                            cache=cache,
                            approved=approved,
                            safe_modes=safe_modes,
                            policy=policy,
                            counts=counts,
                        )
                    )
                return out
        except GovernanceRefusal as exc:
            assert current is not None
            if record:
                self.record_refusal(current, exc, actor=actor, now=now)
            raise

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
        out: list[PreparedSubmission] = []
        for p in prepared:
            run = p.create.run
            period = periods[run.tenant_id]
            fact = gates.safe_mode_fact(period)
            if p.facts is None or p.request is None:
                out.append(p)
                continue
            seen = p.facts.safe_mode
            if (None if seen is None else seen.activation) != (None if fact is None else fact.activation):
                out.append(self._prepare(tx, p.request, now=now, actor=p.actor, moment=p.facts.moment))
                continue
            key = (run.tenant_id, run.job_definition_id, run.definition_digest)
            approval = approval_fact(active, key)
            if approval != p.facts.approval or fact != seen:  # what the lock shows changed: ask again
                verdict = admit(replace(p.facts, approval=approval, safe_mode=fact))
                if not verdict.admitted:
                    raise verdict.refusal()
            out.append(p)
        return out

    def admission_refusal(
        self, tx: StoreTx, run: JobRun, *, actor: str, now: datetime, policy: Policy | None = None
    ) -> GovernanceRefusal | None:
        """The admission rule for an existing run about to run again (a requeue): the approval
        of the content it was admitted with, signatures, safe mode, trust gates and the licence's
        slots, and the scheduler policy. Inside the caller's write transaction."""
        stored = tx.definition_get(run.tenant_id, run.job_definition_id, run.definition_version)
        if stored is None:
            return GovernanceRefusal("the definition version this run ran is gone", code="definition_not_approved")
        try:
            definition = self.build_definition(stored)
            request = SubmitRequest(
                run.job_definition_id,
                trigger_type=run.trigger_type,
                scope=Scope.from_dict(run.scope),
                requested_by=actor,
                reason=f"requeue of {run.job_run_id}",
                via_request=True,  # an operator's decision on an existing run, not a new manual run
            )
            # The policy was fetched (and any change audited) before the write transaction.
            self.check_gates(
                tx, definition, request, now, approved={}, safe_modes={}, policy=policy, counts={},
                moment=Moment.REQUEUE,
            )  # fmt: skip
            if definition.content.get("permissions"):
                self.check_licence_slots(tx, 1, now)
        except GovernanceRefusal as exc:
            return exc
        return None

    def creation_facts(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        request: SubmitRequest,
        now: datetime,
        *,
        moment: Moment,
        approved: Approved,
        safe_modes: dict[str, SafeModePeriod | None],
        policy: Policy | None,
        counts: dict[str, list[int]] | None,
    ) -> tuple[Facts, SafeModePeriod | None]:
        """The facts the admission rule judges a new run on (``core.governance``), and the
        tenant's open safe-mode period (its overrides bind the snapshot)."""
        tenant = request.scope.tenant_id
        key = (tenant, definition.job_definition_id, definition.digest)
        if key not in approved:
            approved[key] = approval_fact(tx.approvals_active([key]), key)
        period = self.safe_mode_period(tx, tenant, safe_modes)
        subject = gates.subject_of(
            definition,
            tenant_id=tenant,
            trigger_type=request.trigger_type,
            reviewed=request.via_request,
            reason=request.reason,
            role=request.role,
        )
        trust_fact = None
        if subject.permissions:
            t = self.trust_gates()
            trust_fact = TrustFact(t.licence.state(), t.environment.permissions())
        today = open_runs = 0
        if policy is not None and policy.counts_needed and counts is not None:
            if tenant not in counts:
                day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
                created = tx.runs_created_count(tenant, day, day + timedelta(days=1))
                counts[tenant] = [created, sum(tx.runs_open_counts(tenant).values())]
            today, open_runs = counts[tenant]
        facts = Facts(
            moment=moment,
            subject=subject,
            now=now,
            definition_status=definition.status,
            approval=approved[key],
            safe_mode=gates.safe_mode_fact(period),
            trust=trust_fact,
            policy=policy,
            runs_today=today,
            open_runs=open_runs,
        )
        return facts, period

    def check_gates(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        request: SubmitRequest,
        now: datetime,
        *,
        approved: Approved,
        safe_modes: dict[str, SafeModePeriod | None],
        policy: Policy | None,
        counts: dict[str, list[int]] | None,
        moment: Moment = Moment.TRIGGER,
    ) -> SafeModePeriod | None:
        """The admission rule for a new run (``core.governance.admit``): the first refusal is
        raised. Returns the tenant's open safe-mode period (its overrides bind the snapshot).
        Shared by new triggers, requests, workflow steps and requeues."""
        return self._admit(
            tx, definition, request, now, moment=moment, approved=approved, safe_modes=safe_modes, policy=policy,
            counts=counts,
        )[1]  # fmt: skip

    def _admit(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        request: SubmitRequest,
        now: datetime,
        *,
        moment: Moment,
        approved: Approved,
        safe_modes: dict[str, SafeModePeriod | None],
        policy: Policy | None,
        counts: dict[str, list[int]] | None,
    ) -> tuple[Facts, SafeModePeriod | None]:
        facts, period = self.creation_facts(
            tx, definition, request, now, moment=moment, approved=approved, safe_modes=safe_modes, policy=policy,
            counts=counts,
        )  # fmt: skip
        verdict = admit(facts)
        if not verdict.admitted:
            raise verdict.refusal()
        tenant = request.scope.tenant_id
        if counts is not None and tenant in counts:  # the runs this batch admits count against the next ones
            counts[tenant][0] += 1
            counts[tenant][1] += 1
        if "workflow" in definition.content and moment is not Moment.REQUEUE:
            self.check_workflow_steps(tx, definition, tenant, approved)
        return facts, period

    def check_workflow_steps(self, tx: StoreTx, definition: JobDefinition, tenant: str, approved: Approved) -> None:
        """A workflow fired as a run starts its steps: each step's definition must be approved
        now, or the trigger is refused before anything is stored (not a run that fails later)."""
        from jobgate.workflows.spec import workflow_spec_of

        for job in workflow_spec_of(definition.content, definition.job_definition_id).jobs:
            try:
                step = self.definition(tx, tenant, job)
            except NotFoundError:
                raise ValidationError(f"step job {job!r} is not a known definition", field="workflow.steps") from None
            self.check_approved(tx, step, tenant, approved)

    def check_licence_slots(self, tx: StoreTx, wanted: int, now: datetime) -> None:
        """The licence's concurrent runs, cluster-wide: counting locks the licence counter row,
        so creations of licensed runs queue here (inside the caller's write transaction)."""
        licence = self.trust_gates().licence.state().licence
        if licence is None or licence.max_concurrent_runs is None:
            return
        held = tx.licence_slots_taken(now)
        if held + wanted > licence.max_concurrent_runs:
            raise GovernanceRefusal(
                f"the licence allows {licence.max_concurrent_runs} licensed runs at once; {held} are open",
                code="trust_gate_refused",
                rule="licence_concurrency",
                field="permissions",
            )

    def record_refusal_for(
        self, prepared: PreparedSubmission, exc: GovernanceRefusal, *, actor: str | None, now: datetime
    ) -> None:
        run = prepared.create.run
        request = SubmitRequest(
            run.job_definition_id,
            trigger_type=run.trigger_type,
            scope=Scope.from_dict(run.scope),
            requested_by=run.requested_by,
            trigger_id=run.trigger_id,
        )
        self.record_refusal(request, exc, actor=actor, now=now)

    def record_refusal(
        self, request: SubmitRequest, exc: GovernanceRefusal, *, actor: str | None, now: datetime
    ) -> None:
        """A governance refusal is itself a material fact: it goes to the audit log (in its own
        transaction, since nothing else is written), whatever trigger was refused."""
        event = self.refusal_event(request, exc, actor=actor, now=now)
        with self.store.write() as tx:
            tx.audit_append([event])

    def refusal_event(
        self, request: SubmitRequest, exc: GovernanceRefusal, *, actor: str | None, now: datetime
    ) -> AuditEvent:
        return AuditEvent(
            tenant_id=request.scope.tenant_id,
            actor=actor or request.requested_by or SYSTEM_ACTOR,
            action="run.refused",
            target_type="definition",
            target_id=request.job_definition_id,
            at=now,
            reason=exc.code,
            payload={
                "rule": exc.rule,
                "message": exc.message,
                "trigger_type": request.trigger_type.value,
                "trigger_id": request.trigger_id,
                "request_id": request.request_id,
                "workflow_run_id": request.workflow_run_id,
            },
        )

    def create_submissions(
        self, tx: StoreTx, prepared: Sequence[PreparedSubmission], now: datetime
    ) -> list[SubmitResult]:
        """Store prepared submissions inside the caller's write transaction (the scheduler
        advances a schedule's watermark in the same one)."""
        existing = self.existing_results(tx, prepared)
        fresh = [p for p in prepared if p.create.run.idempotency_key not in existing]
        created = iter(self.acquire_lock_and_create(tx, fresh, now))
        out: list[SubmitResult] = []
        for p in prepared:
            key = p.create.run.idempotency_key
            if key in existing:
                out.append(SubmitResult(existing[key], False))
            else:
                out.append(SubmitResult(*next(created)))
        return out

    def existing_results(self, tx: StoreTx, prepared: Sequence[PreparedSubmission]) -> dict[str, JobRun]:
        """Seed §11 ``job_already_completed``: a trigger whose run exists gets that run back,
        whatever its state, and nothing is written for it. Found by idempotency key, or by slot
        (a schedule's slot has one run even when the configuration, so the key, changed since);
        keyed by the prepared run's idempotency key."""
        return tx.run_holders([p.create.run for p in prepared])

    def acquire_lock_and_create(
        self, tx: StoreTx, prepared: Sequence[PreparedSubmission], now: datetime
    ) -> list[tuple[JobRun, bool]]:
        """Seed §11 ``acquire_execution_lock`` + ``create_job_run``: the run row is the lock. Its
        idempotency key is unique and it is inserted with ON CONFLICT DO NOTHING, so of
        concurrent identical triggers exactly one creates it; the others get it back. Returns
        one (run, created) per entry of ``prepared``, in order."""
        if not prepared:
            return []
        prepared = self.recheck_under_lock(tx, prepared, now)
        licensed = [p for p in prepared if p.licensed]
        if licensed:
            self.check_licence_slots(tx, len(licensed), now)
        for snapshot in {p.snapshot.config_snapshot_id: p.snapshot for p in prepared}.values():
            tx.snapshot_put(snapshot, now)
        made = tx.runs_create([p.create for p in prepared])
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
            AuditEvent(
                tenant_id=run.tenant_id,
                actor=run.requested_by or SYSTEM_ACTOR,
                action="run.scheduled_manually",  # seed §49: manual scheduling is a material action
                target_type="run",
                target_id=run.job_run_id,
                at=now,
                reason=p.create.trigger.get("reason"),
                payload={
                    "job_definition_id": run.job_definition_id,
                    "definition_digest": run.definition_digest,
                    "config_digest": run.config_digest,
                    "idempotency_key": run.idempotency_key,
                },
            )
            for p, (run, created) in zip(prepared, made, strict=True)
            if created and run.trigger_type is TriggerType.MANUAL
        ]
        if manual:
            tx.audit_append(manual)
        return made

    def _prepare(
        self,
        tx: StoreTx,
        request: SubmitRequest,
        *,
        now: datetime,
        actor: str | None,
        cache: dict[tuple[str, str], JobDefinition] | None = None,
        approved: Approved | None = None,
        safe_modes: dict[str, SafeModePeriod | None] | None = None,
        policy: Policy | None = None,
        counts: dict[str, list[int]] | None = None,
        moment: Moment | None = None,
    ) -> PreparedSubmission:
        definition = self.resolve_definition(tx, request, {} if cache is None else cache)
        self.check_active(definition)
        moment = moment or request.moment
        if moment is None:
            moment = Moment.WORKFLOW_STEP if request.workflow_run_id is not None else Moment.TRIGGER
        facts, period = self._admit(
            tx, definition, request, now, moment=moment, approved={} if approved is None else approved,
            safe_modes={} if safe_modes is None else safe_modes, policy=policy, counts=counts,
        )  # fmt: skip
        permissions = tuple(definition.content.get("permissions") or ())
        snapshot = self.resolve_config(definition, request.scope, period, policy)
        params = self.validate_preconditions(definition, request)
        trigger = self.build_trigger(request, now)
        retry, timeout = self.policies_for(definition)
        if request.retry_policy is not None:
            retry = retry_policy(self.config, request.retry_policy)
        if request.timeout_policy is not None:
            timeout = timeout_policy(self.config, request.timeout_policy)
        key = self.compute_idempotency_key(definition, trigger, request, snapshot)
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
        )
        if request.workflow_run_id is not None:
            run = run.evolve(workflow_run_id=request.workflow_run_id)
        if request.slot is not None:
            run = run.evolve(slot=request.slot)
        if request.via_request:  # a second person reviewed it: its approver (safe mode's manual review)
            run = run.evolve(reviewed_by=actor or request.requested_by or SYSTEM_ACTOR)
        trigger_doc = trigger_document(trigger)
        return PreparedSubmission(
            RunCreate(run, trigger_doc, transitions, definition.concurrency_limit, definition.rate_limit_per_second),
            snapshot,
            licensed=bool(permissions),
            request=request,
            facts=facts,
            actor=actor,
        )

    def compute_idempotency_key(
        self, definition: JobDefinition, trigger: Trigger, request: SubmitRequest, snapshot: ConfigSnapshot
    ) -> str:
        """Seed §24: definition, trigger identity, scope, config digest and window; a retry of a
        terminal run is keyed by its source run alone."""
        if request.run_key is not None:
            return request.run_key
        if request.retry_of is not None:
            return retry_key(request.retry_of)
        if request.client_key is not None:
            return client_request_key(request.scope.tenant_id, request.client_key)
        return idempotency_key(
            job_definition_id=definition.job_definition_id,
            trigger=trigger,
            scope=request.scope.as_dict(),
            config_digest=snapshot.config_digest,
        )

    def resolve_definition(
        self, tx: StoreTx, request: SubmitRequest, cache: dict[tuple[str, str], JobDefinition]
    ) -> JobDefinition:
        if request.definition_version is not None:
            return self.definition(tx, request.scope.tenant_id, request.job_definition_id, request.definition_version)
        key = (request.scope.tenant_id, request.job_definition_id)
        if key not in cache:
            cache[key] = self.definition(tx, request.scope.tenant_id, request.job_definition_id)
        return cache[key]

    def check_approved(self, tx: StoreTx, definition: JobDefinition, tenant_id: str, approved: Approved) -> None:
        """Seed 004: nothing runs unless an admin approved this exact content (its digest): the
        admission rule's approval check alone (a workflow's step definitions)."""
        key = (tenant_id, definition.job_definition_id, definition.digest)
        if key not in approved:
            approved[key] = approval_fact(tx.approvals_active([key]), key)
        subject = gates.subject_of(definition, tenant_id=tenant_id, trigger_type=TriggerType.WORKFLOW)
        facts = Facts(
            Moment.WORKFLOW_STEP,
            replace(subject, permissions=()),
            gates.EPOCH,
            approval=approved[key],
        )
        verdict = admit(facts)
        if not verdict.admitted:
            raise verdict.refusal()

    def safe_mode_period(
        self, tx: StoreTx, tenant_id: str, cache: dict[str, SafeModePeriod | None]
    ) -> SafeModePeriod | None:
        """The tenant's open safe-mode period, read once per batch."""
        if tenant_id not in cache:
            latest = tx.safe_mode_current(tenant_id)
            cache[tenant_id] = latest if latest is not None and latest.active else None
        return cache[tenant_id]

    def resolve_config(
        self,
        definition: JobDefinition,
        scope: Scope,
        safe_mode: SafeModePeriod | None = None,
        policy: Policy | None = None,
    ) -> ConfigSnapshot:
        overrides = None if safe_mode is None else safe_mode.actions.get("profile_overrides") or None
        activation = safe_mode.activation if overrides and safe_mode else 0
        key = (definition.config_profile, scope.tenant_id, activation, "" if policy is None else policy.digest)
        cached = self._snapshots.get(key)
        if cached is not None and cached[0] is self.config:  # a replaced configuration misses
            return cached[1]
        binding = None if policy is None else policy.binding
        snapshot = resolve_snapshot(self.config, definition.config_profile, scope.tenant_id, overrides, binding)
        self._snapshots[key] = (self.config, snapshot)
        return snapshot

    def check_active(self, definition: JobDefinition) -> None:
        """An inactive definition is refused as invalid input before any gate is asked."""
        if definition.status is not DefinitionStatus.ACTIVE:
            raise ValidationError(
                f"definition is {definition.status.value}; only active definitions run",
                field="status",
                source=definition.job_definition_id,
            )

    def validate_preconditions(self, definition: JobDefinition, request: SubmitRequest) -> dict[str, str]:
        """Refuse what must never run: an inactive definition, bad params (seed 000 §58)."""
        self.check_active(definition)
        for name, document in (("payload", request.payload), ("policy_context", request.policy_context)):
            try:
                canonical_json(document)  # stored as JSON: NaN, Infinity and non-JSON types refused here
            except ValueError as exc:
                raise ValidationError(str(exc), field=name, source=definition.job_definition_id) from None
        return validate_params(definition.params, request.params, source=definition.job_definition_id)

    def build_trigger(self, request: SubmitRequest, now: datetime) -> Trigger:
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
            window=request.window,
            policy_context=dict(request.policy_context),
            payload=dict(request.payload),
            created_at=now,
        )

    def policies_for(self, definition: JobDefinition) -> tuple[RetryPolicy, TimeoutPolicy | None]:
        return retry_policy(self.config, definition.retry_policy), timeout_policy(
            self.config, definition.timeout_policy
        )


def check_executable(item: LoadedDefinition, trusted: Sequence[str]) -> None:
    """Refuse, before anything is stored, a handler that cannot be imported here (a typo, a
    missing package): otherwise it would be found only when a run fails at its first attempt;
    and one that asks for jobgate's host from a module nobody trusted (``governance.code``)."""
    spec = item.definition.executor
    if spec.kind == "python" and spec.handler:
        try:
            check_trusted(spec.handler, resolve_handler(spec.handler), trusted)
        except ValidationError as exc:
            raise ValidationError(exc.message, field="handler", source=item.source) from None


_bound_policies: dict[int, tuple[object, RetryPolicy]] = {}


def run_retry_policy(config: JobgateConfig, run: JobRun) -> RetryPolicy:
    """The retry policy a run was admitted under (bound at creation), else the named one."""
    if run.bound_retry_policy is None:
        return retry_policy(config, run.retry_policy)
    # Rows decoded by the store share one document per distinct policy (codec.shared_loads), so
    # the identity of the document is a cheap cache key; the entry keeps the document alive so
    # its id cannot be reused while cached.
    doc = run.bound_retry_policy
    cached = _bound_policies.get(id(doc))
    if cached is not None and cached[0] is doc:
        return cached[1]
    policy = RetryPolicy.from_dict(dict(doc), source=f"run {run.job_run_id}")
    if len(_bound_policies) >= 1024:
        _bound_policies.clear()
    _bound_policies[id(doc)] = (doc, policy)
    return policy


def settling_policy(config: JobgateConfig, run: JobRun) -> RetryPolicy:
    """The policy that settles an attempt of ``run``. A run whose policy can no longer be
    resolved still has to end (never hold a lease forever): it settles with no retry."""
    try:
        return run_retry_policy(config, run)
    except JobgateError:
        log.exception(
            "run %s: retry policy %s cannot be resolved; settling without retry", run.job_run_id, run.retry_policy
        )
        return BUILTIN_RETRY_POLICIES["no_retry_v1"]


def retry_policy(config: JobgateConfig, policy_id: str) -> RetryPolicy:
    try:
        return config.retry_policies[policy_id]
    except KeyError:
        raise ValidationError(f"unknown retry policy {policy_id!r}", field="retry_policy") from None


def timeout_policy(config: JobgateConfig, policy_id: str | None) -> TimeoutPolicy | None:
    if policy_id is None:
        return None
    try:
        return config.timeout_policies[policy_id]
    except KeyError:
        raise ValidationError(f"unknown timeout policy {policy_id!r}", field="timeout_policy") from None


def _with_version(d: JobDefinition, stored: StoredDefinition) -> JobDefinition:
    from dataclasses import replace

    return replace(d, version=stored.version, status=stored.status, tenant_id=stored.tenant_id)
