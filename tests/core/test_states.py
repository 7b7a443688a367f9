"""The run state machine: the full 11x11 matrix, terminal states, and the CAS source sets."""

from __future__ import annotations

import itertools

import pytest

from jobgate.core.errors import ConflictError, IllegalTransitionError
from jobgate.core.states import (
    ALLOWED,
    CLAIMABLE,
    LEASED,
    PENDING,
    TERMINAL,
    RunStatus,
    TransitionReason,
    check_transition,
    is_allowed,
    sources_of,
)

S = RunStatus

# An independent copy of seed 000 §14, so an accidental edit of the table in src fails here, plus
# jobgate's HELD: a run whose next attempt a governance gate refused (core.governance) waits there.
EXPECTED_EDGES: frozenset[tuple[RunStatus, RunStatus]] = frozenset(
    {
        (S.CREATED, S.SCHEDULED),
        (S.CREATED, S.CANCELLED),
        (S.SCHEDULED, S.DISPATCHED),
        (S.SCHEDULED, S.CANCELLED),
        (S.SCHEDULED, S.DEAD_LETTERED),
        (S.DISPATCHED, S.RUNNING),
        (S.DISPATCHED, S.SCHEDULED),
        (S.DISPATCHED, S.CANCELLED),
        (S.DISPATCHED, S.DEAD_LETTERED),
        (S.RUNNING, S.COMPLETED),
        (S.RUNNING, S.RETRY_WAIT),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.DEAD_LETTERED),
        (S.RUNNING, S.CANCELLED),
        (S.RUNNING, S.ESCALATED),
        (S.RUNNING, S.SCHEDULED),  # an attempt handed back: shutdown past its grace, or this host cannot run it
        (S.RETRY_WAIT, S.DISPATCHED),
        (S.RETRY_WAIT, S.CANCELLED),
        (S.RETRY_WAIT, S.DEAD_LETTERED),
        (S.DEAD_LETTERED, S.SCHEDULED),
        (S.ESCALATED, S.SCHEDULED),
        (S.SCHEDULED, S.HELD),
        (S.DISPATCHED, S.HELD),
        (S.RETRY_WAIT, S.HELD),
        (S.HELD, S.SCHEDULED),
        (S.HELD, S.CANCELLED),
        (S.HELD, S.DEAD_LETTERED),
    }
)

MATRIX = list(itertools.product(RunStatus, RunStatus))
ALLOWED_PAIRS = [pair for pair in MATRIX if pair in EXPECTED_EDGES]
REFUSED_PAIRS = [pair for pair in MATRIX if pair not in EXPECTED_EDGES]


