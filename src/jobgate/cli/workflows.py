"""``jobgate workflows``: start a workflow run, watch it, list them, cancel one (locally)."""

from __future__ import annotations

import time
from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import PERSON, os_user, parse_params, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import NotReadyError
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.service import workflows as workflow_service
from jobgate.service.workflows import StartWorkflow, WorkflowView
from jobgate.workflows.plan import WORKFLOW_ACTIVE, WORKFLOW_STATUSES


def _summary(view: WorkflowView) -> dict[str, Any]:
    """The seed §44 status, plus the definition and times."""
    r = view.record
    return {
        "workflow_run_id": r.workflow_run_id,
        "status": r.status.value,
        "current_step": view.current_step,
        "completed_steps": view.completed_steps,
        "remaining_steps": view.remaining_steps,
        "job_definition_id": r.job_definition_id,
        "definition_digest": r.definition_digest,
        "created_at": isoformat_utc(r.created_at),
        "ended_at": None if r.ended_at is None else isoformat_utc(r.ended_at),
        "error_code": r.error_code,
        "error_message": r.error_message,
        "steps": [
            {
                "step_id": s.step_id,
                "status": s.status,
                "job_run_id": s.job_run_id,
                # the step's run as it stands: a RUNNING step whose run is HELD or queued says so
                "run_status": view.run_statuses.get(s.job_run_id or ""),
                "compensation_run_id": s.compensation_run_id,
                "outputs": s.outputs,
            }
            for s in view.steps
        ],
    }


def _print(view: WorkflowView, *, transitions: bool) -> None:
    r = view.record
    render.table(
        f"{r.workflow_run_id} · {r.job_definition_id} · {r.status.value}",
        ["step", "status", "run", "run status", "compensation run", "outputs"],
        [
            (
                s.step_id,
                s.status,
                s.job_run_id,
                view.run_statuses.get(s.job_run_id or "", ""),
                s.compensation_run_id,
                s.outputs or "",
            )
            for s in view.steps
        ],
    )
    if r.error_code:
        print(f"error: {r.error_code}: {r.error_message}")
    if transitions:
        render.table(
            "transitions",
            ["seq", "at", "step", "from", "to", "reason"],
            [
                (t.seq, render.when(t.at), t.step_id or "(workflow)", t.from_status or "", t.to_status, t.reason)
                for t in view.transitions
            ],
        )


@click.group("workflows")
def workflows_group() -> None:
    """Workflow runs: start, list, show (seed §44 status), cancel."""


@workflows_group.command("start")
@click.argument("workflow")
@click.option(
    "--param", "-p", "params", multiple=True, metavar="KEY=VALUE", help="a parameter of the workflow (repeatable)"
)
@click.option("--key", "client_key", help="idempotency: the same key always finds the same workflow run")
@click.option("--reason", help="why (recorded with the start and in the audit log)")
@click.option("--by", "actor", type=PERSON, help="who starts it (default: you)")
@tenant_option()
@click.option("--wait", is_flag=True, help="wait until the workflow ends (a worker must be running)")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1, 86_400), help="seconds")
@pass_app
def start(
    app: AppContext,
    workflow: str,
    params: tuple[str, ...],
    client_key: str | None,
    reason: str | None,
    actor: str | None,
    tenant: str,
    wait: bool,
    timeout: float,
) -> None:
    """Start a workflow run of WORKFLOW; prints its id (or, with --wait, its final status)."""
    engine = app.engine()
    who = actor or os_user()
    record, created = workflow_service.start_workflow(
        engine,
        StartWorkflow(
            workflow,
            params=parse_params(params),
            scope=Scope(tenant_id=tenant),
            requested_by=who,
            reason=reason,
            client_key=client_key,
        ),
        actor=who,
    )
    if not created and not app.json_output:
        render.err.print("(already started: existing workflow run returned)")
    if not wait:
        render.emit_json(
            _summary(workflow_service.workflow_view(engine, record.workflow_run_id))
        ) if app.json_output else print(record.workflow_run_id)
        return
    view = _wait(engine, record.workflow_run_id, timeout)
    render.emit_json(_summary(view)) if app.json_output else _print(view, transitions=False)
    if view.record.status is not RunStatus.COMPLETED:
        raise SystemExit(1)


