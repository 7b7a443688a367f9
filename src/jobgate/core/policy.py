"""The scheduler policy's rules as values, and their judgement (pure).

A policy is a versioned set of rules (trigger types per job class, priority ceilings, a reason
for manual runs, blackout windows, per-tenant quotas); ``evaluate`` judges one admission
against it and names the refusing rule. Parsing the file and noticing its changes are the
shell's (``jobgate.governance.policy_file``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from jobgate.core.errors import GovernanceRefusal
from jobgate.core.models import Priority, TriggerType

# Lowest first: the order ceilings compare in, from the one list of priorities there is (a
# copy of it lacked ``background``, and a background run under a priority rule crashed).
PRIORITY_ORDER = tuple(p.value for p in reversed(Priority))
# What a ceiling may name (the seed contract): background is below every ceiling, never capped.
CEILINGS = PRIORITY_ORDER[1:]


@dataclass(frozen=True)
class Blackout:
    rule_id: str
    start: datetime | None = None
    end: datetime | None = None
    daily: tuple[time, time] | None = None
    zone: str = "UTC"
    job_classes: frozenset[str] = frozenset()

    def covers(self, now: datetime, job_class: str, gates_as: str | None = None) -> bool:
        if self.job_classes and job_class not in self.job_classes and gates_as not in self.job_classes:
            return False
        if self.start is not None and self.end is not None:
            return self.start <= now < self.end
        assert self.daily is not None
        local = now.astimezone(ZoneInfo(self.zone)).time()
        begin, end = self.daily
        return begin <= local < end if begin <= end else (local >= begin or local < end)


@dataclass(frozen=True)
class Policy:
    policy_id: str
    version: int
    digest: str
    trigger_rule: str | None = None
    triggers_by_class: Mapping[str, frozenset[str]] = field(default_factory=dict)
    priority_rule: str | None = None
    max_priority: str | None = None
    max_priority_by_tenant: Mapping[str, str] = field(default_factory=dict)
    max_priority_by_role: Mapping[str, str] = field(default_factory=dict)
    reason_rule: str | None = None
    blackouts: tuple[Blackout, ...] = ()
    quota_rule: str | None = None
    runs_per_day: int | None = None
    concurrent_runs: int | None = None
    quotas_by_tenant: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def binding(self) -> dict[str, Any]:
        """What a run's snapshot records of the policy that admitted it."""
        return {"policy_id": self.policy_id, "version": self.version, "digest": self.digest}

    def quota(self, tenant_id: str, name: str) -> int | None:
        own = self.quotas_by_tenant.get(tenant_id, {})
        fallback: int | None = getattr(self, name)
        return own.get(name, fallback)

    @property
    def counts_needed(self) -> bool:
        return self.quota_rule is not None


@dataclass(frozen=True)
class Admission:
    """What the policy judges: one trigger, with the tenant's counts when quotas apply."""

    tenant_id: str
    job_class: str
    trigger_type: str
    priority: str
    reason: str | None
    role: str | None
    now: datetime
    runs_today: int = 0
    open_runs: int = 0
    # The built-in class a declared ``job_class`` gates as (``core.classes``): the rules naming
    # either class bind the run. None: ``job_class`` is built in.
    gates_as: str | None = None


def evaluate(policy: Policy, a: Admission) -> GovernanceRefusal | None:
    for name in (a.job_class,) if a.gates_as in (None, a.job_class) else (a.job_class, a.gates_as):
        allowed = policy.triggers_by_class.get(name)
        if policy.trigger_rule and allowed is not None and a.trigger_type not in allowed:
            via = "" if name == a.job_class else f" (so {a.job_class}, which gates as it)"
            return _refuse(
                policy,
                policy.trigger_rule,
                f"{name}{via} may be started by {', '.join(sorted(allowed))} triggers, not {a.trigger_type}",
            )
    if policy.priority_rule:
        limits = [
            x
            for x in (
                policy.max_priority_by_tenant.get(a.tenant_id, policy.max_priority),
                policy.max_priority_by_role.get(a.role or ""),
            )
            if x is not None
        ]
        ceiling = min(limits, key=PRIORITY_ORDER.index) if limits else None
        if ceiling is not None and PRIORITY_ORDER.index(a.priority) > PRIORITY_ORDER.index(ceiling):
            return _refuse(policy, policy.priority_rule, f"priority {a.priority} is above the allowed {ceiling}")
    if policy.reason_rule and a.trigger_type == TriggerType.MANUAL.value and not (a.reason or "").strip():
        return _refuse(policy, policy.reason_rule, "a manual run must give a reason")
    for b in policy.blackouts:
        if b.covers(a.now, a.job_class, a.gates_as):
            return _refuse(policy, b.rule_id, f"inside the blackout window {b.rule_id}")
    if policy.quota_rule:
        per_day = policy.quota(a.tenant_id, "runs_per_day")
        if per_day is not None and a.runs_today >= per_day:
            return _refuse(
                policy,
                policy.quota_rule,
                f"tenant {a.tenant_id} is at its daily quota of {per_day} runs ({a.runs_today} counted today,"
                " this request's earlier runs included; a request is refused whole)",
            )
        concurrent = policy.quota(a.tenant_id, "concurrent_runs")
        if concurrent is not None and a.open_runs >= concurrent:
            return _refuse(
                policy, policy.quota_rule, f"tenant {a.tenant_id} has {a.open_runs} open runs (quota {concurrent})"
            )
    return None


def _refuse(policy: Policy, rule: str, message: str) -> GovernanceRefusal:
    return GovernanceRefusal(
        f"{message} (policy {policy.policy_id} v{policy.version}, rule {rule})",
        code="policy_refused",
        rule=rule,
        field="policy",
    )
