"""The shell around the admission rule (``jobgate.core.governance``): it gathers the facts of a
moment, asks ``admit``, and hands back the verdicts. It decides nothing itself.

Two kinds of moment meet the rule here:

- **creations** (a trigger, a request's dry run or approval, a requeue, a workflow step): the
  trigger pipeline builds ``Facts`` from the definition version, the approval rows, the
  tenant's safe-mode period, the trust gates and the policy (``service.admission``), once in the
  read transaction that prepares the run and again under the write lock that stores it;
- **attempts** (``AttemptGate``): a worker's claim asks the gate for every run it is about to
  start, inside the claiming transaction. The claim's candidate read carries the ids of the
  newest active approval, of the open safe-mode period and the definition's lifecycle status;
  the rows behind those ids are immutable (an approval's content never changes, only whether it
  is active, which the id already says), so they are read once and cached. The trust gates and
  the policy are read before the transaction (``AttemptFacts.refresh``): nothing slow happens
  under the database's write lock. The code the worker would run is read off its own disk
  (``jobgate.governance.code``), cached by file identity.

A verdict is judged once per distinct set of facts in a pass: a batch of a thousand runs of one
definition asks the rule once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jobgate.core.code_identity import changed_parts
from jobgate.core.errors import GovernanceRefusal, JobgateError
from jobgate.core.governance import (
    ApprovalFact,
    CodeFact,
    Facts,
    Moment,
    SafeModeFact,
    Subject,
    TrustFact,
    Verdict,
    admit,
)
from jobgate.core.models import DefinitionStatus, JobDefinition, JobRun, TriggerType
from jobgate.core.policy import Policy
from jobgate.core.records import Approval, SafeModePeriod
from jobgate.governance.code import CodeReader
from jobgate.store.sqlstore import StoreTx

if TYPE_CHECKING:  # the engine composes the services that import this module
    from jobgate.service.engine import Engine

log = logging.getLogger("jobgate.gates")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def safe_mode_fact(period: SafeModePeriod | None) -> SafeModeFact | None:
    """The facts of an open safe-mode period (its recorded actions), or None when it is off."""
    if period is None or not period.active:
        return None
    actions = period.actions
    return SafeModeFact(
        period.activation,
        period.reason,
        frozenset(actions.get("suspend_job_classes") or ()),
        bool(actions.get("manual_review")),
    )


def approval_fact(approval: Approval | None) -> ApprovalFact | None:
    if approval is None or not approval.active:
        return None
    return ApprovalFact(approval.digest, approval.code_digest, approval.approved_at)


def subject_of(
    definition: JobDefinition,
    *,
    tenant_id: str,
    trigger_type: TriggerType,
    reviewed: bool = False,
    reason: str | None = None,
    role: str | None = None,
) -> Subject:
    return Subject(
        tenant_id=tenant_id,
        job_definition_id=definition.job_definition_id,
        version=definition.version,
        digest=definition.digest,
        job_class=definition.job_class,
        trigger_type=trigger_type,
        priority=definition.priority.value,
        permissions=tuple(definition.content.get("permissions") or ()),
        reviewed=reviewed,
        reason=reason,
        role=role,
        declared_trigger=definition.trigger_type,
        also_triggers=definition.also_triggered_by,
        gates_as=None if definition.class_spec is None else definition.class_spec.gates_as,
    )


@dataclass(frozen=True)
class SignatureRefused:
    """A stored version whose signature no longer holds (its digest still names its approval)."""

    refusal: GovernanceRefusal
    digest: str
    job_class: str


@dataclass
class AttemptFacts:
    """What an attempt's verdict needs beyond the candidate row, cached across a worker's cycles:
    approvals and safe-mode periods by id, definitions by version, and (refreshed before each
    cycle, outside the transaction) the trust gates' answers and the policy in force."""

    engine: Engine  # read at each use: a replaced configuration is seen at the next cycle
    code: CodeReader | None = None  # None: code is not read here (a release sweep judges the rest)
    approvals: dict[int, Approval] = field(default_factory=dict)
    periods: dict[tuple[str, int], SafeModePeriod] = field(default_factory=dict)
    definitions: dict[tuple[str, str, int], JobDefinition | SignatureRefused | None] = field(default_factory=dict)
    trust: TrustFact | None = None
    policy: Policy | None = None
    _uses_trust: bool = False

    def refresh(self, now: datetime) -> None:
        """Read the slow facts before a claiming transaction: the policy file (a change is
        audited in its own transaction first) and, once a definition with permissions has been
        seen, the licence and the environment check (a network call at most once a TTL)."""
        self.policy = self.engine.admission.scheduler_policy(actor="worker", now=now)
        if self._uses_trust:
            gates = self.engine.admission.trust_gates
            self.trust = TrustFact(gates.licence.state(), gates.environment.permissions())

    def definition(self, tx: StoreTx, tenant: str, job: str, version: int) -> JobDefinition | SignatureRefused | None:
        """The definition version (checked against its digest and signature), the signature
        refusal it meets, or None when it cannot be read at all (left to dispatch to report)."""
        key = (tenant, job, version)
        if key not in self.definitions:
            found: JobDefinition | SignatureRefused | None
            stored = tx.definition_get(tenant, job, version)
            try:
                found = None if stored is None else self.engine.definitions.build(stored)
            except GovernanceRefusal as exc:
                found = None if stored is None else SignatureRefused(exc, stored.digest, stored.job_class)
            except JobgateError:
                found = None
            self.definitions[key] = found
            if isinstance(found, JobDefinition) and found.content.get("permissions"):
                self._uses_trust = True
        return self.definitions[key]

    def approval(self, tx: StoreTx, approval_id: int | None) -> Approval | None:
        if approval_id is None:
            return None
        found = self.approvals.get(approval_id)
        if found is None:
            found = tx.approval_by_id(approval_id)
            if found is None:
                return None
            self.approvals[approval_id] = found
        return found

    def period(self, tx: StoreTx, tenant: str, activation: int | None) -> SafeModePeriod | None:
        if activation is None:
            return None
        found = self.periods.get((tenant, activation))
        if found is None:
            current = tx.safe_mode_current(tenant)
            if current is None or current.activation != activation:
                return None
            self.periods[(tenant, activation)] = found = current
        return found

    def trust_now(self) -> TrustFact:
        if self.trust is None:  # first sight of a licensed definition: read them now
            self._uses_trust = True
            gates = self.engine.admission.trust_gates
            self.trust = TrustFact(gates.licence.state(), gates.environment.permissions())
        return self.trust