def _wait(engine: Any, workflow_run_id: str, timeout: float) -> WorkflowView:
    """Wait for the workflow to end. A step whose run a gate holds (a revoked approval, changed
    code, safe mode) waits for a person, not a worker: said at once, and named if time runs out."""
    deadline = time.monotonic() + timeout
    told: set[tuple[str, str]] = set()
    while True:
        view = workflow_service.workflow_view(engine, workflow_run_id)
        if view.record.status not in WORKFLOW_ACTIVE:
            return view
        held = _held_steps(engine, view)
        for step in held:
            if step not in told:
                told.add(step)
                click.echo(f"warning: step {step[0]} is held: {step[1]}", err=True)
        if time.monotonic() > deadline:
            why = "; ".join(f"step {name} held: {reason}" for name, reason in held) or "is a worker running?"
            raise NotReadyError(  # the workflow is not done yet: nothing asked was invalid
                f"still {view.record.status.value} after {timeout:g} s ({why})", field="timeout"
            )
        time.sleep(0.1)


def _held_steps(engine: Any, view: WorkflowView) -> list[tuple[str, str]]:
    """The steps whose run is HELD, each with what holds it."""
    held = {
        s.job_run_id: s.step_id
        for s in view.steps
        if s.job_run_id is not None and view.run_statuses.get(s.job_run_id) == RunStatus.HELD.value
    }
    if not held:
        return []
    with engine.store.read() as tx:
        runs = tx.runs_get(list(held))
    return [
        (held[r.job_run_id], f"run {r.job_run_id}, held by {r.hold_reason or 'a gate'} (see `jobgate runs show`)")
        for r in runs
    ]


@workflows_group.command("list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in WORKFLOW_STATUSES], case_sensitive=False),
    help="only workflow runs in this status",
)
@click.option("--workflow", "job_definition_id", help="only runs of this workflow definition")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(1, 10_000), help="at most this many workflow runs"
)
@tenant_option()
@pass_app
def list_workflows(app: AppContext, status: str | None, job_definition_id: str | None, limit: int, tenant: str) -> None:
    """List workflow runs, newest first."""
    engine = app.engine()
    with engine.store.read() as tx:
        found = tx.workflows_list(
            tenant, status=status.upper() if status else None, job_definition_id=job_definition_id, limit=limit
        )
    rows = [_summary(workflow_service.workflow_view(engine, r.workflow_run_id, tenant)) for r in found]
    render.records(
        app.json_output,
        "workflow runs",
        [{**row, "completed": len(row["completed_steps"]), "steps": len(row["steps"])} for row in rows],
        columns=["workflow_run_id", "job_definition_id", "status", "current_step", "completed", "steps", "created_at"],
    )


@workflows_group.command("show")
@click.argument("workflow_run_id")
@click.option("--transitions", is_flag=True, help="also every state change, in order")
@tenant_option(default=None, help="only if it belongs to this tenant")
@pass_app
def show(app: AppContext, workflow_run_id: str, transitions: bool, tenant: str | None) -> None:
    """Show a workflow run: its steps, their runs and outputs (--transitions: every state change)."""
    view = workflow_service.workflow_view(app.engine(), workflow_run_id, tenant)
    if app.json_output:
        out = _summary(view)
        if transitions:
            out["transitions"] = [
                {
                    "seq": t.seq,
                    "at": isoformat_utc(t.at),
                    "step_id": t.step_id,
                    "from": t.from_status,
                    "to": t.to_status,
                    "reason": t.reason,
                    "detail": t.detail,
                }
                for t in view.transitions
            ]
        render.emit_json(out)
    else:
        _print(view, transitions=transitions)


@workflows_group.command("cancel")
@click.argument("workflow_run_id")
@click.option("--by", "actor", type=PERSON, help="who cancels (default: you)")
@tenant_option(default=None, help="only if it belongs to this tenant")
@pass_app
def cancel(app: AppContext, workflow_run_id: str, actor: str | None, tenant: str | None) -> None:
    """Cancel pending steps and stop running ones."""
    record = workflow_service.cancel_workflow(app.engine(), workflow_run_id, actor=actor or os_user(), tenant_id=tenant)
    render.emit_json(
        {"workflow_run_id": record.workflow_run_id, "status": record.status.value}
    ) if app.json_output else print(f"{workflow_run_id} {record.status.value}")
