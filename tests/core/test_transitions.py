"""The one door for run changes: every constructor makes a move the state machine allows, a
forbidden move cannot be built at all, and one rule says which ends the audit log records."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jobgate.core import transitions
from jobgate.core.decide import Decision, Outcome, OutcomeKind
from jobgate.core.errors import IllegalTransitionError
from jobgate.core.governance import Code, Verdict
from jobgate.core.models import DeadLetterReason, JobClass, JobRun, Priority, Transition, TriggerType
from jobgate.core.policies import BUILTIN_RETRY_POLICIES
from jobgate.core.settle import settle_attempt, settle_without_attempt
from jobgate.core.states import ALLOWED, RunStatus, TransitionReason
from jobgate.core.transitions import RunChange, RunValues

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
S = RunStatus


def run(status: RunStatus = S.DISPATCHED, **fields: object) -> JobRun:
    base = JobRun(
        job_run_id="TGJOBRUN-t",
        tenant_id="default",
        job_definition_id="nightly",
        definition_version=1,
        definition_digest="sha256:d",
        job_class=JobClass.MAINTENANCE_JOB,
        trigger_id="TGTRIG-t",
        trigger_type=TriggerType.MANUAL,
        idempotency_key="sha256:k",
        config_snapshot_id="TGCFGSNAP-s",
        config_digest="sha256:c",
        status=status,
        attempt=1 if status is S.RUNNING else 0,
        max_attempts=3,
        priority=Priority.NORMAL,
        queue="default",
        retry_policy="no_retry_v1",
        params={},
        scope={"tenant_id": "default"},
        created_at=NOW - timedelta(minutes=5),
        due_at=NOW - timedelta(minutes=5),
        lease_token=7,
        lease_owner="w1" if status in (S.DISPATCHED, S.RUNNING) else None,
    )
    return base.evolve(**fields)


REFUSAL = Verdict(False, Code.SAFE_MODE, "safe_mode", "safe mode is active")


def every_constructed_change() -> list[RunChange]:
    """One change of each constructor, from every status it is made from."""
    policy = BUILTIN_RETRY_POLICIES["no_retry_v1"]
    out = [
        transitions.started(run(S.DISPATCHED), worker_id="w1", now=NOW),
        transitions.released(run(S.DISPATCHED), actor="w1", now=NOW, reason=TransitionReason.RELEASED_ON_SHUTDOWN),
        transitions.released(
            run(S.DISPATCHED), actor="rescuer", now=NOW, reason=TransitionReason.LEASE_EXPIRED, lease_expired_before=NOW
        ),
        transitions.exhausted(run(S.DISPATCHED), actor="w1", now=NOW),
        transitions.hold_released(run(S.HELD, hold_reason="safe_mode_active"), actor="rescuer", now=NOW),
        transitions.requeued(run(S.DEAD_LETTERED), actor="ada", now=NOW),
        transitions.requeued(run(S.ESCALATED), actor="ada", now=NOW),
    ]
    for kind in OutcomeKind:
        s = settle_attempt(run(S.RUNNING), Outcome(kind, "E"), policy, now=NOW, actor="w1", started_at=NOW)
        out.append(transitions.settled(s, run(S.RUNNING), now=NOW))
    for status in (S.SCHEDULED, S.DISPATCHED, S.RETRY_WAIT, S.HELD):
        if status is not S.HELD:
            out.append(transitions.held(run(status), REFUSAL, actor="w1", now=NOW))
        out.append(transitions.refused(run(status), REFUSAL, actor="w1", now=NOW))
        out.append(transitions.cancelled(run(status), actor="ada", reason="no longer needed", now=NOW))
    return out


def test_every_constructor_makes_a_move_the_table_allows_and_records_it() -> None:
    for change in every_constructed_change():
        assert change.to_status in ALLOWED[change.from_status], change
        assert (change.transition.from_status, change.transition.to_status) == (change.from_status, change.to_status)
        assert set(change.values) <= transitions.RUN_VALUE_COLUMNS


@pytest.mark.parametrize("source", list(RunStatus))
@pytest.mark.parametrize("target", list(RunStatus))
def test_a_change_the_table_forbids_cannot_be_made(source: RunStatus, target: RunStatus) -> None:
    t = Transition("TGJOBRUN-t", source, target, 1, "requeued", "ada", NOW)
    if target in ALLOWED[source]:
        assert RunChange("TGJOBRUN-t", "default", source, target, t).to_status is target
        return
    with pytest.raises(IllegalTransitionError, match=f"{source.value} -> {target.value}"):
        RunChange("TGJOBRUN-t", "default", source, target, t)


def test_replace_cannot_turn_a_change_into_a_forbidden_one() -> None:
    """The review's case: a COMPLETED run 'requeued' to SCHEDULED, built by hand."""
    done = transitions.requeued(run(S.DEAD_LETTERED), actor="ada", now=NOW)
    with pytest.raises(IllegalTransitionError, match="COMPLETED -> SCHEDULED"):
        replace(done, from_status=S.COMPLETED, transition=replace(done.transition, from_status=S.COMPLETED))


