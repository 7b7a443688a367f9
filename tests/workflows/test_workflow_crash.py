"""A worker process SIGKILLed in the middle of a workflow: the workflow resumes in the next
process, the killed step is retried under its own policy, and no step completes twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_support import wait_until
from support import jobs, lines, start, view, wait_workflow, workflow

from helpers import config_document, count, define
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _worker(config_file: Path, marker: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBGATE_DATABASE_URL", "JOBGATE_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JOBGATE_TEST_MARKER"] = str(marker)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobgate.cli.entry", "--config", str(config_file), "worker", "--lease-seconds", "2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


@pytest.mark.slow
def test_a_worker_killed_mid_workflow_resumes_without_running_a_step_twice_to_completion(
    engine: Engine, database_url: str, marker: Path, tmp_path: Path
) -> None:
    j = jobs(engine)
    slow = define(engine, handler="workflow_handlers:slow_first_attempt", params=[{"name": "name"}])
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": slow, "params": {"name": "b"}, "retry_policy": "test_fixed_v1"},
            {"id": "c", "job": j["record"], "params": {"name": "c"}},
        ],
    )
    wid = start(engine, wf)
    config_file = tmp_path / "jobgate.yaml"
    config_file.write_text(json.dumps(config_document(tmp_path, database=database_url)))
    log = tmp_path / "worker.log"
    first = _worker(config_file, marker, log)
    try:
        wait_until(lambda: ["started", "b"] in [p[:2] for p in lines(marker)], timeout=30, what="step b to start")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert view(engine, wid).record.status is RunStatus.RUNNING
    second = _worker(config_file, marker, log)
    try:
        done = wait_workflow(engine, wid, timeout=60)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    assert done.record.status is RunStatus.COMPLETED, log.read_text()[-3000:]
    ran = [p[1] for p in lines(marker) if p[0] == "ran"]
    assert ran == ["a", "b", "c"]  # b's first attempt died with its process; it completed once
    b_run = next(s.job_run_id for s in done.steps if s.step_id == "b")
    with engine.store.read() as tx:
        run = tx.run_get(str(b_run))
    assert run is not None and run.attempt == 2 and run.status is RunStatus.COMPLETED
    completed = [t.step_id for t in done.transitions if t.to_status == "COMPLETED" and t.step_id]
    assert completed == ["a", "b", "c"]
    assert count(engine, "job_runs", f"workflow_run_id = '{wid}'") == 3
