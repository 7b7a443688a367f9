"""The workflow rule: from a workflow's recorded state and the outcomes of its finished step
runs, what happens next. Pure, so the same inputs always give the same transitions: the
coordinator applies them, replay recomputes them and compares (seed 000 §14, §53).

Step runs are ordinary job runs: their retries, timeouts and dead letters are the run state
machine's business. The workflow sees a step only when its run is terminal, and then follows
the step's ``on_failure`` policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, get_args

from jobgate.core.canonical import isoformat_utc
from jobgate.core.states import RunStatus
from jobgate.workflows.spec import FailurePolicy, MissingInput, StepSpec, WorkflowSpec, holds, render


class StepStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"  # asked to stop because a sibling failed; decided once its run has ended
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"


class Phase(StrEnum):
    FORWARD = "forward"
    COMPENSATING = "compensating"


DONE = frozenset({StepStatus.COMPLETED, StepStatus.SKIPPED})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WORKFLOW_ACTIVE = frozenset({RunStatus.CREATED, RunStatus.SCHEDULED, RunStatus.DISPATCHED, RunStatus.RUNNING})
# Every status a workflow run is ever given (a run's HELD, RETRY_WAIT, DEAD_LETTERED and
# DISPATCHED are its steps' runs', never a workflow run's): what a status filter accepts.
WorkflowStatusName = Literal["CREATED", "SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "ESCALATED"]
WORKFLOW_STATUSES = tuple(RunStatus(name) for name in get_args(WorkflowStatusName))

# The workflow's own state machine: the run states of seed §14 a workflow can take.
WORKFLOW_ALLOWED: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.CREATED: frozenset({RunStatus.SCHEDULED, RunStatus.CANCELLED}),
    RunStatus.SCHEDULED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.ESCALATED}),
    RunStatus.RUNNING: frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.ESCALATED}),
}
STEP_ALLOWED: dict[StepStatus, frozenset[StepStatus]] = {
    StepStatus.PENDING: frozenset({StepStatus.RUNNING, StepStatus.SKIPPED, StepStatus.CANCELLED, StepStatus.FAILED}),
    StepStatus.RUNNING: frozenset({StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.STOPPING}),
    StepStatus.STOPPING: frozenset({StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED}),
    StepStatus.COMPLETED: frozenset({StepStatus.COMPENSATING}),
    StepStatus.COMPENSATING: frozenset(
        {StepStatus.COMPENSATED, StepStatus.COMPENSATION_FAILED, StepStatus.CANCELLED}  # halted from outside
    ),
}


@dataclass(frozen=True)
class StepState:
    step_id: str
    status: StepStatus = StepStatus.PENDING
    job_run_id: str | None = None
    compensation_run_id: str | None = None
    outputs: Mapping[str, Any] | None = None
    completed_order: int | None = None
    error_code: str | None = None


@dataclass(frozen=True)
class WorkflowState:
    workflow_run_id: str
    tenant_id: str
    status: RunStatus
    phase: Phase
    params: Mapping[str, str]
    steps: Mapping[str, StepState]
    cancel_requested: bool = False
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    """A finished step (or compensation) run as the workflow sees it."""

    status: RunStatus
    result: Mapping[str, Any] | None = None
    error_code: str | None = None
    message: str | None = None  # why a start was refused
    ended_at: datetime | None = None  # when the run ended: orders completions seen in one pass


@dataclass(frozen=True)
class StepChange:
    step_id: str
    from_status: StepStatus
    to_status: StepStatus
    reason: str
    outputs: Mapping[str, Any] | None = None
    error_code: str | None = None
    completed_order: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowChange:
    from_status: RunStatus
    to_status: RunStatus
    reason: str
    phase: Phase
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class StartRun:
    """Create the run of a step (or of its compensation) with these rendered params."""

    step_id: str
    job: str
    params: Mapping[str, str]
    compensation: bool = False
    retry_policy: str | None = None
    timeout_policy: str | None = None


@dataclass(frozen=True)
class StopRun:
    step_id: str
    job_run_id: str


Change = StepChange | WorkflowChange


@dataclass(frozen=True)
class Plan:
    changes: tuple[Change, ...] = ()
    starts: tuple[StartRun, ...] = ()
    stops: tuple[StopRun, ...] = ()
    state: WorkflowState | None = None  # the state after the changes

    @property
    def empty(self) -> bool:
        return not self.changes and not self.starts and not self.stops


class _Builder:
    """The state being advanced and what was decided, in order."""

    def __init__(self, state: WorkflowState) -> None:
        self.state = state
        self.steps = dict(state.steps)
        self.changes: list[Change] = []
        self.starts: list[StartRun] = []
        self.stops: list[StopRun] = []

    def step(self, step_id: str, to: StepStatus, reason: str, **values: Any) -> None:
        current = self.steps[step_id]
        detail = values.pop("detail", {})
        self.changes.append(
            StepChange(
                step_id,
                current.status,
                to,
                reason,
                outputs=values.get("outputs"),
                error_code=values.get("error_code"),
                completed_order=values.get("completed_order"),
                detail=detail,
            )
        )
        self.steps[step_id] = replace(current, status=to, **values)

    def workflow(
        self,
        to: RunStatus,
        reason: str,
        *,
        phase: Phase | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        s = self.state
        phase = phase or s.phase
        self.changes.append(WorkflowChange(s.status, to, reason, phase, error_code, error_message))
        self.state = replace(
            s,
            status=to,
            phase=phase,
            error_code=error_code or s.error_code,
            error_message=error_message or s.error_message,
        )

    def outputs(self) -> dict[str, Mapping[str, Any]]:
        return {sid: st.outputs for sid, st in self.steps.items() if st.outputs is not None}

    def plan(self) -> Plan:
        final = replace(self.state, steps=dict(self.steps))
        return Plan(tuple(self.changes), tuple(self.starts), tuple(self.stops), final)


def plan(
    spec: WorkflowSpec, state: WorkflowState, outcomes: Mapping[str, RunOutcome], *, refusals_first: bool = False
) -> Plan:
    """Everything that follows from ``state`` and the finished runs in ``outcomes`` (by run id).

    ``refused`` steps (their run could not be created: not approved, safe mode...) are given
    as outcomes of a pseudo run id ``refused:<step>`` by the caller; they fail like a run would.
    A refusal is recorded after the runs that finished: the step refused was started because
    they did. ``refusals_first``: the order records made before that was so have (replay).
    """
    b = _Builder(state)
    if state.status not in WORKFLOW_ACTIVE:
        return b.plan()
    _observe(spec, b, outcomes, refusals_first=refusals_first)
    failing = any(st.status is StepStatus.FAILED for st in b.steps.values())
    if state.cancel_requested and b.state.phase is Phase.FORWARD and not failing:
        # (A workflow already failing follows its failure policy — its compensation too.)
        _halt(spec, b, "workflow_cancelled", wait=False)
        b.workflow(RunStatus.CANCELLED, "cancelled_by_user")
        return b.plan()
    if state.status in (RunStatus.CREATED, RunStatus.SCHEDULED):
        b.workflow(RunStatus.RUNNING, "started")
    for _ in range(len(spec.steps) + 2):  # each pass settles at least one step or stops
        if b.state.phase is Phase.FORWARD:
            if not _forward(spec, b):
                break
        else:
            _compensate(spec, b, outcomes)
            break
    return b.plan()


def _observe(spec: WorkflowSpec, b: _Builder, outcomes: Mapping[str, RunOutcome], *, refusals_first: bool) -> None:
    """Record what finished, then what was refused. Step runs that finished are taken in the
    order they ended (then by position), so ``completed_order`` — and the reverse order
    compensation follows — is the order the runs really completed, however many one pass sees."""
    if refusals_first:
        _observe_refusals(spec, b, outcomes)
    _observe_finished(spec, b, outcomes)
    if not refusals_first:
        _observe_refusals(spec, b, outcomes)


def _observe_refusals(spec: WorkflowSpec, b: _Builder, outcomes: Mapping[str, RunOutcome]) -> None:
    for step in spec.steps:
        refused = outcomes.get(f"refused:{step.step_id}")
        if b.steps[step.step_id].status is StepStatus.PENDING and refused is not None:
            b.step(
                step.step_id,
                StepStatus.FAILED,
                "step_refused",
                error_code=refused.error_code,
                detail={"why": refused.message or ""},
            )


def _observe_finished(spec: WorkflowSpec, b: _Builder, outcomes: Mapping[str, RunOutcome]) -> None:
    finished: list[tuple[StepSpec, RunOutcome]] = []
    for step in spec.steps:
        st = b.steps[step.step_id]
        if st.status in (StepStatus.RUNNING, StepStatus.STOPPING) and st.job_run_id in outcomes:
            finished.append((step, outcomes[str(st.job_run_id)]))
    finished.sort(key=lambda pair: (pair[1].ended_at is None, pair[1].ended_at or _EPOCH, pair[0].position))
    order = max((s.completed_order or 0 for s in b.steps.values()), default=0)
    for step, o in finished:
        ended = {"run_ended_at": isoformat_utc(o.ended_at)} if o.ended_at is not None else {}
        stopping = b.steps[step.step_id].status is StepStatus.STOPPING
        if o.status is RunStatus.COMPLETED:
            result = o.result if isinstance(o.result, Mapping) else {}
            missing = [k for k in step.outputs if k not in result]
            if missing:
                b.step(
                    step.step_id,
                    StepStatus.FAILED,
                    "output_missing",
                    error_code="workflow_output_missing",
                    detail={"missing": missing, **ended},
                )
            else:
                order += 1
                outputs = {k: result[k] for k in step.outputs}
                b.step(
                    step.step_id,
                    StepStatus.COMPLETED,
                    "step_completed",
                    outputs=outputs,
                    completed_order=order,
                    detail=ended,
                )
        elif stopping:  # stopped as asked: it did not complete, nothing of it to undo
            b.step(step.step_id, StepStatus.CANCELLED, "step_stopped", detail={"run_status": o.status.value, **ended})
        else:
            code = o.error_code or f"run_{o.status.value.lower()}"
            b.step(
                step.step_id,
                StepStatus.FAILED,
                "step_failed",
                error_code=code,
                detail={"run_status": o.status.value, **ended},
            )
    for step in spec.steps:
        st = b.steps[step.step_id]
        if st.status is StepStatus.COMPENSATING and st.compensation_run_id in outcomes:
            o = outcomes[str(st.compensation_run_id)]
            if o.status is RunStatus.COMPLETED:
                b.step(step.step_id, StepStatus.COMPENSATED, "compensated")
            else:
                code = o.error_code or f"run_{o.status.value.lower()}"
                b.step(step.step_id, StepStatus.COMPENSATION_FAILED, "compensation_failed", error_code=code)


def _halt(spec: WorkflowSpec, b: _Builder, reason: str, *, wait: bool) -> None:
    """Pending steps will not start; running ones are stopped. With ``wait`` a running step is
    STOPPING until its run has ended (it may still complete, and then counts as completed, so
    a compensation undoes it too); without, it is CANCELLED at once (a cancel by a user)."""
    for step in spec.steps:
        st = b.steps[step.step_id]
        if st.status is StepStatus.PENDING:
            b.step(step.step_id, StepStatus.CANCELLED, reason)
        elif st.status is StepStatus.RUNNING:
            assert st.job_run_id is not None
            b.stops.append(StopRun(step.step_id, st.job_run_id))
            b.step(step.step_id, StepStatus.STOPPING if wait else StepStatus.CANCELLED, reason)


def _forward(spec: WorkflowSpec, b: _Builder) -> bool:
    """One pass forward; True when another pass may decide more."""
    failed = [s for s in spec.steps if b.steps[s.step_id].status is StepStatus.FAILED]
    if failed:
        first = failed[0]
        code = b.steps[first.step_id].error_code
        message = f"step {first.step_id!r} failed ({code})"
        _halt(spec, b, "workflow_stopping", wait=True)
        if any(b.steps[s.step_id].status is StepStatus.STOPPING for s in spec.steps):
            return False  # decide once every stopped sibling has really ended
        if first.on_failure is FailurePolicy.ESCALATE:
            b.workflow(RunStatus.ESCALATED, "step_escalated", error_code=code, error_message=message)
        elif first.on_failure is FailurePolicy.COMPENSATE:
            b.workflow(
                RunStatus.RUNNING, "compensating", phase=Phase.COMPENSATING, error_code=code, error_message=message
            )
            return True
        else:
            b.workflow(RunStatus.FAILED, "step_failed", error_code=code, error_message=message)
        return False
    progressed = False
    for step in spec.steps:
        st = b.steps[step.step_id]
        if st.status is not StepStatus.PENDING:
            continue
        if not all(b.steps[d].status in DONE for d in step.depends_on):
            continue
        progressed = True
        _start_or_skip(step, b)
    if progressed:
        return True
    if all(b.steps[s.step_id].status in DONE for s in spec.steps):
        b.workflow(RunStatus.COMPLETED, "all_steps_done")
    return False


def _start_or_skip(step: StepSpec, b: _Builder) -> None:
    values = {"workflow_run_id": b.state.workflow_run_id, "tenant_id": b.state.tenant_id}
    outputs = b.outputs()
    if step.when is not None:
        try:
            go = holds(step.when, b.state.params, outputs, values)
        except MissingInput:
            go = False  # the value comes from a skipped step: the condition cannot hold
        if not go:
            b.step(step.step_id, StepStatus.SKIPPED, "condition_false", detail={"when": step.when.text})
            return
    try:
        params = render(step.params, b.state.params, outputs, values)
    except MissingInput as exc:
        b.step(
            step.step_id,
            StepStatus.FAILED,
            "input_missing",
            error_code="workflow_input_missing",
            detail={"why": str(exc)},
        )
        return
    b.starts.append(StartRun(step.step_id, step.job, params, False, step.retry_policy, step.timeout_policy))
    b.step(step.step_id, StepStatus.RUNNING, "step_started", detail={"job": step.job, "params": params})


def _compensate(spec: WorkflowSpec, b: _Builder, outcomes: Mapping[str, RunOutcome]) -> None:
    if any(st.status is StepStatus.COMPENSATING for st in b.steps.values()):
        return  # one compensation at a time, in reverse order of completion
    if any(st.status is StepStatus.COMPENSATION_FAILED for st in b.steps.values()):
        b.workflow(RunStatus.ESCALATED, "compensation_failed")
        return
    candidates = sorted(
        (s for s in spec.steps if s.compensate is not None and b.steps[s.step_id].status is StepStatus.COMPLETED),
        key=lambda s: b.steps[s.step_id].completed_order or 0,
        reverse=True,
    )
    if not candidates:
        b.workflow(RunStatus.FAILED, "compensated")
        return
    step = candidates[0]
    assert step.compensate is not None
    refused = outcomes.get(f"refused:{step.step_id}")
    if refused is not None:  # its compensation run could not be created (not approved, safe mode...)
        b.step(step.step_id, StepStatus.COMPENSATING, "compensation_started", detail={"job": step.compensate.job})
        b.step(step.step_id, StepStatus.COMPENSATION_FAILED, "compensation_refused", error_code=refused.error_code)
        b.workflow(RunStatus.ESCALATED, "compensation_failed")
        return
    values = {"workflow_run_id": b.state.workflow_run_id, "tenant_id": b.state.tenant_id}
    try:
        params = render(step.compensate.params, b.state.params, b.outputs(), values)
    except MissingInput as exc:
        b.step(step.step_id, StepStatus.COMPENSATING, "compensation_started", detail={"why": str(exc)})
        b.step(step.step_id, StepStatus.COMPENSATION_FAILED, "input_missing", error_code="workflow_input_missing")
        b.workflow(RunStatus.ESCALATED, "compensation_failed")
        return
    b.starts.append(StartRun(step.step_id, step.compensate.job, params, True))
    b.step(
        step.step_id,
        StepStatus.COMPENSATING,
        "compensation_started",
        detail={"job": step.compensate.job, "params": params},
    )


def initial_state(
    spec: WorkflowSpec, workflow_run_id: str, tenant_id: str, params: Mapping[str, str], status: RunStatus
) -> WorkflowState:
    return WorkflowState(
        workflow_run_id=workflow_run_id,
        tenant_id=tenant_id,
        status=status,
        phase=Phase.FORWARD,
        params=dict(params),
        steps={s.step_id: StepState(s.step_id) for s in spec.steps},
    )
