"""Crash recovery with a real worker process killed by SIGKILL, and fencing of its late write.

The worker runs as ``python -m jobgate.cli.entry --config FILE worker`` (the deployed command)
on the test's own database; it is SIGKILLed mid-attempt, so it never settles, releases or
renews anything. A second worker must recover the run once the lease expires, and the dead
worker's lease token must no longer be able to change the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from runtime_support import (
    attempts,
    event_types,
    get_run,
    marker_lines,
    running_worker,
    transitions,
    wait_status,
    wait_until,
)

from helpers import config_document, count, define
from jobgate.config import JobgateConfig
from jobgate.core import transitions as moves
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.settle import settle_attempt
from jobgate.core.states import RunStatus
from jobgate.runtime.rescuer import RESCUER
from jobgate.service.engine import Engine
from jobgate.service.policies import retry_policy
from jobgate.service.submission import SubmitRequest

ENGINE_TESTS = Path(__file__).resolve().parent.parent / "service"
SRC = Path(__file__).resolve().parents[2] / "src"


def _write_config(tmp_path: Path, database_url: str, config: JobgateConfig) -> Path:
    """A jobgate.yaml (JSON is YAML) with the same policies and runners as ``make_config``."""
    doc = config_document(tmp_path, database=database_url)
    assert set(config.retry_policies) >= {"test_fixed_v1", "test_review_v1"}
    path = tmp_path / "jobgate.yaml"
    path.write_text(json.dumps(doc, indent=2))
    return path


def _start_worker_process(config_file: Path, marker: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBGATE_DATABASE_URL", "JOBGATE_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(ENGINE_TESTS), str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JOBGATE_TEST_MARKER"] = str(marker)
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobgate.cli.entry",
                "--config",
                str(config_file),
                "worker",
                "--lease-seconds",
                "2",
                "--concurrency",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


@pytest.mark.slow
def test_a_sigkilled_worker_process_is_recovered_after_its_lease_and_its_late_write_is_refused(
    engine: Engine, database_url: str, tmp_path: Path, marker: Path
) -> None:
    job = define(
        engine,
        handler="engine_handlers:slow_first_attempt",
        retry_policy="test_fixed_v1",
        params=[{"name": "seconds", "pattern": "[0-9.]+"}],
    )
    rid = engine.submit(SubmitRequest(job, params={"seconds": "30"})).run.job_run_id
    config_file = _write_config(tmp_path, database_url, engine.config)
    log = tmp_path / "worker-process.log"

    proc = _start_worker_process(config_file, marker, log)
    try:
        wait_until(
            lambda: any(line[:3] == ["start", rid, "1"] for line in marker_lines(marker)),
            timeout=25,
            what=f"the worker process to start attempt 1 (log: {log})",
        )
        stale = get_run(engine, rid)  # what the doomed worker holds: RUNNING, attempt 1, its token
        assert stale.status is RunStatus.RUNNING and stale.attempt == 1
        with engine.store.read() as tx:  # worker ids are opaque: its row names the process
            owner = {w.worker_id: w.pid for w in tx.workers_list()}.get(stale.lease_owner or "")
        assert owner == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    # Nobody has touched the run: it still looks RUNNING under the dead worker's lease.
    orphan = get_run(engine, rid)
    assert (orphan.status, orphan.lease_token, orphan.lease_owner) == (
        RunStatus.RUNNING,
        stale.lease_token,
        stale.lease_owner,
    )
    assert orphan.lease_expires_at is not None
    gate = Path(str(marker) + ".gate")
    with running_worker(
        engine, concurrency=1, lease=timedelta(seconds=2), rescue_interval=timedelta(milliseconds=100)
    ) as worker:
        # Attempt 2 blocks on the gate, so the fencing check below runs while it holds the run.
        wait_until(
            lambda: any(line[:3] == ["start", rid, "2"] for line in marker_lines(marker)),
            timeout=15,
            what="the second worker to start attempt 2",
        )
        current = get_run(engine, rid)
        assert current.status is RunStatus.RUNNING and current.attempt == 2
        assert current.lease_owner == worker.worker_id
        assert current.lease_token == stale.lease_token + 2  # +1 revoked by the rescue, +1 for the new claim

        steps = transitions(engine, rid)
        with engine.store.read() as tx:
            rescue = [t for t in tx.run_transitions(rid) if t.reason == "lease_expired"]
        assert steps[4:] == [
            ("RUNNING", "RETRY_WAIT", "lease_expired", 1),
            ("RETRY_WAIT", "DISPATCHED", "claimed", 1),
            ("DISPATCHED", "RUNNING", "started", 2),
        ]
        assert len(rescue) == 1 and rescue[0].actor == RESCUER and rescue[0].at > orphan.lease_expires_at
        first = attempts(engine, rid)[0]
        assert (first.attempt, first.worker_id, first.outcome, first.error_code) == (
            1,
            stale.lease_owner,
            "lease_expired",
            "LEASE_EXPIRED",
        )

        # The dead worker's late write: its settlement of attempt 1, fenced by its old token.
        late = settle_attempt(
            stale,
            Outcome(OutcomeKind.SUCCEEDED),
            retry_policy(engine.config, stale.retry_policy),
            now=engine.clock.now(),
            actor=stale.lease_owner or "",
            started_at=stale.started_at or engine.clock.now(),
            result={"late": True},
        )
        change = moves.settled(late, stale, now=engine.clock.now())
        outbox_before = count(engine, "outbox")
        with engine.store.write() as tx:
            assert tx.runs_apply([change]) == []
            assert not tx.run_progress(rid, stale.lease_token, 0.5, "late")
        after = get_run(engine, rid)
        assert replace(after, lease_expires_at=None) == replace(current, lease_expires_at=None)
        assert transitions(engine, rid) == steps
        assert attempts(engine, rid)[0] == first and len(attempts(engine, rid)) == 2
        assert count(engine, "outbox") == outbox_before

        gate.touch()
        done = wait_status(engine, rid, RunStatus.COMPLETED)

    assert done.attempt == 2 and done.result == {"attempt": 2}
    assert transitions(engine, rid)[-1] == ("RUNNING", "COMPLETED", "succeeded", 2)
    assert [(a.attempt, a.outcome) for a in attempts(engine, rid)] == [(1, "lease_expired"), (2, "succeeded")]
    lines = marker_lines(marker)
    assert [line[:3] for line in lines] == [["start", rid, "1"], ["start", rid, "2"], ["done", rid, "2"]]
    assert lines[0][3] == str(proc.pid) and lines[1][3] == str(os.getpid())
    assert event_types(engine, rid) == ["job_started", "job_failed", "job_retried", "job_started", "job_completed"]
    assert worker.stale_writes_refused == 0
