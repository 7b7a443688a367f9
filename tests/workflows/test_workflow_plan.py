"""The pure workflow rule, driven by a tiny simulator: no database, every policy and order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.states import RunStatus
from jobgate.workflows.plan import (
    Plan,
    RunOutcome,
    StepChange,
    StepStatus,
    WorkflowChange,
    WorkflowState,
    initial_state,
    plan,
)
from jobgate.workflows.spec import WorkflowSpec, parse_workflow

OK = RunOutcome(RunStatus.COMPLETED, {"v": 1, "flag": True})
BROKEN = RunOutcome(RunStatus.DEAD_LETTERED, None, "STEP_BROKEN")


def spec_of(steps: list[dict[str, Any]], **extra: Any) -> WorkflowSpec:
    return parse_workflow({"steps": steps, **extra}, source="test")


class Sim:
    """Applies plans to a state the way the coordinator does, with fake run ids."""

    def __init__(self, spec: WorkflowSpec, params: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.state = initial_state(spec, "W1", "t", params or {}, RunStatus.SCHEDULED)
        self.started: list[str] = []  # run starts in order: "a", "b", "undo:a" ...
        self.stopped: list[str] = []
        self.log: list[tuple[str | None, str, str]] = []  # (step or None, to, reason)
        self.runs: dict[str, str] = {}  # run id -> "a" / "undo:a"

    def step(self, outcomes: dict[str, RunOutcome] | None = None) -> Plan:
        p = plan(self.spec, self.state, outcomes or {})
        steps = dict(p.state.steps) if p.state else {}
        for start in p.starts:
            label = f"undo:{start.step_id}" if start.compensation else start.step_id
            run_id = f"R-{label}"
            self.started.append(label)
            self.runs[run_id] = label
            field = "compensation_run_id" if start.compensation else "job_run_id"
            steps[start.step_id] = replace(steps[start.step_id], **{field: run_id})
        self.stopped += [s.step_id for s in p.stops]
        for c in p.changes:
            self.log.append((c.step_id if isinstance(c, StepChange) else None, c.to_status.value, c.reason))
        assert p.state is not None
        self.state = replace(p.state, steps=steps)
        return p

    def finish(self, label: str, outcome: RunOutcome = OK) -> Plan:
        return self.step({f"R-{label}": outcome})

    def running(self) -> list[str]:
        return [sid for sid, s in self.state.steps.items() if s.status is StepStatus.RUNNING]

    @property
    def status(self) -> RunStatus:
        return self.state.status

    def step_status(self, step_id: str) -> StepStatus:
        return self.state.steps[step_id].status


def test_ordered_steps_run_one_after_another() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j"}, {"id": "b", "job": "j"}, {"id": "c", "job": "j"}]))
    sim.step()
    assert sim.started == ["a"] and sim.status is RunStatus.RUNNING
    sim.finish("a")
    assert sim.started == ["a", "b"]
    sim.finish("b")
    sim.finish("c")
    assert sim.started == ["a", "b", "c"]
    assert sim.status is RunStatus.COMPLETED
    assert sim.log[-1] == (None, "COMPLETED", "all_steps_done")


def test_independent_branches_start_together_and_the_join_waits_for_both() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j"},
                {"id": "b", "job": "j", "depends_on": []},
                {"id": "c", "job": "j", "depends_on": ["a", "b"]},
            ]
        )
    )
    sim.step()
    assert sorted(sim.started) == ["a", "b"]
    sim.finish("b")
    assert "c" not in sim.started
    sim.finish("a")
    assert sim.started[-1] == "c"


def test_outputs_flow_into_the_params_of_later_steps() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "outputs": ["v"]},
                {"id": "b", "job": "j", "params": {"x": "${steps.a.outputs.v}-${params.p}"}},
            ]
        ),
        {"p": "q"},
    )
    sim.step()
    p = sim.finish("a", RunOutcome(RunStatus.COMPLETED, {"v": 41, "other": 0}))
    assert p.starts[0].params == {"x": "41-q"}
    assert sim.state.steps["a"].outputs == {"v": 41}  # only what is declared is kept


def test_a_missing_declared_output_fails_the_step() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j", "outputs": ["nope"]}, {"id": "b", "job": "j"}]))
    sim.step()
    sim.finish("a")
    assert sim.step_status("a") is StepStatus.FAILED
    assert sim.state.error_code == "workflow_output_missing"
    assert sim.status is RunStatus.FAILED and sim.step_status("b") is StepStatus.CANCELLED


def test_fail_stops_the_running_siblings_and_decides_once_they_have_ended() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j"},
                {"id": "b", "job": "j", "depends_on": []},
                {"id": "c", "job": "j", "depends_on": ["a", "b"]},
            ]
        )
    )
    sim.step()
    sim.finish("a", BROKEN)
    assert sim.stopped == ["b"]
    assert [sim.step_status(s) for s in "abc"] == [StepStatus.FAILED, StepStatus.STOPPING, StepStatus.CANCELLED]
    assert sim.status is RunStatus.RUNNING  # b's run may still complete: wait for it
    sim.finish("b", RunOutcome(RunStatus.CANCELLED))
    assert sim.step_status("b") is StepStatus.CANCELLED and sim.status is RunStatus.FAILED
    assert sim.state.error_code == "STEP_BROKEN"
    assert sim.step().empty  # a finished workflow decides nothing more


def test_a_stopped_sibling_that_completed_anyway_is_compensated() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "compensate": {"job": "u"}},
                {"id": "b", "job": "j", "depends_on": [], "compensate": {"job": "u"}},
            ],
            on_failure="compensate",
        )
    )
    sim.step()
    sim.finish("b", BROKEN)
    assert sim.step_status("a") is StepStatus.STOPPING and sim.started == ["a", "b"]
    sim.finish("a")  # the stop came too late: a completed, so it must be undone
    assert sim.step_status("a") is StepStatus.COMPENSATING and sim.started[-1] == "undo:a"
    sim.finish("undo:a")
    assert sim.status is RunStatus.FAILED and sim.step_status("a") is StepStatus.COMPENSATED


def test_completions_seen_in_one_pass_are_ordered_by_when_their_runs_ended() -> None:
    from datetime import UTC, datetime

    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "compensate": {"job": "u"}},
                {"id": "b", "job": "j", "depends_on": [], "compensate": {"job": "u"}},
                {"id": "c", "job": "j", "depends_on": ["a", "b"]},
            ],
            on_failure="compensate",
        )
    )
    sim.step()
    early, late = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    sim.step(
        {
            "R-a": RunOutcome(RunStatus.COMPLETED, {}, ended_at=late),
            "R-b": RunOutcome(RunStatus.COMPLETED, {}, ended_at=early),
        }
    )
    assert sim.state.steps["b"].completed_order == 1 and sim.state.steps["a"].completed_order == 2
    sim.finish("c", BROKEN)
    assert sim.started[-1] == "undo:a"  # a ended last: undone first


def test_escalate_hands_the_workflow_to_a_human() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j", "on_failure": "escalate"}, {"id": "b", "job": "j"}]))
    sim.step()
    sim.finish("a", BROKEN)
    assert sim.status is RunStatus.ESCALATED and sim.step_status("b") is StepStatus.CANCELLED


def test_compensation_undoes_completed_steps_in_reverse_order_of_completion() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "compensate": {"job": "u"}},
                {"id": "b", "job": "j", "depends_on": [], "compensate": {"job": "u"}},
                {"id": "c", "job": "j", "depends_on": ["a", "b"]},  # no compensation: nothing to undo
                {"id": "d", "job": "j", "compensate": {"job": "u"}},
                {"id": "e", "job": "j"},
            ],
            on_failure="compensate",
        )
    )
    sim.step()
    sim.finish("b")  # b completes before a
    sim.finish("a")
    sim.finish("c")
    sim.finish("d")
    sim.finish("e", BROKEN)
    assert sim.status is RunStatus.RUNNING and sim.state.phase.value == "compensating"
    assert sim.started[-1] == "undo:d"
    sim.finish("undo:d")
    assert sim.started[-1] == "undo:a"  # a completed after b: undone first
    sim.finish("undo:a")
    assert sim.started[-1] == "undo:b"
    sim.finish("undo:b")
    assert sim.status is RunStatus.FAILED
    assert sim.log[-1] == (None, "FAILED", "compensated")
    assert [sim.step_status(s) for s in "abcde"] == [
        StepStatus.COMPENSATED,
        StepStatus.COMPENSATED,
        StepStatus.COMPLETED,
        StepStatus.COMPENSATED,
        StepStatus.FAILED,
    ]
    assert sim.state.error_code == "STEP_BROKEN"  # the cause is kept through the compensation


def test_a_failed_compensation_escalates() -> None:
    sim = Sim(
        spec_of(
            [{"id": "a", "job": "j", "compensate": {"job": "u"}}, {"id": "b", "job": "j", "on_failure": "compensate"}]
        )
    )
    sim.step()
    sim.finish("a")
    sim.finish("b", BROKEN)
    sim.finish("undo:a", BROKEN)
    assert sim.step_status("a") is StepStatus.COMPENSATION_FAILED
    assert sim.status is RunStatus.ESCALATED


def test_cancel_stops_running_steps_and_cancels_pending_ones() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j"}, {"id": "b", "job": "j", "depends_on": []}, {"id": "c", "job": "j"}]))
    sim.step()
    sim.finish("a")
    sim.state = replace(sim.state, cancel_requested=True)
    sim.step()
    assert sim.status is RunStatus.CANCELLED
    assert sim.stopped == ["b"]  # c follows b: it never started, it is cancelled
    assert [sim.step_status(s) for s in "abc"] == [StepStatus.COMPLETED, StepStatus.CANCELLED, StepStatus.CANCELLED]


def test_cancel_before_anything_started_starts_nothing() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j"}]))
    sim.state = replace(sim.state, cancel_requested=True)
    sim.step()
    assert sim.started == [] and sim.status is RunStatus.CANCELLED


def test_a_false_condition_skips_and_a_skipped_dependency_still_counts_as_done() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "outputs": ["flag"]},
                {"id": "b", "job": "j", "when": "steps.a.outputs.flag == false"},
                {"id": "c", "job": "j"},
            ]
        )
    )
    sim.step()
    sim.finish("a")  # flag is true: b is skipped, c runs
    assert sim.step_status("b") is StepStatus.SKIPPED and sim.started == ["a", "c"]
    sim.finish("c")
    assert sim.status is RunStatus.COMPLETED


def test_a_refused_start_fails_its_step_like_a_failed_run() -> None:
    sim = Sim(spec_of([{"id": "a", "job": "j"}, {"id": "b", "job": "j"}]))
    sim.step({"refused:a": RunOutcome(RunStatus.FAILED, None, "definition_not_approved", "no approval")})
    assert sim.status is RunStatus.FAILED and sim.state.error_code == "definition_not_approved"


def test_the_same_inputs_give_the_same_plan() -> None:
    spec = spec_of([{"id": "a", "job": "j"}, {"id": "b", "job": "j", "depends_on": []}])
    state = initial_state(spec, "W", "t", {}, RunStatus.SCHEDULED)
    assert plan(spec, state, {}) == plan(spec, state, {})


@st.composite
def dags(draw: Callable[..., Any]) -> tuple[WorkflowSpec, list[int]]:
    n = draw(st.integers(1, 8))
    steps = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3, unique=True)) if i else []
        steps.append({"id": f"s{i}", "job": "j", "depends_on": [f"s{d}" for d in deps]})
    order = draw(st.lists(st.integers(0, 10_000), min_size=n * 2, max_size=n * 2))
    return spec_of(steps), order


@settings(max_examples=150, deadline=None)
@given(dags())
def test_any_dag_completes_each_step_once_and_never_before_its_dependencies(
    case: tuple[WorkflowSpec, list[int]],
) -> None:
    spec, picks = case
    sim = Sim(spec)
    sim.step()
    finished: list[str] = []
    for pick in picks:
        running = sim.running()
        if not running:
            break
        label = running[pick % len(running)]
        for dep in spec.step(label).depends_on:
            assert dep in finished
        finished.append(label)
        sim.finish(label)
    while sim.running():
        label = sim.running()[0]
        finished.append(label)
        sim.finish(label)
    assert sim.status is RunStatus.COMPLETED
    assert sorted(sim.started) == sorted(s.step_id for s in spec.steps)
    assert len(set(sim.started)) == len(sim.started)


def test_every_change_follows_the_workflow_and_step_state_machines() -> None:
    from jobgate.workflows.plan import STEP_ALLOWED, WORKFLOW_ALLOWED

    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "compensate": {"job": "u"}},
                {"id": "b", "job": "j", "depends_on": []},
                {"id": "c", "job": "j", "on_failure": "compensate", "depends_on": ["a"]},
            ]
        )
    )
    plans = [sim.step(), sim.finish("a"), sim.finish("c", BROKEN), sim.finish("b"), sim.finish("undo:a")]
    assert sim.status is RunStatus.FAILED
    seen = 0
    for p in plans:
        for c in p.changes:
            seen += 1
            if isinstance(c, WorkflowChange):
                # A phase change (forward -> compensating) keeps the status: the only same-status change.
                assert c.to_status in WORKFLOW_ALLOWED[c.from_status] or (
                    c.from_status == c.to_status and c.reason == "compensating"
                ), c
            else:
                assert c.to_status in STEP_ALLOWED[c.from_status], c
    assert seen >= 10 and isinstance(sim.state, WorkflowState)


def test_a_cancel_does_not_skip_a_compensation_already_decided() -> None:
    sim = Sim(
        spec_of(
            [
                {"id": "a", "job": "j", "compensate": {"job": "u"}},
                {"id": "b", "job": "j", "on_failure": "compensate"},
                {"id": "c", "job": "j", "depends_on": ["a"]},
            ]
        )
    )
    sim.step()
    sim.finish("a")
    sim.finish("b", BROKEN)  # c is STOPPING: the failure's decision waits for it
    assert sim.step_status("c") is StepStatus.STOPPING
    sim.state = replace(sim.state, cancel_requested=True)
    sim.finish("c", RunOutcome(RunStatus.CANCELLED))
    assert sim.started[-1] == "undo:a" and sim.status is RunStatus.RUNNING  # compensating, not CANCELLED
    sim.finish("undo:a")
    assert sim.status is RunStatus.FAILED and sim.step_status("a") is StepStatus.COMPENSATED


def test_a_step_refused_is_recorded_after_the_step_whose_end_started_it() -> None:
    """Found by two reviews: a step refused when its predecessor's end started it (approval
    revoked meanwhile) was recorded before that predecessor's completion, so the sealed
    sequence said a dependent step failed before what it depends on ended."""
    sim = Sim(spec_of([{"id": "s1", "job": "j"}, {"id": "s2", "job": "j"}, {"id": "s3", "job": "j"}]))
    sim.step()
    refused = RunOutcome(RunStatus.FAILED, None, "approval_revoked", message="revoked")
    outcomes = {"R-s1": OK, "refused:s2": refused}

    def order(p: Plan) -> list[tuple[str, str, str]]:
        return [(c.step_id, c.to_status.value, c.reason) for c in p.changes if isinstance(c, StepChange)][:2]

    assert order(plan(sim.spec, sim.state, outcomes)) == [
        ("s1", "COMPLETED", "step_completed"),
        ("s2", "FAILED", "step_refused"),
    ]
    # what records made before hold, which replay still reproduces
    assert order(plan(sim.spec, sim.state, outcomes, refusals_first=True)) == [
        ("s2", "FAILED", "step_refused"),
        ("s1", "COMPLETED", "step_completed"),
    ]
