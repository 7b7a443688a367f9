"""``jobgate demo``: the main job, end to end, on the embedded SQLite default.

Initialises a folder (configuration, seed definitions, database), submits one manual run per
demo definition, runs a worker until every run is terminal, then shows what happened: each
run's status and attempts, the dead letters, and the event log the outbox delivered.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import yaml
from rich.progress import Progress

from jobgate.cli import render
from jobgate.cli.context import AppContext
from jobgate.config import CONFIG_FILENAME
from jobgate.core.errors import ValidationError
from jobgate.core.models import JobRun
from jobgate.evidence import keys as evidence_keys
from jobgate.runtime.process import WorkerProcess, worker_settings
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.views.schemas import RunOut


@click.command()
@click.option(
    "--dir",
    "directory",
    default="jobgate-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="folder to create (or reuse)",
)
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for the runs to finish")
@click.pass_context
def demo(ctx: click.Context, directory: Path, timeout: float) -> None:
    """Initialise a demo folder, submit the demo runs, execute them, and show the record."""
    app: AppContext = ctx.obj
    app.may_create = True
    if not (directory / CONFIG_FILENAME).exists():
        from jobgate.cli.main import init

        ctx.invoke(init, directory=directory, force=False)
    else:
        from jobgate.cli import shipped
        from jobgate.cli.main import SHIPPED, _actor, _apply

        shipped.refuse_four_eyes_folder(
            directory / CONFIG_FILENAME, "the demo approves its definitions as one person; give it a folder of its own"
        )
        app.config_path = str(directory / CONFIG_FILENAME)
        # The demo's files as shipped (nothing else of the folder's), approved by whoever runs
        # the demo (as `init` does) unless an admin here decided otherwise.
        files, _ = shipped.unchanged_definitions(directory)
        _apply(app, files, approve_as=_actor(None), applied_by=SHIPPED, spare_decisions=True)
    app.config_path = str(directory / CONFIG_FILENAME)
    engine = app.engine()
    evidence_keys.ensure(engine.config)
    plan = yaml.safe_load((directory / "demo-runs.yaml").read_text(encoding="utf-8"))["runs"]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    requests = [
        SubmitRequest(
            item["job"],
            params={k: str(v) for k, v in (item.get("params") or {}).items()},
            requested_by="demo",
            reason="jobgate demo",
            request_id=f"demo-{stamp}-{i}",
        )
        for i, item in enumerate(plan)
    ]
    submitted = [r.run for r in engine.submit_many(requests, actor="demo")]
    settings = worker_settings(engine, concurrency=4)
    proc = WorkerProcess(engine, settings)
    proc.start()
    ids = [r.job_run_id for r in submitted]
    finished: list[JobRun] = []
    try:
        with Progress(transient=True, disable=app.json_output) as bar:
            task = bar.add_task("running the demo jobs", total=len(ids))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with engine.store.read() as tx:
                    finished = tx.runs_get(ids)
                    flowing = tx.workflows_active_exist()  # a workflow started by a demo run
                done = sum(1 for r in finished if r.status.is_terminal)
                bar.update(task, completed=done)
                if done == len(ids) and not flowing:
                    break
                time.sleep(0.1)
    finally:
        proc.stop()
        proc.join()
    # the last runs' seals, chained before it reports
    audit.seal_pending(engine, engine.clock.now(), patience=timedelta(seconds=30))
    by_id = {r.job_run_id: r for r in finished}
    ordered = [by_id[i] for i in ids if i in by_id]
    unfinished = [r for r in ordered if not r.status.is_terminal]
    if app.json_output:
        render.emit_json(
            {"directory": str(directory.resolve()), "runs": [RunOut.of(r).model_dump(mode="json") for r in ordered]}
        )
    else:
        _report(engine.config.events.jsonl_path, ordered, directory)
        _report_workflows(engine, ordered, directory)
    if unfinished:
        raise ValidationError(f"{len(unfinished)} demo runs did not finish within {timeout:.0f} s", field="--timeout")


def _report(events_path: Path | None, runs: list[JobRun], directory: Path) -> None:
    render.runs_table([RunOut.of(r) for r in runs], title="demo runs")
    counts: dict[str, int] = {}
    if events_path is not None and events_path.exists():
        import json

        for line in events_path.read_text(encoding="utf-8").splitlines():
            kind: Any = json.loads(line).get("event_type")
            counts[kind] = counts.get(kind, 0) + 1
        render.out.print(
            f"events delivered to {events_path}: "
            + ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in sorted(counts.items()))
        )
    first = runs[0].job_run_id if runs else "RUN_ID"
    render.out.print(f"inspect a run: cd {directory} && jobgate runs show {first}")


def _report_workflows(engine: Engine, runs: list[JobRun], directory: Path) -> None:
    """The workflow runs the demo's runs started, step by step."""
    from jobgate.service.workflows import workflow_view

    for run in runs:
        workflow_run_id = (run.result or {}).get("workflow_run_id")
        if not isinstance(workflow_run_id, str):
            continue
        view = workflow_view(engine, workflow_run_id)
        render.table(
            f"workflow {workflow_run_id} ({view.record.job_definition_id}): {view.record.status.value}",
            ["step", "status", "run"],
            [(s.step_id, s.status, s.job_run_id or "") for s in view.steps],
        )
        render.out.print(f"inspect it: cd {directory} && jobgate workflows show {workflow_run_id} --transitions")