class AttemptGate:
    """``RunsClaim.admit`` for one claiming transaction: the verdicts of the candidates refused.

    The approvals, lifecycle statuses and safe-mode periods of the candidates' definitions are
    read in this transaction, once per distinct definition (``StoreTx.admission_facts``)."""

    def __init__(self, facts: AttemptFacts, tx: StoreTx, now: datetime, moment: Moment = Moment.ATTEMPT) -> None:
        self.facts = facts
        self.tx = tx
        self.now = now
        self.moment = moment
        self._memo: dict[tuple[Any, ...], Verdict] = {}
        self._code: dict[tuple[str, str, int, int], CodeFact] = {}
        self._fetched: set[tuple[str, str]] = set()
        self._approvals: dict[tuple[str, str, int], int] = {}
        self._statuses: dict[tuple[str, str], str] = {}
        self._safe_modes: dict[str, int] = {}

    def __call__(self, candidates: Sequence[Any]) -> dict[str, Verdict]:
        return self.refused(candidates)

    def refused(self, runs: Sequence[Any]) -> dict[str, Verdict]:
        """The verdicts of the runs the rule refuses, by run id (the others are admitted)."""
        self.prefetch(runs)
        refused: dict[str, Verdict] = {}
        memo = self._memo
        for c in runs:
            # The facts of a (tenant, definition, version) are fixed within this transaction, so
            # a batch costs one small tuple and one dictionary lookup per run.
            key = (c.tenant_id, c.job_definition_id, c.definition_version, c.trigger_type, c.reviewed_by)
            verdict = memo.get(key)
            if verdict is None:
                verdict = memo[key] = self._judge(c, self.approval_id(c))
            if not verdict.admitted:
                refused[c.job_run_id] = verdict
        return refused

    def prefetch(self, runs: Sequence[Any]) -> None:
        """Read the admission facts of the runs' definitions not read yet in this transaction."""
        missing = [c for c in runs if (c.tenant_id, c.job_definition_id) not in self._fetched]
        if not missing:
            return
        found = self.tx.admission_facts(missing)
        self._approvals.update(found.approvals)
        self._statuses.update(found.statuses)
        self._safe_modes.update(found.safe_modes)
        self._fetched.update((c.tenant_id, c.job_definition_id) for c in missing)

    def approval_id(self, c: Any) -> int | None:
        return self._approvals.get((c.tenant_id, c.job_definition_id, c.definition_version))

    def verdict(self, c: Any) -> Verdict:
        """The verdict for one run (a claim ``Candidate``, or anything with its fields) whose
        facts were prefetched."""
        self.prefetch([c])
        return self._verdict(c)

    def _verdict(self, c: Any) -> Verdict:
        key = (c.tenant_id, c.job_definition_id, c.definition_version, c.trigger_type, c.reviewed_by)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._judge(c, self.approval_id(c))
        return found

    def _judge(self, c: Any, approval_id: int | None) -> Verdict:
        f = self.facts
        definition = f.definition(self.tx, c.tenant_id, c.job_definition_id, c.definition_version)
        approval = f.approval(self.tx, approval_id)
        signature_problem = None
        if isinstance(definition, SignatureRefused):
            signature_problem = definition.refusal.message
            subject = Subject(
                c.tenant_id,
                c.job_definition_id,
                c.definition_version,
                definition.digest,
                definition.job_class,
                TriggerType(c.trigger_type),
                "normal",  # unused: the signature refuses before safe mode and policy are asked
                reviewed=c.reviewed_by is not None,
            )
        elif definition is None:
            return Verdict(True)  # unreadable here: dispatch reports why, as for any broken definition
        else:
            subject = subject_of(
                definition,
                tenant_id=c.tenant_id,
                trigger_type=TriggerType(c.trigger_type),
                reviewed=c.reviewed_by is not None,
            )
        code = None
        if self.moment is Moment.ATTEMPT and isinstance(definition, JobDefinition) and approval is not None:
            code = self._observe(definition, approval)
        return admit(
            Facts(
                moment=self.moment,
                subject=subject,
                now=self.now,
                definition_status=DefinitionStatus(
                    self._statuses.get((c.tenant_id, c.job_definition_id), DefinitionStatus.ACTIVE.value)
                ),
                approval=approval_fact(approval),
                signature_problem=signature_problem,
                code=code,
                safe_mode=safe_mode_fact(f.period(self.tx, c.tenant_id, self._safe_modes.get(c.tenant_id))),
                trust=f.trust_now() if subject.permissions else None,
                policy=f.policy,
            )
        )

    def _observe(self, definition: JobDefinition, approval: Approval) -> CodeFact | None:
        reader = self.facts.code
        if reader is None:
            return None
        key = (definition.tenant_id, definition.job_definition_id, definition.version, approval.approval_id)
        found = self._code.get(key)
        if found is None:
            try:
                observed = reader.identity(definition, as_loaded=True)
                changed = changed_parts(approval.code_identity or {}, observed.parts)
                stale = [n for n, v in observed.parts.items() if v.endswith(" on disk now")]
                hint = f"this worker loaded {', '.join(stale)} before its files changed: restart it" if stale else None
                found = CodeFact(observed.digest, changed, hint)
            except JobgateError as exc:
                found = CodeFact(None, (), f"cannot read the code here: {exc.message}")
            self._code[key] = found
        return found


