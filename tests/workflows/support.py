"""Workflow test helpers: step definitions, a workflow definition, a worker plus coordinator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtime_support import running_worker, wait_until

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.runtime.loops import LoopThread
from jobgate.service.engine import Engine
from jobgate.service.workflows import StartWorkflow, WorkflowView, start_workflow, workflow_view

H = "workflow_handlers"


def jobs(engine: Engine) -> dict[str, str]:
    """One approved definition per test handler: ``record``, ``fail``, ``undo``, ``undo_fails``, ``wait``."""
    suffix = uuid.uuid4().hex[:6]
    return {
        name: define(engine, job_definition_id=f"{name}-{suffix}", handler=f"{H}:{name}", params=_PARAMS)
        for name in ("record", "fail", "undo", "undo_fails", "wait")
    }


_PARAMS = [{"name": "name"}, {"name": "value"}]


def workflow(engine: Engine, steps: list[dict[str, Any]], *, approve: bool = True, **fields: Any) -> str:
    body: dict[str, Any] = {"steps": steps}
    if "on_failure" in fields:
        body["on_failure"] = fields.pop("on_failure")
    return define(
        engine,
        approve=approve,
        job_definition_id=f"wf-{uuid.uuid4().hex[:8]}",
        job_class=fields.pop("job_class", "AUDIT_INTEGRITY_JOB"),
        workflow=body,
        **{"handler": None, **fields},
    )


def start(engine: Engine, job_definition_id: str, **params: str) -> str:
    record, created = start_workflow(
        engine, StartWorkflow(job_definition_id, params=params, requested_by="tester"), actor="tester"
    )
    assert created
    return record.workflow_run_id


def view(engine: Engine, workflow_run_id: str) -> WorkflowView:
    return workflow_view(engine, workflow_run_id)


def wait_workflow(engine: Engine, workflow_run_id: str, *, timeout: float = 20.0) -> WorkflowView:
    wait_until(
        lambda: (
            view(engine, workflow_run_id).record.status
            not in (RunStatus.CREATED, RunStatus.SCHEDULED, RunStatus.RUNNING)
        ),
        timeout=timeout,
        what=f"workflow {workflow_run_id} to end",
    )
    return view(engine, workflow_run_id)


@contextmanager
def coordinating(engine: Engine, **worker: Any) -> Iterator[WorkflowCoordinator]:
    """A worker and a coordinator, both running, stopped at the end of the block."""
    coordinator = WorkflowCoordinator(engine, interval=0.02)
    thread = LoopThread(coordinator, engine.clock)
    with running_worker(engine, **worker):
        thread.start()
        try:
            yield coordinator
        finally:
            thread.stop()
            assert thread.join(10)


def lines(marker: Path) -> list[list[str]]:
    return [line.split() for line in marker.read_text().splitlines() if line.strip()]
