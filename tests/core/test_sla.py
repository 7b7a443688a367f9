"""The SLA rules (``core.sla``): every deadline kind on both sides of its instant, reminders,
escalation, and properties over random policies and observation times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core.policies import SlaPolicy
from jobgate.core.sla import (
    DeadlineKind,
    Due,
    Observation,
    Phase,
    due,
    earliest_offset,
    eco_number,
    escalation_target,
    evidence_anchor,
    record_id,
)
from jobgate.core.states import RunStatus

T0 = datetime(2026, 6, 25, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
US = timedelta(microseconds=1)
K = DeadlineKind

POLICY = SlaPolicy(
    "quarantine_review_48h_v1",
    deadline=100 * S,
    severity="warning",
    escalation_after=200 * S,
    evidence_deadline=50 * S,
    retry_window=30 * S,
    remind_before=10 * S,
)


def obs(status: RunStatus = RunStatus.RUNNING, at: datetime = T0, *, live: bool = True, **kw: object) -> Observation:
    return Observation(status=status, at=at, live=live, created_at=kw.pop("created_at", T0), **kw)  # type: ignore[arg-type]


def kinds(found: list[Due], phase: Phase = Phase.BREACH) -> set[DeadlineKind]:
    return {d.kind for d in found if d.phase is phase}


# --- each kind at its instant ------------------------------------------------------------------


def test_execution_timeout_counts_from_the_current_attempt_start() -> None:
    start = T0 + 40 * S  # a later attempt; the first started at T0
    base = {"first_started_at": T0, "attempt_started_at": start, "attempt": 2, "execution_timeout": 5 * S}
    assert kinds(due(obs(at=start + 5 * S - US, **base), None)) == set()
    found = due(obs(at=start + 5 * S, **base), None)
    assert found == [Due(K.EXECUTION_TIMEOUT, Phase.BREACH, start + 5 * S, "warning", False)]


def test_execution_timeout_needs_a_running_attempt() -> None:
    base = {"attempt_started_at": T0, "execution_timeout": 5 * S}
    assert due(obs(RunStatus.RETRY_WAIT, T0 + 60 * S, **base), None) == []
    assert due(obs(RunStatus.RUNNING, T0 + 60 * S, execution_timeout=5 * S), None) == []  # start unknown


def test_queue_timeout_watches_waiting_runs_only() -> None:
    deadline = T0 + 20 * S
    for status in (RunStatus.SCHEDULED, RunStatus.RETRY_WAIT):
        assert due(obs(status, deadline - US, queue_deadline_at=deadline), None) == []
        assert kinds(due(obs(status, deadline, queue_deadline_at=deadline), None)) == {K.QUEUE_TIMEOUT}
    for status in (RunStatus.DISPATCHED, RunStatus.RUNNING):  # claimed: no longer waiting
        assert due(obs(status, deadline + 60 * S, queue_deadline_at=deadline), None) == []


def test_sla_escalation_and_evidence_deadlines_count_from_creation() -> None:
    assert kinds(due(obs(at=T0 + 50 * S - US), POLICY)) == set()
    assert kinds(due(obs(at=T0 + 50 * S), POLICY)) == {K.EVIDENCE_DEADLINE}
    assert kinds(due(obs(at=T0 + 100 * S), POLICY)) == {K.EVIDENCE_DEADLINE, K.SLA_DEADLINE}
    assert kinds(due(obs(at=T0 + 200 * S), POLICY)) == {K.EVIDENCE_DEADLINE, K.SLA_DEADLINE, K.ESCALATION_DEADLINE}


def test_the_evidence_deadline_counts_from_the_anchor_parameter_when_the_policy_names_one() -> None:
    policy = SlaPolicy("q", 100 * S, evidence_deadline=50 * S, evidence_anchor_param="opened_at")
    opened = T0 - 3600 * S  # the quarantine opened an hour before the check run was created
    anchor = evidence_anchor(policy, {"opened_at": "2026-06-25T11:00:00Z"}, T0)
    assert anchor == opened
    assert kinds(due(obs(at=T0, evidence_anchor=anchor), policy)) == {K.EVIDENCE_DEADLINE}
    for params in ({}, {"opened_at": "yesterday"}, {"opened_at": "2026-06-25T11:00:00"}, {"opened_at": 5}):
        assert evidence_anchor(policy, params, T0) == T0  # missing, unreadable or without offset
    assert evidence_anchor(SlaPolicy("p", S), {"opened_at": "2026-06-25T11:00:00Z"}, T0) == T0


def test_retry_window_counts_from_the_first_start_and_needs_a_retry() -> None:
    first = T0 + 5 * S
    end = first + 30 * S
    retrying = [
        (RunStatus.RETRY_WAIT, 1),
        (RunStatus.SCHEDULED, 1),  # released or requeued after an attempt
        (RunStatus.DISPATCHED, 2),
        (RunStatus.RUNNING, 2),
    ]
    for status, attempt in retrying:
        assert K.RETRY_WINDOW not in kinds(due(obs(status, end - US, first_started_at=first, attempt=attempt), POLICY))
        found = due(obs(status, end, first_started_at=first, attempt=attempt), POLICY)
        assert K.RETRY_WINDOW in kinds(found), status
    # the first attempt running long is not a retry; a run never started has no window
    assert K.RETRY_WINDOW not in kinds(due(obs(RunStatus.RUNNING, end, first_started_at=first, attempt=1), POLICY))
    assert K.RETRY_WINDOW not in kinds(due(obs(RunStatus.SCHEDULED, end, attempt=0), POLICY))


def test_a_terminal_subject_has_nothing_due() -> None:
    for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTERED, RunStatus.ESCALATED):
        assert due(obs(status, T0 + 10_000 * S, queue_deadline_at=T0), POLICY) == []


def test_an_ended_observation_proves_the_breaches_before_its_instant_and_nothing_else() -> None:
    # A run that ended (completed) 150 s after creation: open at every deadline up to then.
    ended = obs(RunStatus.RUNNING, T0 + 150 * S, live=False)
    assert kinds(due(ended, POLICY)) == {K.EVIDENCE_DEADLINE, K.SLA_DEADLINE}
    assert kinds(due(ended, POLICY), Phase.REMINDER) == set()  # the escalation reminder: ended, nobody to remind
    finished_in_time = obs(RunStatus.RUNNING, T0 + 49 * S, live=False)
    assert due(finished_in_time, POLICY) == []


# --- reminders ---------------------------------------------------------------------------------


def test_reminders_come_before_the_deadline_and_only_while_open_now() -> None:
    assert kinds(due(obs(at=T0 + 40 * S - US), POLICY), Phase.REMINDER) == set()
    assert kinds(due(obs(at=T0 + 40 * S), POLICY), Phase.REMINDER) == {K.EVIDENCE_DEADLINE}
    at_sla = due(obs(at=T0 + 90 * S), POLICY)
    assert kinds(at_sla, Phase.REMINDER) == {K.SLA_DEADLINE}
    assert kinds(at_sla) == {K.EVIDENCE_DEADLINE}  # its breach replaced its reminder
    reminder = next(d for d in at_sla if d.phase is Phase.REMINDER)
    assert (reminder.deadline, reminder.severity, reminder.requires_escalation) == (T0 + 100 * S, "info", False)
    assert kinds(due(obs(at=T0 + 90 * S, live=False), POLICY), Phase.REMINDER) == set()


def test_no_reminder_without_remind_before() -> None:
    policy = SlaPolicy("p", 100 * S)
    assert due(obs(at=T0 + 99 * S), policy) == []


# --- escalation --------------------------------------------------------------------------------


def test_the_escalation_deadline_always_requires_escalation_the_others_as_the_policy_says() -> None:
    found = {d.kind: d for d in due(obs(RunStatus.RETRY_WAIT, T0 + 300 * S, first_started_at=T0, attempt=1), POLICY)}
    assert found[K.ESCALATION_DEADLINE].requires_escalation and found[K.ESCALATION_DEADLINE].severity == "critical"
    assert not any(found[k].requires_escalation for k in (K.SLA_DEADLINE, K.EVIDENCE_DEADLINE, K.RETRY_WINDOW))
    strict = SlaPolicy("s", 100 * S, "critical", True, evidence_deadline=50 * S, retry_window=30 * S)
    found = {d.kind: d for d in due(obs(RunStatus.RETRY_WAIT, T0 + 300 * S, first_started_at=T0, attempt=1), strict)}
    assert all(found[k].requires_escalation for k in (K.SLA_DEADLINE, K.EVIDENCE_DEADLINE, K.RETRY_WINDOW))
    assert {d.severity for d in found.values()} == {"critical"}


def test_timeouts_never_require_escalation() -> None:
    strict = SlaPolicy("s", 10_000 * S, requires_escalation=True)
    found = due(
        obs(RunStatus.RUNNING, T0 + 60 * S, attempt_started_at=T0, execution_timeout=S, attempt=1), strict
    ) + due(obs(RunStatus.SCHEDULED, T0 + 60 * S, queue_deadline_at=T0), strict)
    assert {d.kind for d in found} == {K.EXECUTION_TIMEOUT, K.QUEUE_TIMEOUT}
    assert not any(d.requires_escalation for d in found)


@pytest.mark.parametrize(
    ("status", "target"),
    [
        (RunStatus.RUNNING, RunStatus.ESCALATED),
        (RunStatus.SCHEDULED, RunStatus.DEAD_LETTERED),
        (RunStatus.RETRY_WAIT, RunStatus.DEAD_LETTERED),
        (RunStatus.DISPATCHED, RunStatus.DEAD_LETTERED),
        (RunStatus.CREATED, None),
        (RunStatus.COMPLETED, None),
        (RunStatus.ESCALATED, None),
    ],
)
def test_escalation_target(status: RunStatus, target: RunStatus | None) -> None:
    assert escalation_target(status) is target


# --- identity and small helpers ----------------------------------------------------------------


def test_record_ids_are_derived_and_distinct_per_kind_and_phase() -> None:
    ids = {record_id("default", "TGJOBRUN-1", k, p) for k in DeadlineKind for p in Phase}
    assert len(ids) == len(DeadlineKind) * len(Phase)
    assert record_id("default", "TGJOBRUN-1", K.SLA_DEADLINE, Phase.BREACH) == record_id(
        "default", "TGJOBRUN-1", K.SLA_DEADLINE, Phase.BREACH
    )
    assert record_id("acme", "TGJOBRUN-1", K.SLA_DEADLINE, Phase.BREACH) not in ids
    assert all(i.startswith("TGSLA-") and len(i) <= 64 for i in ids)


def test_eco_number_from_scope_then_params() -> None:
    assert eco_number({"eco_number": "ECO-A1"}, {"eco_number": "ECO-B2"}) == "ECO-A1"
    assert eco_number({}, {"eco_number": "ECO-B2"}) == "ECO-B2"
    assert eco_number({"tenant_id": "x"}, {}) is None


# --- properties --------------------------------------------------------------------------------

seconds = st.integers(min_value=1, max_value=10_000).map(lambda n: n * S)
optional = st.none() | seconds
policies = st.builds(
    lambda d, e, ev, rw, rb, anchor: SlaPolicy(
        "p",
        d,
        escalation_after=e,
        evidence_deadline=ev,
        retry_window=rw,
        remind_before=None if rb is None or rb >= d else rb,
        evidence_anchor_param="opened_at" if anchor and ev is not None else None,
    ),
    seconds,
    optional,
    optional,
    optional,
    optional,
    st.booleans(),
)
open_statuses = st.sampled_from([s for s in RunStatus if not s.is_terminal])
offsets = st.integers(min_value=0, max_value=30_000).map(lambda n: n * S)


@given(policies, open_statuses, offsets, offsets, st.integers(min_value=0, max_value=5), st.booleans())
def test_breaches_only_grow_with_time(
    policy: SlaPolicy, status: RunStatus, a: timedelta, b: timedelta, attempt: int, live: bool
) -> None:
    def at(t: timedelta) -> Observation:
        return obs(status, T0 + t, live=live, attempt=attempt, first_started_at=T0, attempt_started_at=T0,
                   execution_timeout=100 * S, queue_deadline_at=T0 + 100 * S)  # fmt: skip

    early, late = min(a, b), max(a, b)
    assert kinds(due(at(early), policy)) <= kinds(due(at(late), policy))


@given(policies, open_statuses, offsets, st.integers(min_value=0, max_value=5), st.booleans())
def test_every_due_is_consistent_with_its_instant(
    policy: SlaPolicy, status: RunStatus, t: timedelta, attempt: int, live: bool
) -> None:
    o = obs(status, T0 + t, live=live, attempt=attempt, first_started_at=T0, attempt_started_at=T0,
            execution_timeout=100 * S, queue_deadline_at=T0 + 100 * S)  # fmt: skip
    found = due(o, policy)
    assert len({(d.kind, d.phase) for d in found}) == len(found)
    assert len({d.kind for d in found}) == len(found)  # never a reminder and a breach of one kind
    for d in found:
        if d.phase is Phase.BREACH:
            assert d.deadline <= o.at
        else:
            assert o.live and policy.remind_before is not None
            assert d.deadline - policy.remind_before <= o.at < d.deadline
        assert d.requires_escalation == (
            d.phase is Phase.BREACH
            and not d.kind.is_timeout
            and (d.kind is K.ESCALATION_DEADLINE or policy.requires_escalation)
        )


@given(policies, open_statuses, st.integers(min_value=0, max_value=5), st.integers(min_value=1, max_value=10**6))
def test_nothing_from_the_policy_is_due_before_its_earliest_offset(
    policy: SlaPolicy, status: RunStatus, attempt: int, before_us: int
) -> None:
    """The monitor reads open subjects only from this age on: nothing may be due earlier, with
    the evidence deadline anchored anywhere and the first start anywhere after creation."""
    offset = earliest_offset(policy)
    at = T0 + offset - before_us * US
    anchor = T0 - 10**6 * S if policy.evidence_anchor_param else None
    found = due(obs(status, at, attempt=attempt, first_started_at=T0, evidence_anchor=anchor), policy)
    if offset == timedelta(0):
        return  # nothing is earlier than creation
    assert found == []