def test_a_transition_that_records_another_move_or_an_unknown_column_is_refused() -> None:
    good = transitions.requeued(run(S.DEAD_LETTERED), actor="ada", now=NOW)
    with pytest.raises(IllegalTransitionError, match="another move"):
        replace(good, transition=replace(good.transition, to_status=S.CANCELLED))
    with pytest.raises(IllegalTransitionError, match="lease_token"):
        replace(good, values={"lease_token": 0})  # type: ignore[typeddict-unknown-key]


def _end(to: RunStatus, reason: TransitionReason) -> RunChange:
    source = S.RUNNING if S.RUNNING in ALLOWED and to in ALLOWED[S.RUNNING] else S.SCHEDULED
    t = Transition("TGJOBRUN-t", source, to, 1, reason.value, "w1", NOW)
    return RunChange("TGJOBRUN-t", "default", source, to, t, values=RunValues(error_code="E"))


@pytest.mark.parametrize(
    ("to", "reason", "plain", "required"),
    [
        (S.COMPLETED, TransitionReason.SUCCEEDED, False, True),
        (S.FAILED, TransitionReason.FAILED_NON_RETRYABLE, False, True),
        (S.FAILED, TransitionReason.RETRIES_EXHAUSTED, True, True),
        (S.DEAD_LETTERED, TransitionReason.RETRIES_EXHAUSTED, True, True),
        (S.ESCALATED, TransitionReason.ESCALATED_FOR_REVIEW, True, True),
        (S.CANCELLED, TransitionReason.STOPPED_BY_USER, True, True),
        (S.CANCELLED, TransitionReason.CANCELLED_BY_USER, True, True),
        (S.RETRY_WAIT, TransitionReason.RETRY_SCHEDULED, False, False),
    ],
)
def test_one_materiality_rule(to: RunStatus, reason: TransitionReason, plain: bool, required: bool) -> None:
    """Seed 000 §49, asked by the worker and the rescuer alike (the review found them apart:
    FAILED audited only by the rescuer, a CANCELLED end of an audit_required run only by the
    worker)."""
    change = _end(to, reason)
    assert transitions.material(change, audit_required=lambda: False) is plain
    assert transitions.material(change, audit_required=lambda: True) is required


def test_the_definition_is_asked_only_when_the_end_alone_does_not_decide() -> None:
    asked: list[bool] = []

    def required() -> bool:
        asked.append(True)
        return False

    transitions.material(_end(S.DEAD_LETTERED, TransitionReason.RETRIES_EXHAUSTED), audit_required=required)
    transitions.material(_end(S.RETRY_WAIT, TransitionReason.RETRY_SCHEDULED), audit_required=required)
    assert asked == []
    transitions.material(_end(S.COMPLETED, TransitionReason.SUCCEEDED), audit_required=required)
    assert asked == [True]


def test_a_settled_change_can_carry_a_rules_own_message_and_fencing() -> None:
    decision = Decision(
        S.DEAD_LETTERED, TransitionReason.DEPENDENCY_UNAVAILABLE, dead_letter_reason=DeadLetterReason.MISSING_DEPENDENCY
    )
    s = settle_without_attempt(run(S.DISPATCHED), decision, now=NOW, actor="deps", error_code="DEPENDENCY_UNAVAILABLE")
    change = transitions.settled(
        s, run(S.DISPATCHED), now=NOW, error_message="dependency db down", fenced_to=7, revoke=True
    )
    assert change.values["error_message"] == "dependency db down"
    assert (change.expected_token, change.revoke_lease) == (7, True)
    assert change.dead_letter is not None


def test_a_repeat_dead_letter_is_renamed_with_the_event_that_announces_it() -> None:
    decision = Decision(
        S.DEAD_LETTERED, TransitionReason.DEPENDENCY_UNAVAILABLE, dead_letter_reason=DeadLetterReason.MISSING_DEPENDENCY
    )
    s = settle_without_attempt(run(S.DISPATCHED), decision, now=NOW, actor="deps", error_code="DEPENDENCY_UNAVAILABLE")
    change = transitions.settled(s, run(S.DISPATCHED), now=NOW)
    assert change.dead_letter is not None
    first = change.dead_letter.dead_letter_id
    renamed = change.with_dead_letter_id(f"{first}.2")
    assert renamed.dead_letter is not None and renamed.dead_letter.dead_letter_id == f"{first}.2"
    named = [body["dead_letter_id"] for _, body in renamed.events if "dead_letter_id" in body]
    assert named and set(named) == {f"{first}.2"}
    assert renamed.transition == change.transition and change.dead_letter.dead_letter_id == first  # a copy
