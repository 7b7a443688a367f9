"""The admission rule: may this definition version run now? One pure function for every path.

Every way of starting code — a new trigger of any type, a request's dry run and its approval, a
requeue, a workflow step, and the start of *every attempt* of an existing run — asks ``admit``
with the facts of that moment. The shell (``jobgate.service.gates`` for triggers,
``jobgate.runtime.worker`` for attempts) gathers the facts — the approval row, the definition's
lifecycle status, the tenant's safe-mode period, the licence and environment answer, the policy,
the code a worker would execute — and acts on the verdict; nothing here reads a clock, a file or
a database. So a rule cannot be checked at one edge and forgotten at another: there is no other
place where it is written.

Which rules bind at which moment (``Moment``):

- content approval of the pinned digest, signatures, the definition's lifecycle status, safe
  mode's suspended classes, trust gates and the policy's trigger-type, priority and blackout
  rules bind at every moment;
- safe mode's manual review binds manual runs not reviewed by a second person, at every moment;
- the policy's reason and quota rules, and the role's priority ceiling, are about a trigger and
  bind when a run is created (they count or judge the trigger itself); the licence's concurrent
  slots are taken at creation and held while the run is open, so an attempt needs no new slot;
- code identity binds where code is about to execute: at an attempt's start, on the worker's host.

A refusal at an attempt is a *hold* (the run waits in HELD, named, until the condition clears)
unless it can never clear — the approval was revoked, the definition retired — which is *final*:
the run's remaining attempts are cancelled.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from jobgate.core.classes import rule_names
from jobgate.core.errors import GovernanceRefusal
from jobgate.core.models import DefinitionStatus, JobClass, TriggerType
from jobgate.core.policy import Admission, Policy, evaluate
from jobgate.core.trust import LicenceState, verdict


class Moment(StrEnum):
    """When the rule is asked."""

    TRIGGER = "trigger"  # a new run is about to be created (any trigger type)
    REQUEST_TEST = "request_test"  # a four-eyes request's dry run
    REQUEST_APPROVAL = "request_approval"  # a four-eyes request approved: its run is created
    REQUEUE = "requeue"  # a dead-lettered or escalated run is given another attempt
    WORKFLOW_STEP = "workflow_step"  # a workflow step's run is created
    ATTEMPT = "attempt"  # a worker is about to start an attempt of an existing run
    RELEASE = "release"  # a held run is looked at again

    @property
    def creates(self) -> bool:
        """The moments at which a run (or a new attempt budget) comes into being."""
        return self not in (Moment.ATTEMPT, Moment.RELEASE)


class Code(StrEnum):
    """Refusal families, the ``code`` of a refusal and the ``hold_reason`` of a held run."""

    NOT_APPROVED = "definition_not_approved"
    APPROVAL_REVOKED = "approval_revoked"
    NOT_SIGNED = "definition_not_signed"
    DEFINITION_INACTIVE = "definition_inactive"
    DEFINITION_RETIRED = "definition_retired"
    CODE_CHANGED = "code_changed"
    CODE_NOT_APPROVED = "code_not_approved"
    SAFE_MODE = "safe_mode_active"
    TRUST_GATE = "trust_gate_refused"
    POLICY = "policy_refused"
    TRIGGER_NOT_ALLOWED = "trigger_type_not_allowed"


# Refusals an attempt cannot wait out: its remaining attempts are cancelled.
FINAL = frozenset({Code.APPROVAL_REVOKED, Code.DEFINITION_RETIRED})


@dataclass(frozen=True)
class Subject:
    """What would run: one pinned definition version, for one tenant, by one trigger."""

    tenant_id: str
    job_definition_id: str
    version: int
    digest: str
    job_class: str  # built in, or declared in jobgate.yaml (``core.classes``)
    trigger_type: TriggerType
    priority: str
    permissions: tuple[str, ...] = ()
    reviewed: bool = False  # a second person reviewed this run (an approved request, a requeue)
    reason: str | None = None  # the trigger's stated reason (policy: manual runs must say why)
    role: str | None = None  # the requester's role, when known (policy: priority ceilings)
    declared_trigger: TriggerType | None = None  # the definition's ``trigger_type``; None: not asked
    also_triggers: tuple[TriggerType, ...] = ()  # the definition's ``also_triggered_by``
    # The built-in class whose rules a declared ``job_class`` follows; None: job_class is built in.
    gates_as: JobClass | None = None

    @property
    def rule_classes(self) -> tuple[str, ...]:
        """The class names whose safe-mode and policy rules bind it: its own and its ``gates_as``."""
        return rule_names(self.job_class, self.gates_as)


@dataclass(frozen=True)
class ApprovalFact:
    """The active approval of the subject's digest, as recorded."""

    digest: str
    code_digest: str | None  # None: approved before code identity was recorded
    approved_at: datetime


