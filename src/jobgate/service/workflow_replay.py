"""Replaying a workflow run's state sequence (seed 000 §14, §53).

The recorded transitions are grouped by the advance that wrote them (one advance, one instant).
Each group's observations — a step's run finished, a start was refused, a cancel was asked —
are fed to ``plan`` from the state the earlier groups built, and what ``plan`` decides must be
exactly what the group recorded. ``Hash(WorkflowStateSequence)`` is the digest of the sequence's
logical content (run ids are left out: they are minted when a run is created, not decided).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby
from typing import Any

from jobgate.core.canonical import digest
from jobgate.core.errors import JobgateError, NotFoundError
from jobgate.core.records import WorkflowTransition
from jobgate.core.states import RunStatus
from jobgate.definitions.schema import content_digest
from jobgate.service.engine import Engine
from jobgate.workflows.plan import (
    RunOutcome,
    StepChange,
    StepStatus,
    WorkflowChange,
    WorkflowState,
    initial_state,
    plan,
)
from jobgate.workflows.spec import WorkflowSpec, workflow_spec_of

# Step transitions that record an outcome from outside the planner (a run ended, a gate refused).
_OBSERVED = {
    "step_completed",
    "step_stopped",
    "step_failed",
    "output_missing",
    "step_refused",
    "compensated",
    "compensation_failed",
    "compensation_refused",
}
# Written by the SLA monitor (its escalation) and by the halt that follows it: recorded facts
# from outside the planner, applied as they are.
_EXTERNAL = {"sla_escalation", "workflow_halted", "definition_unreadable"}


@dataclass(frozen=True)
class WorkflowReplayReport:
    workflow_run_id: str
    match: bool
    original_hash: str
    replay_hash: str | None
    first_difference: str | None


_KEY_FIELDS = ("step_id", "from_status", "to_status", "reason", "error_code", "outputs", "params", "job")


def sequence_key(
    step_id: str | None,
    from_status: str | None,
    to_status: str,
    reason: str,
    detail: dict[str, Any],
) -> list[Any]:
    """What a transition decides: run ids excluded, everything else kept."""
    return [
        step_id,
        from_status,
        to_status,
        reason,
        detail.get("error_code"),
        detail.get("outputs"),
        detail.get("params"),
        detail.get("job"),
    ]


def _recorded_key(t: WorkflowTransition) -> list[Any]:
    # A detail that is no object (a malformed row) is kept whole, so the hash still covers it;
    # replay names it when it reads the row (``_observations``).
    detail = dict(t.detail) if isinstance(t.detail, Mapping) else {"error_code": t.detail}
    return sequence_key(t.step_id, t.from_status, t.to_status, t.reason, detail)


def sequence_hash(transitions: list[WorkflowTransition]) -> str:
    return digest([_recorded_key(t) for t in transitions])


def replay_workflow(engine: Engine, workflow_run_id: str, *, tenant_id: str | None = None) -> WorkflowReplayReport:
    with engine.store.read(tenant_id=tenant_id) as tx:
        record = tx.workflow_get(workflow_run_id, tenant_id)
        if record is None:
            raise NotFoundError(f"no workflow run {workflow_run_id!r}", field="workflow_run_id")
        transitions = tx.workflow_transitions(workflow_run_id)
        steps = tx.workflow_steps(workflow_run_id)
        stored = tx.definition_get(record.tenant_id, record.job_definition_id, record.definition_version)
    original = sequence_hash(transitions)

    def differs(where: str) -> WorkflowReplayReport:
        return WorkflowReplayReport(workflow_run_id, False, original, None, where)

    # The content as stored, checked against the digest the run started with; never re-validated
    # against today's configuration (a removed policy must not make an honest record mismatch).
    if stored is None:
        return differs("definition_version: the version the workflow names is not stored")
    if content_digest(stored.content) != record.definition_digest:
        return differs("definition_digest: the stored content no longer matches the digest the run started with")
    try:
        spec = workflow_spec_of(stored.content, record.job_definition_id)
    except JobgateError as exc:
        return differs(f"definition: the stored workflow block cannot be read ({exc.code})")
    head = [(t.step_id, t.from_status, t.to_status, t.reason) for t in transitions[:2]]
    if head != [(None, None, "CREATED", "created"), (None, "CREATED", "SCHEDULED", "admitted")]:
        return differs("seq 1-2: a workflow run starts CREATED then SCHEDULED")
    try:
        state = initial_state(spec, record.workflow_run_id, record.tenant_id, record.params, RunStatus.SCHEDULED)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return differs(f"params: the recorded params cannot be read ({type(exc).__name__})")
    produced: list[list[Any]] = [_recorded_key(t) for t in transitions[:2]]
    for _, group_iter in groupby(transitions[2:], key=_advance_of):
        group = list(group_iter)
        if group[0].reason in _EXTERNAL:
            applied = _apply_external(state, group)
            if isinstance(applied, str):
                return differs(applied)
            produced += [_recorded_key(t) for t in group]
            state = applied
            continue
        try:
            outcomes, state = _observations(spec, state, group)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # A malformed row (an unknown status or step, a detail that is no object, a time that
            # is none): named, never a crash.
            return differs(f"seq {group[0].seq}: the recorded transition cannot be read ({type(exc).__name__}: {exc})")
        decided = plan(spec, state, outcomes)
        keys = [_key_of(c) for c in decided.changes]
        recorded = [_recorded_key(t) for t in group]
        if keys != recorded:  # recorded before a refusal came after the runs that finished
            legacy = plan(spec, state, outcomes, refusals_first=True)
            if [_key_of(c) for c in legacy.changes] == recorded:
                decided, keys = legacy, recorded
        for offset, (want, got) in enumerate(zip([_recorded_key(t) for t in group], keys, strict=False)):
            if want != got:
                col = next(i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b)
                return differs(
                    f"seq {group[offset].seq} ({want[0] or 'workflow'}): {_KEY_FIELDS[col]}: recorded {want[col]!r}, "
                    f"replay decides {got[col]!r}"
                )
        if len(keys) != len(group):
            return differs(f"seq {group[0].seq}: the advance recorded {len(group)} changes, replay decides {len(keys)}")
        produced += keys
        assert decided.state is not None
        state = _with_run_ids(decided.state, group)
    if state.status is not record.status:  # the row itself, not only its transitions
        return differs(f"status: recorded {record.status.value}, the sequence ends {state.status.value}")
    if record.phase != state.phase.value:
        return differs(f"phase: recorded {record.phase}, the sequence ends {state.phase.value}")
    for step in steps:  # the step rows, which the console and the API show, field by field
        ended = state.steps.get(step.step_id)
        if ended is None or step.status != ended.status.value:
            ends = "no such step" if ended is None else ended.status.value
            return differs(f"step {step.step_id}: status: recorded {step.status}, the sequence ends {ends}")
        for name in ("outputs", "error_code", "job_run_id", "compensation_run_id", "completed_order"):
            recorded, replayed = getattr(step, name), getattr(ended, name)
            if recorded != replayed:
                return differs(f"step {step.step_id}: {name}: recorded {recorded!r}, the sequence ends {replayed!r}")
    if len(steps) != len(state.steps):
        return differs(f"steps: {len(steps)} recorded, the workflow has {len(state.steps)}")
    replayed = digest(produced)
    return WorkflowReplayReport(workflow_run_id, replayed == original, original, replayed, None)


def _observations(
    spec: WorkflowSpec, state: WorkflowState, group: list[WorkflowTransition]
) -> tuple[dict[str, RunOutcome], WorkflowState]:
    """The outcomes (and a cancel request) the recorded advance saw, as ``plan`` takes them."""
    outcomes: dict[str, RunOutcome] = {}
    for t in group:
        if t.reason == "cancelled_by_user":
            state = replace(state, cancel_requested=True)
        if t.step_id is None or t.reason not in _OBSERVED:
            continue
        step = state.steps[t.step_id]
        code = t.detail.get("error_code")
        if t.reason in ("step_refused", "compensation_refused"):
            outcomes[f"refused:{t.step_id}"] = RunOutcome(RunStatus.FAILED, None, code, t.detail.get("why"))
            continue
        run_id = step.compensation_run_id if t.reason.startswith("compensat") else step.job_run_id
        run_id = run_id or f"replay:{t.step_id}"
        ended = _instant(t.detail.get("run_ended_at"))
        if t.reason == "step_completed":
            outcomes[run_id] = RunOutcome(RunStatus.COMPLETED, dict(t.detail.get("outputs") or {}), ended_at=ended)
        elif t.reason == "output_missing" or t.reason == "compensated":
            outcomes[run_id] = RunOutcome(RunStatus.COMPLETED, {}, ended_at=ended)
        else:
            status = RunStatus(t.detail.get("run_status", RunStatus.FAILED.value))
            outcomes[run_id] = RunOutcome(status, None, code, ended_at=ended)
    return outcomes, state


def _key_of(change: StepChange | WorkflowChange) -> list[Any]:
    if isinstance(change, WorkflowChange):
        wf_detail: dict[str, Any] = {"error_code": change.error_code} if change.error_code else {}
        return sequence_key(None, change.from_status.value, change.to_status.value, change.reason, wf_detail)
    detail: dict[str, Any] = dict(change.detail)
    if change.outputs is not None:
        detail["outputs"] = dict(change.outputs)
    if change.error_code is not None:
        detail["error_code"] = change.error_code
    return sequence_key(change.step_id, change.from_status.value, change.to_status.value, change.reason, detail)


def _with_run_ids(state: WorkflowState, group: list[WorkflowTransition]) -> WorkflowState:
    """Give started steps the run ids the record names, so later outcomes find them."""
    steps = dict(state.steps)
    for t in group:
        if t.step_id is None or "job_run_id" not in t.detail:
            continue
        if t.to_status == StepStatus.RUNNING.value:
            steps[t.step_id] = replace(steps[t.step_id], job_run_id=t.detail["job_run_id"])
        elif t.to_status == StepStatus.COMPENSATING.value:
            steps[t.step_id] = replace(steps[t.step_id], compensation_run_id=t.detail["job_run_id"])
    return replace(state, steps=steps)


# What each change from outside the planner may record: the SLA monitor's escalation and an
# unreadable definition escalate an open workflow; the halt that follows cancels open steps.
_EXTERNAL_WORKFLOW = {"sla_escalation": RunStatus.ESCALATED, "definition_unreadable": RunStatus.ESCALATED}
_HALTED_FROM = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.STOPPING, StepStatus.COMPENSATING})


def _apply_external(state: WorkflowState, group: list[WorkflowTransition]) -> WorkflowState | str:
    """The state after a group of changes made outside the planner, each held to what such a
    change may do from the state the sequence reached (the difference, named, otherwise): they
    are facts the planner did not decide, not changes replay may take on trust."""
    steps = dict(state.steps)
    status = state.status
    for t in group:
        where = f"seq {t.seq} ({t.step_id or 'workflow'})"
        if t.step_id is None:
            allowed = _EXTERNAL_WORKFLOW.get(t.reason)
            if allowed is None or status.is_terminal or t.from_status != status.value or t.to_status != allowed.value:
                return (
                    f"{where}: {t.reason}: recorded {t.from_status} -> {t.to_status}; from {status.value} it may only"
                    f" escalate an open workflow"
                )
            status = allowed
            continue
        step = steps.get(t.step_id)
        if (
            t.reason != "workflow_halted"
            or step is None
            or step.status not in _HALTED_FROM
            or t.from_status != step.status.value
            or t.to_status != StepStatus.CANCELLED.value
        ):
            now = "no such step" if step is None else step.status.value
            move = f"{t.from_status} -> {t.to_status}"
            return f"{where}: {t.reason}: recorded {move}; from {now} a halt only cancels an open step"
        steps[t.step_id] = replace(step, status=StepStatus.CANCELLED)
    return replace(state, status=status, steps=steps)


def _advance_of(t: WorkflowTransition) -> Any:
    """Which advance wrote a transition: its recorded number, or (the SLA monitor's escalation,
    which writes none) its instant."""
    advance = t.detail.get("advance") if isinstance(t.detail, Mapping) else None
    return ("advance", advance) if isinstance(advance, int) else ("at", t.at)


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
