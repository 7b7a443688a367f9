"""The admission rule at a run's creation: the facts gathered, the rule asked, a refusal audited.

Every way a run comes into being (a trigger, a request's dry run or approval, a workflow step,
a requeue) asks ``core.governance.admit`` through ``Admission.check`` with the facts of its
moment: the definition version's status and approval, the tenant's safe-mode period, the trust
gates, the scheduler policy and its counts. The attempt side of the same rule is
``service.gates.AttemptGate``. A refusal is itself a material fact and goes to the audit log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from jobgate.config import JobgateConfig
from jobgate.core.audit import AuditEvent
from jobgate.core.errors import GovernanceRefusal, JobgateError
from jobgate.core.governance import Facts, Moment, TrustFact, admit
from jobgate.core.models import JobDefinition, JobRun, Scope, TriggerType
from jobgate.core.policy import Policy
from jobgate.core.records import AuditFilter, SafeModePeriod
from jobgate.governance import trust
from jobgate.governance.policy_file import PolicyFile
from jobgate.service import gates
from jobgate.service.definitions import Definitions
from jobgate.service.submission import (
    SYSTEM_ACTOR,
    SYSTEM_TENANT,
    Approved,
    PreparedSubmission,
    RefusedSubmission,
    SubmitRequest,
    approval_fact,
)
from jobgate.store.sqlstore import Store, StoreTx


@dataclass(frozen=True)
class TrustGates:
    licence: trust.LicenceFile
    environment: trust.EnvironmentCheck


@dataclass
class AdmissionBatch:
    """What the admissions of one batch share: the scheduler policy fetched once for it (any
    change audited first), the approvals and safe-mode periods read so far, and each tenant's
    counts with the runs this batch admitted already (the policy's quotas count them). A batch
    of one is ``AdmissionBatch(policy)``; a submission prepared again under the write lock keeps
    the policy its batch was admitted under."""

    policy: Policy | None = None
    approved: Approved = field(default_factory=dict)
    safe_modes: dict[str, SafeModePeriod | None] = field(default_factory=dict)
    counts: dict[str, list[int]] = field(default_factory=dict)  # tenant -> [runs today, open runs]


class Admission:
    """The creation side of the admission rule, over one store and one configuration."""

    def __init__(self, store: Store, config: JobgateConfig, definitions: Definitions) -> None:
        self.store = store
        self.config = config
        self.definitions = definitions
        self._policy_file = PolicyFile(config.policy, config.job_classes)

    @cached_property
    def trust_gates(self) -> TrustGates:
        """The licence file and environment check of the configuration (built at first need: a
        deployment without licensed definitions never reads the licence's trust roots)."""
        t = self.config.trust_gates
        return TrustGates(
            trust.LicenceFile(t.licence, t.roots()),
            trust.EnvironmentCheck(
                t.environment_url, ttl=t.environment_ttl.total_seconds(), timeout=t.environment_timeout.total_seconds()
            ),
        )

    def scheduler_policy(self, *, actor: str | None, now: datetime) -> Policy | None:
        """The scheduler policy in force (re-read when its file changes). A policy whose digest
        differs from the last one recorded is written to the audit log first: a change of the
        rules is itself on the record before it refuses anything."""
        policy, changed = self._policy_file.current()
        if policy is not None and changed:
            with self.store.write() as tx:
                seen = tx.audit_list(AuditFilter(tenant_id=SYSTEM_TENANT, action="policy.loaded", limit=100_000))
                if not seen or seen[-1].event.payload.get("digest") != policy.digest:
                    event = AuditEvent(
                        SYSTEM_TENANT,
                        actor or SYSTEM_ACTOR,
                        "policy.loaded",
                        "policy",
                        policy.policy_id,
                        now,
                        reason=str(self.config.policy),
                        payload=policy.binding,
                    )
                    tx.audit_append([event])
            self._policy_file.confirm(policy)  # recorded: from now on it binds without a new entry
        return policy

    def facts(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        request: SubmitRequest,
        now: datetime,
        *,
        moment: Moment,
        batch: AdmissionBatch,
    ) -> tuple[Facts, SafeModePeriod | None]:
        """The facts the admission rule judges a new run on (``core.governance``), and the
        tenant's open safe-mode period (its overrides bind the snapshot)."""
        tenant = request.scope.tenant_id
        approved, policy, counts = batch.approved, batch.policy, batch.counts
        key = (tenant, definition.job_definition_id, definition.digest)
        if key not in approved:
            approved[key] = approval_fact(tx.approvals_active([key]), key)
        period = self.safe_mode_period(tx, tenant, batch.safe_modes)
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
            trust_fact = TrustFact(self.trust_gates.licence.state(), self.trust_gates.environment.permissions())
        today = open_runs = 0
        if policy is not None and policy.counts_needed:
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

    def check(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        request: SubmitRequest,
        now: datetime,
        *,
        moment: Moment,
        batch: AdmissionBatch,
    ) -> tuple[Facts, SafeModePeriod | None]:
        """The admission rule for a new run (``core.governance.admit``): the first refusal is
        raised. Returns the facts it admitted on and the tenant's open safe-mode period (its
        overrides bind the snapshot). Shared by triggers, requests, workflow steps and requeues."""
        facts, period = self.facts(tx, definition, request, now, moment=moment, batch=batch)
        verdict = admit(facts)
        if not verdict.admitted:
            raise verdict.refusal()
        tenant = request.scope.tenant_id
        counts = batch.counts.get(tenant)
        if counts is not None:  # the runs this batch admits count against the next ones
            counts[0] += 1
            counts[1] += 1
        if "workflow" in definition.content and moment is not Moment.REQUEUE:
            self.check_workflow_steps(tx, definition, tenant, batch.approved, request.params)
        return facts, period

    def requeue_refusal(
        self, tx: StoreTx, run: JobRun, *, actor: str, now: datetime, policy: Policy | None = None
    ) -> GovernanceRefusal | None:
        """The admission rule for an existing run about to run again (a requeue): the approval
        of the content it was admitted with, signatures, safe mode, trust gates and the licence's
        slots, and the scheduler policy. Inside the caller's write transaction."""
        stored = tx.definition_get(run.tenant_id, run.job_definition_id, run.definition_version)
        if stored is None:
            return GovernanceRefusal("the definition version this run ran is gone", code="definition_not_approved")
        try:
            definition = self.definitions.build(stored)
            request = SubmitRequest(
                run.job_definition_id,
                trigger_type=run.trigger_type,
                scope=Scope.from_dict(run.scope),
                requested_by=actor,
                reason=f"requeue of {run.job_run_id}",
                # Reviewed only if a second person reviewed the run itself (an approved request):
                # one operator's requeue is not that review, as a retry of the run is not.
                via_request=run.reviewed_by is not None,
            )
            # The policy was fetched (and any change audited) before the write transaction.
            self.check(tx, definition, request, now, moment=Moment.REQUEUE, batch=AdmissionBatch(policy))
            if definition.content.get("permissions"):
                self.check_licence_slots(tx, 1, now)
        except GovernanceRefusal as exc:
            return exc
        return None

    def check_workflow_steps(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        tenant: str,
        approved: Approved,
        params: Mapping[str, object] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """The definitions a workflow's steps and compensations name, for a workflow fired as a
        run or started directly (one rule for both): each must exist, be a job (a step runs a
        job, never another workflow) and be approved now, and (given the workflow's ``params``)
        what each step will be given must fit its definition as far as the start knows it
        (``workflows.inputs``), or the start is refused before anything is stored, not a run
        that fails half way. Returns the version and digest of each, which the steps will run."""
        steps = self.definitions.step_definitions(tx, definition, tenant)
        for step in steps.values():
            self.check_approved(tx, step, tenant, approved)
        if params is not None:
            self.definitions.check_workflow_inputs(tx, definition, tenant, params, steps=steps)
        return {job: {"version": step.version, "digest": step.digest} for job, step in steps.items()}

    def check_approved(self, tx: StoreTx, definition: JobDefinition, tenant_id: str, approved: Approved) -> None:
        """Seed 004: nothing runs unless an admin approved this exact content (its digest): the
        admission rule's approval check alone (a workflow's step definitions)."""
        key = (tenant_id, definition.job_definition_id, definition.digest)
        if key not in approved:
            approved[key] = approval_fact(tx.approvals_active([key]), key)
        subject = gates.subject_of(definition, tenant_id=tenant_id, trigger_type=TriggerType.WORKFLOW)
        facts = Facts(Moment.WORKFLOW_STEP, replace(subject, permissions=()), gates.EPOCH, approval=approved[key])
        verdict = admit(facts)
        if not verdict.admitted:
            raise verdict.refusal()

    def check_licence_slots(self, tx: StoreTx, wanted: int, now: datetime) -> None:
        """The licence's concurrent runs, cluster-wide: counting locks the licence counter row,
        so creations of licensed runs queue here (inside the caller's write transaction)."""
        licence = self.trust_gates.licence.state().licence
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

    def safe_mode_period(
        self, tx: StoreTx, tenant_id: str, cache: dict[str, SafeModePeriod | None]
    ) -> SafeModePeriod | None:
        """The tenant's open safe-mode period, read once per batch."""
        if tenant_id not in cache:
            latest = tx.safe_mode_current(tenant_id)
            cache[tenant_id] = latest if latest is not None and latest.active else None
        return cache[tenant_id]

    def record_refusal_for(
        self, prepared: Sequence[PreparedSubmission], exc: GovernanceRefusal, *, actor: str | None, now: datetime
    ) -> None:
        """``record_refusal`` for submissions refused after they were prepared: the one the
        refusal names (``RefusedSubmission``), else the first."""
        request = exc.request if isinstance(exc, RefusedSubmission) else None
        request = request or prepared[0].request
        if request is None:  # prepared elsewhere: the request as its run tells it
            run = prepared[0].create.run
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
        self.record_refusals([request], exc, actor=actor, now=now)

    def record_refusals(
        self, requests: Sequence[SubmitRequest], exc: GovernanceRefusal, *, actor: str | None, now: datetime
    ) -> None:
        """``record_refusal`` for triggers refused together (a schedule's fires of one tick), one
        entry each, in one transaction: every refused slot is on the record, not only the first."""
        events = [refusal_event(r, exc, actor=actor, now=now) for r in requests]
        with self.store.write() as tx:
            tx.audit_append(events)


def refusal_event(request: SubmitRequest, exc: JobgateError, *, actor: str | None, now: datetime) -> AuditEvent:
    """The ``run.refused`` audit entry of a refused trigger (a governance refusal names its rule;
    another refusal, a definition not found say, its code)."""
    return AuditEvent(
        tenant_id=request.scope.tenant_id,
        actor=actor or request.requested_by or SYSTEM_ACTOR,
        action="run.refused",
        target_type="definition",
        target_id=request.job_definition_id,
        at=now,
        reason=exc.code,
        payload={
            "rule": getattr(exc, "rule", None),
            "message": exc.message,
            **({"field": exc.field} if exc.field else {}),  # what it refused: a param, say
            "trigger_type": request.trigger_type.value,
            "trigger_id": request.trigger_id,
            "request_id": request.request_id,
            "workflow_run_id": request.workflow_run_id,
            # what the refused trigger was, where no trigger id says it (an event, a slot)
            **({"source_event_id": request.source_event_id} if request.source_event_id else {}),
            **({"slot": request.slot} if request.slot else {}),
        },
    )