@dataclass(frozen=True)
class SafeModeFact:
    """An open safe-mode period of the subject's tenant and the actions it put in force."""

    activation: int
    reason: str
    suspend_job_classes: frozenset[str] = frozenset()
    manual_review: bool = False


@dataclass(frozen=True)
class TrustFact:
    licence: LicenceState
    environment: frozenset[str] | None  # None: the environment check could not be reached


@dataclass(frozen=True)
class CodeFact:
    """The code a worker would execute, as it found it just now (``core.code_identity``)."""

    digest: str | None  # None: the code cannot be read on this host
    changed: tuple[str, ...] = ()  # which parts differ from the approved identity, when known
    problem: str | None = None


@dataclass(frozen=True)
class Facts:
    moment: Moment
    subject: Subject
    now: datetime
    definition_status: DefinitionStatus = DefinitionStatus.ACTIVE
    approval: ApprovalFact | None = None
    signature_problem: str | None = None  # why the stored content's signature does not hold, if it does not
    code: CodeFact | None = None  # observed at ATTEMPT; None at moments where no code is about to run
    safe_mode: SafeModeFact | None = None
    trust: TrustFact | None = None  # needed only when the subject declares permissions
    policy: Policy | None = None
    runs_today: int = 0  # the tenant's runs created today (policy quotas, at creation)
    open_runs: int = 0


@dataclass(frozen=True)
class Verdict:
    """``admitted``, or the first rule that refused, and whether the refusal can ever clear."""

    admitted: bool
    code: Code | None = None
    rule: str | None = None
    message: str = ""
    field: str | None = None
    final: bool = False

    def refusal(self) -> GovernanceRefusal:
        assert self.code is not None
        return GovernanceRefusal(self.message, code=self.code.value, rule=self.rule, field=self.field)


ADMITTED = Verdict(True)


def _refused(code: Code, rule: str, message: str, field: str) -> Verdict:
    return Verdict(False, code, rule, message, field, code in FINAL)


def _from_refusal(code: Code, exc: GovernanceRefusal) -> Verdict:
    return _refused(code, exc.rule or code.value, exc.message, exc.field or "job_definition_id")


def admit(f: Facts) -> Verdict:
    """The first rule that refuses ``f.subject`` at ``f.moment``, in a fixed order (lifecycle,
    approval, signature, code, safe mode, trust gates, policy), or ``ADMITTED``."""
    s = f.subject
    for check in (_lifecycle, _trigger, _approval, _signature, _code, _safe_mode, _trust, _policy):
        found = check(f, s)
        if found is not None:
            return found
    return ADMITTED


def _lifecycle(f: Facts, s: Subject) -> Verdict | None:
    if f.definition_status is DefinitionStatus.ACTIVE:
        return None
    if f.definition_status is DefinitionStatus.RETIRED and not f.moment.creates:
        return _refused(Code.DEFINITION_RETIRED, "definition_retired", "the definition was retired", "status")
    return _refused(
        Code.DEFINITION_INACTIVE,
        f"definition_{f.definition_status.value}",
        f"definition is {f.definition_status.value}; only active definitions run",
        "status",
    )


_TIMED = frozenset({TriggerType.CRON, TriggerType.INTERVAL, TriggerType.BATCH_WINDOW, TriggerType.ADAPTIVE})


def allowed_triggers(declared: TriggerType, also: Iterable[TriggerType] = ()) -> frozenset[TriggerType]:
    """What may start a definition whose ``trigger_type`` is ``declared`` (and whose
    ``also_triggered_by`` lists ``also``): each such trigger; a manual run (an operator's, under
    every other rule); a workflow step (the workflow's own trigger was judged); for a timed
    trigger, a backfill of its slots. An interval and an adaptive interval are one rhythm. A
    ``manual`` definition with nothing besides is started by nothing else."""
    allowed = {TriggerType.MANUAL, TriggerType.WORKFLOW}
    for kind in (declared, *also):
        allowed.add(kind)
        if kind in _TIMED:
            allowed.add(TriggerType.BACKFILL)
        if kind in (TriggerType.INTERVAL, TriggerType.ADAPTIVE):
            allowed |= {TriggerType.INTERVAL, TriggerType.ADAPTIVE}
    return frozenset(allowed)