CODE_HOLDS = frozenset({"code_changed", "code_not_approved"})
MAX_CODE_BACKOFF = 300.0


def release_verdict(gate: AttemptGate, run: JobRun) -> Verdict | None:
    """What to do with a held run now: its verdict when the rule admits it (release) or its
    refusal is final (cancel); None while it must wait.

    A code hold is released by a newer approval (re-approving is how a code change is accepted),
    or when the code this host would run matches the approval (the workers were restarted on the
    approved code). The latter backs off when the run keeps being held again (another host still
    runs other code): 0, 1, 3, 7 ... up to 300 s after its last hold, so two hosts that disagree do
    not pass a run between them every second."""
    verdict = gate.verdict(run)
    if not verdict.admitted:
        return verdict if verdict.final else None
    if run.hold_reason not in CODE_HOLDS:
        return verdict
    approval = gate.facts.approval(gate.tx, gate.approval_id(run))
    if approval is None or run.held_at is None:
        return None
    if approval.approved_at > run.held_at:
        return verdict
    if gate.facts.code is None or not AttemptGate(gate.facts, gate.tx, gate.now).verdict(run).admitted:
        return None
    holds = sum(
        1 for t in gate.tx.run_transitions(run.job_run_id) if t.reason == "held" and t.detail.get("code") in CODE_HOLDS
    )
    backoff = min(2.0 ** max(holds - 1, 0) - 1.0, MAX_CODE_BACKOFF)
    return verdict if (gate.now - run.held_at).total_seconds() >= backoff else None
