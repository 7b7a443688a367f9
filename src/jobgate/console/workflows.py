"""The console's workflows: the runs of workflows, and one run's step graph drawn as SVG with
each step's state, refreshed while the workflow runs.

The graph comes from the definition version the workflow run is bound to (not today's), laid
out by ``console.graph``; the states from the API handler the page mirrors.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from jobgate.api.access import READ, allow, console
from jobgate.api.routes import workflows as workflow_routes
from jobgate.console.graph import BOX_HEIGHT, BOX_WIDTH, layout
from jobgate.console.pages import caller_of, render, state_of
from jobgate.core.errors import ValidationError
from jobgate.core.states import RunStatus
from jobgate.views.schemas import WorkflowRunOut
from jobgate.workflows.spec import workflow_spec_of

router = APIRouter(include_in_schema=False)
_OPEN = {s.value for s in RunStatus if not s.is_terminal}


@router.get("/workflows", response_class=HTMLResponse)
@allow(READ)
@console
def workflows_page(request: Request) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    items = workflow_routes.list_workflows(caller, state, limit=100).items
    return render(request, "workflows.html", workflows=items)


def _bound_steps(request: Request, job: str, version: int) -> list[tuple[str, list[str]]]:
    caller, state = caller_of(request), state_of(request)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        versions = tx.definition_versions(caller.tenant_id, job)
    content: dict[str, Any] = next((dict(v.content) for v in versions if v.version == version), {})
    if "workflow" not in content:
        return []
    # The parsed spec, not the raw steps: a step without depends_on waits for the one before it.
    try:
        return [(s.step_id, list(s.depends_on)) for s in workflow_spec_of(content, job).steps]
    except ValidationError:  # stored by an earlier version that read it more loosely
        return []  # the page draws the recorded steps instead


@router.get("/workflows/{workflow_run_id}", response_class=HTMLResponse)
@allow(READ)
@console
def workflow_page(request: Request, workflow_run_id: str) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    view = workflow_routes.visible_workflow(state, caller, workflow_run_id)
    run = WorkflowRunOut.of(view)
    statuses = {s.step_id: s.status for s in run.steps}
    # A step RUNNING whose run has not started (HELD by a gate, or queued) says so: its own
    # status alone read as if it ran (found by a review).
    waiting = {
        s.step_id: found
        for s in view.steps
        if s.status == "RUNNING" and (found := view.run_statuses.get(s.job_run_id or "")) not in (None, "RUNNING")
    }
    graph_steps = _bound_steps(request, run.job_definition_id, run.definition_version)
    if not graph_steps:  # a definition gone from view: the recorded steps, in order, unlinked
        graph_steps = [(s.step_id, []) for s in run.steps]
    drawn = layout(graph_steps)
    return render(
        request,
        "workflow.html",
        run=run,
        drawn=drawn,
        statuses=statuses,
        waiting=waiting,
        box_width=BOX_WIDTH,
        box_height=BOX_HEIGHT,
        live=run.status in _OPEN,
    )