def trigger_refusal(
    declared: TriggerType, trigger: TriggerType, job_definition_id: str, also: Iterable[TriggerType] = ()
) -> str | None:
    """Why ``trigger`` may not start the definition (None: it may)."""
    allowed = allowed_triggers(declared, also)
    if trigger in allowed:
        return None
    names = ", ".join(sorted(t.value for t in allowed - {TriggerType.WORKFLOW}))
    return (
        f"{job_definition_id} has trigger_type {declared.value}: {_article(trigger.value)} {trigger.value} trigger "
        "may not start it "
        f"(allowed: {names})"
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _trigger(f: Facts, s: Subject) -> Verdict | None:
    if s.declared_trigger is None or not f.moment.creates:
        return None
    why = trigger_refusal(s.declared_trigger, s.trigger_type, s.job_definition_id, s.also_triggers)
    if why is None:
        return None
    return _refused(Code.TRIGGER_NOT_ALLOWED, "definition_trigger_type", why, "trigger_type")


def _approval(f: Facts, s: Subject) -> Verdict | None:
    a = f.approval
    if a is not None and a.digest == s.digest:
        return None
    if f.moment.creates:
        return _refused(
            Code.NOT_APPROVED,
            "content_approval",
            f"version {s.version} of {s.job_definition_id} ({s.digest[:19]}…) has no admin approval of its content",
            "job_definition_id",
        )
    # The run was created under an approval that no longer stands: it was revoked.
    return _refused(
        Code.APPROVAL_REVOKED,
        "content_approval",
        f"the approval of version {s.version} of {s.job_definition_id} ({s.digest[:19]}…) was revoked",
        "job_definition_id",
    )


def _signature(f: Facts, s: Subject) -> Verdict | None:
    if f.signature_problem is None:
        return None
    return _refused(Code.NOT_SIGNED, "signed_definitions", f.signature_problem, "signature")


def _code(f: Facts, s: Subject) -> Verdict | None:
    if f.code is None:
        return None
    approved = None if f.approval is None else f.approval.code_digest
    if approved is None:
        return _refused(
            Code.CODE_NOT_APPROVED,
            "code_approval",
            f"the approval of {s.job_definition_id} v{s.version} names no code; approve it again to bind its code",
            "code_digest",
        )
    if f.code.digest == approved:
        return None
    if f.code.digest is None:
        why = f.code.problem or "the code cannot be read on this host"
        return _refused(Code.CODE_CHANGED, "code_identity", f"{why} (approved {approved[:19]}…)", "code_digest")
    parts = f" ({', '.join(f.code.changed)} changed)" if f.code.changed else ""
    note = f"; {f.code.problem}" if f.code.problem else ""
    return _refused(
        Code.CODE_CHANGED,
        "code_identity",
        f"the code of {s.job_definition_id} v{s.version} is {f.code.digest[:19]}…, approved {approved[:19]}…{parts}"
        + note,
        "code_digest",
    )


def _safe_mode(f: Facts, s: Subject) -> Verdict | None:
    p = f.safe_mode
    if p is None or _triggered_by_safe_mode(s):
        return None
    # A declared class is suspended by its own name and by its gates_as class's (core.classes).
    suspended = next((name for name in s.rule_classes if name in p.suspend_job_classes), None)
    if suspended is not None:
        via = "" if suspended == s.job_class else f" ({s.job_class} gates as it)"
        return _refused(
            Code.SAFE_MODE,
            f"suspended_class:{suspended}",
            f"safe mode (activation {p.activation}, {p.reason!r}) suspends {suspended}{via}",
            "job_class",
        )
    if p.manual_review and s.trigger_type is TriggerType.MANUAL and not s.reviewed:
        return _refused(
            Code.SAFE_MODE,
            "manual_review_required",
            f"safe mode (activation {p.activation}) requires manual runs to be reviewed: propose a request",
            "trigger_type",
        )
    return None


def _triggered_by_safe_mode(s: Subject) -> bool:
    """The SAFE_MODE_JOB as safe mode itself triggers it (at a switch, or on a safe-mode
    schedule) is never held back by it. The exemption is the trigger's as much as the class's: a
    definition may name itself SAFE_MODE_JOB, and its manual runs are reviewed like any other."""
    return s.job_class == JobClass.SAFE_MODE_JOB and s.trigger_type is TriggerType.SAFE_MODE


def _trust(f: Facts, s: Subject) -> Verdict | None:
    if not s.permissions:
        return None
    t = f.trust or TrustFact(LicenceState(None, "no licence was read"), None)
    refusal = verdict(s.permissions, t.licence, t.environment, f.now)
    return None if refusal is None else _from_refusal(Code.TRUST_GATE, refusal)


def _policy(f: Facts, s: Subject) -> Verdict | None:
    if f.policy is None:
        return None
    creating = f.moment.creates
    policy = f.policy if creating else _start_rules(f.policy)
    refusal = evaluate(
        policy,
        Admission(
            tenant_id=s.tenant_id,
            job_class=s.job_class,
            gates_as=None if s.gates_as is None else s.gates_as.value,
            trigger_type=s.trigger_type.value,
            priority=s.priority,
            reason=s.reason,
            role=s.role if creating else None,
            now=f.now,
            runs_today=f.runs_today,
            open_runs=f.open_runs,
        ),
    )
    return None if refusal is None else _from_refusal(Code.POLICY, refusal)


def _start_rules(policy: Policy) -> Policy:
    """The rules of ``policy`` that bind the start of an existing run: which triggers may start
    a class, the tenant's priority ceiling, blackouts. The reason and the quotas judged the
    trigger when the run was created (the run already counts against them)."""
    from dataclasses import replace

    return replace(policy, reason_rule=None, quota_rule=None)


# ---------------------------------------------------------------------- four eyes
@dataclass(frozen=True)
class Person:
    """A principal as four eyes sees it: its name and the principals whose tokens minted its
    credential, nearest first. Whoever minted a credential saw its secret and could use it: the
    minter counts as the same person, and so do two credentials one principal minted (it holds
    both)."""

    name: str
    minted_by: tuple[str, ...] = field(default_factory=tuple)

    @property
    def lineage(self) -> frozenset[str]:
        return frozenset(folded(n) for n in (self.name, *self.minted_by))


def folded(name: str) -> str:
    """A principal's name as four eyes compares it: "alice", "Alice", "alice " and "ali\u200bce"
    (or "alice" in full-width letters) name one person to a reader of the record, so they are
    one person to the rule: compatibility forms folded, case folded, and spaces and invisible
    characters (controls, zero-width and direction marks) dropped."""
    normal = unicodedata.normalize("NFKC", name).casefold()
    return "".join(ch for ch in normal if not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf"))


def how_related(approver: Person, other: Person, did: str) -> str:
    """Why four eyes counts ``approver`` as ``other`` (who ``did`` the thing), naming each
    person for what they did: "x1 minted the credential of p-admin, who proposed this request"."""
    if folded(approver.name) == folded(other.name):
        return f"{approver.name} {did}"
    if folded(approver.name) in {folded(m) for m in other.minted_by}:
        return f"{approver.name} minted the credential of {other.name}, who {did}"
    if folded(other.name) in {folded(m) for m in approver.minted_by}:
        return f"{approver.name}'s credential was minted by {other.name}, who {did}"
    common = next(m for m in approver.minted_by if folded(m) in {folded(o) for o in other.minted_by})
    return f"{common} minted both {approver.name}'s credential and that of {other.name}, who {did}"


def same_person(a: Person, b: Person) -> bool:
    """Whether ``a`` and ``b`` may be one person: the same principal, one minted the other's
    credential (directly or through a chain of minted tokens), or one principal minted both
    (it holds both secrets). Credentials made on the host (``jobgate tokens create``) or by an
    identity provider have no minter: the host's operator and the provider are the roots."""
    return not a.lineage.isdisjoint(b.lineage)


@dataclass(frozen=True)
class ApprovalRule:
    """What four eyes requires of a content approval."""

    four_eyes: bool  # governance.four_eyes: the applier of a version never approves it
    executes_body: bool  # the definition's runner executes its body as code: always a second person


def approval_refusal(rule: ApprovalRule, approver: Person, appliers: Sequence[Person]) -> GovernanceRefusal | None:
    """Why ``approver`` may not approve a version applied by ``appliers``, or None. A version
    whose applier is unknown (stored before appliers were recorded) needs no second person
    unless its body is code, which always does."""
    if not (rule.four_eyes or rule.executes_body):
        return None
    if rule.executes_body and not appliers:
        return GovernanceRefusal(
            "this definition's runner executes its body as code and who applied it is not recorded: apply it again",
            code="four_eyes",
            rule="applier_unknown",
            field="approved_by",
        )
    for applier in appliers:
        if same_person(approver, applier):
            why = "its runner executes the body as code" if rule.executes_body else "governance.four_eyes is on"
            return GovernanceRefusal(
                f"{how_related(approver, applier, 'applied this version')}; {why}, so a second person must approve it",
                code="four_eyes",
                rule="applier_cannot_approve",
                field="approved_by",
            )
    return None


def request_refusal(approver: Person, requester: Person) -> GovernanceRefusal | None:
    """A request's requester, or anyone minted by or minting the requester's credential, never
    approves it."""
    if not same_person(approver, requester):
        return None
    return GovernanceRefusal(
        f"{how_related(approver, requester, 'proposed this request')}: a second person must approve it",
        code="four_eyes",
        rule="requester_cannot_approve",
        field="approved_by",
    )