def _id(pair: tuple[RunStatus, RunStatus]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_status_set_is_the_seed_set() -> None:
    assert [s.value for s in RunStatus] == [
        "CREATED",
        "SCHEDULED",
        "DISPATCHED",
        "RUNNING",
        "COMPLETED",
        "RETRY_WAIT",
        "FAILED",
        "DEAD_LETTERED",
        "CANCELLED",
        "ESCALATED",
        "HELD",
    ]
    assert all(s.value == s.name for s in RunStatus)
    assert len(MATRIX) == 121
    assert len(ALLOWED_PAIRS) == 27
    assert len(REFUSED_PAIRS) == 94


def test_table_has_one_row_per_status_and_matches_the_seed() -> None:
    assert set(ALLOWED) == set(RunStatus)
    actual = {(source, target) for source, targets in ALLOWED.items() for target in targets}
    assert actual == EXPECTED_EDGES


@pytest.mark.parametrize(("source", "target"), ALLOWED_PAIRS, ids=[_id(p) for p in ALLOWED_PAIRS])
def test_allowed_transition_passes(source: RunStatus, target: RunStatus) -> None:
    assert is_allowed(source, target)
    check_transition(source, target)
    check_transition(source, target, job_run_id="TGJOBRUN-x")


@pytest.mark.parametrize(("source", "target"), REFUSED_PAIRS, ids=[_id(p) for p in REFUSED_PAIRS])
def test_refused_transition_raises(source: RunStatus, target: RunStatus) -> None:
    assert not is_allowed(source, target)
    with pytest.raises(IllegalTransitionError) as caught:
        check_transition(source, target)
    error = caught.value
    assert error.field == "status"
    assert error.code == "illegal_transition"
    assert isinstance(error, ConflictError)
    assert f"illegal transition {source.value} -> {target.value}" in str(error)
    assert "run " not in error.message


def test_refusal_names_the_run_when_given() -> None:
    with pytest.raises(IllegalTransitionError) as caught:
        check_transition(S.COMPLETED, S.RUNNING, job_run_id="TGJOBRUN-abc")
    assert caught.value.message == "run TGJOBRUN-abc: illegal transition COMPLETED -> RUNNING"


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_no_self_transitions(status: RunStatus) -> None:
    with pytest.raises(IllegalTransitionError):
        check_transition(status, status)


def test_terminal_and_pending_sets() -> None:
    assert {S.COMPLETED, S.FAILED, S.DEAD_LETTERED, S.CANCELLED, S.ESCALATED} == TERMINAL
    assert {S.CREATED, S.SCHEDULED, S.DISPATCHED, S.RETRY_WAIT, S.HELD} == PENDING
    assert S.HELD not in CLAIMABLE  # a held run waits for its gate, not for a worker
    assert {S.SCHEDULED, S.RETRY_WAIT} == CLAIMABLE
    assert {S.DISPATCHED, S.RUNNING} == LEASED
    assert not PENDING & TERMINAL
    assert CLAIMABLE <= PENDING
    assert S.RUNNING not in PENDING | TERMINAL


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_status_properties_follow_the_sets(status: RunStatus) -> None:
    assert status.is_terminal == (status in TERMINAL)
    assert status.is_pending == (status in PENDING)


@pytest.mark.parametrize("status", sorted(TERMINAL - {S.DEAD_LETTERED, S.ESCALATED}), ids=str)
def test_final_terminal_states_have_no_exits(status: RunStatus) -> None:
    assert ALLOWED[status] == frozenset()
    for target in RunStatus:
        with pytest.raises(IllegalTransitionError):
            check_transition(status, target)


@pytest.mark.parametrize("status", [S.DEAD_LETTERED, S.ESCALATED], ids=str)
def test_reviewable_terminal_states_exit_only_by_requeue(status: RunStatus) -> None:
    assert ALLOWED[status] == frozenset({S.SCHEDULED})


@pytest.mark.parametrize("status", sorted(PENDING | {S.RUNNING}), ids=str)
def test_every_live_status_can_be_cancelled(status: RunStatus) -> None:
    check_transition(status, S.CANCELLED)


@pytest.mark.parametrize("target", list(RunStatus), ids=str)
def test_sources_of_is_the_inverse_of_the_table(target: RunStatus) -> None:
    expected = frozenset(source for source in RunStatus if target in ALLOWED[source])
    assert sources_of(target) == expected
    for source in RunStatus:
        assert (source in sources_of(target)) == is_allowed(source, target)


@pytest.mark.parametrize(
    ("target", "sources"),
    [
        (S.CREATED, set()),
        (S.SCHEDULED, {S.CREATED, S.DISPATCHED, S.RUNNING, S.DEAD_LETTERED, S.ESCALATED, S.HELD}),
        (S.DISPATCHED, {S.SCHEDULED, S.RETRY_WAIT}),
        (S.RUNNING, {S.DISPATCHED}),
        (S.COMPLETED, {S.RUNNING}),
        (S.RETRY_WAIT, {S.RUNNING}),
        (S.FAILED, {S.RUNNING}),
        (S.DEAD_LETTERED, {S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.RETRY_WAIT, S.HELD}),
        (S.CANCELLED, {S.CREATED, S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.RETRY_WAIT, S.HELD}),
        (S.ESCALATED, {S.RUNNING}),
        (S.HELD, {S.SCHEDULED, S.DISPATCHED, S.RETRY_WAIT}),
    ],
    ids=lambda v: v.value if isinstance(v, RunStatus) else None,
)
def test_sources_of_concrete(target: RunStatus, sources: set[RunStatus]) -> None:
    assert sources_of(target) == frozenset(sources)


def _reachable(start: RunStatus) -> set[RunStatus]:
    seen = {start}
    frontier = [start]
    while frontier:
        for nxt in ALLOWED[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return seen


def test_every_status_is_reachable_from_created() -> None:
    assert _reachable(S.CREATED) == set(RunStatus)


@pytest.mark.parametrize("status", sorted(set(RunStatus) - TERMINAL), ids=str)
def test_every_live_status_can_reach_an_end(status: RunStatus) -> None:
    assert _reachable(status) & TERMINAL


def test_transition_reasons_are_distinct_snake_case_names() -> None:
    values = [r.value for r in TransitionReason]
    assert len(values) == len(set(values))
    assert all(v == r.name.lower() for v, r in zip(values, TransitionReason, strict=True))
    # Retry after failure and recovery after lease expiry stay distinct in the record.
    assert TransitionReason.RETRY_SCHEDULED != TransitionReason.LEASE_EXPIRED
