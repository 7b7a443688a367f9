"""``jobgate metrics`` and the demo's AII telemetry job, run as a user runs them: real
processes on the demo folder, against SQLite and PostgreSQL (``--db``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

Run = Callable[..., str]
ENV = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}


@pytest.fixture
def jobgate(tmp_path: Path, database_url: str) -> Run:
    subprocess.run(
        [sys.executable, "-m", "jobgate", "--db", database_url, "init", "demo"],
        cwd=tmp_path,
        env=ENV,
        check=True,
        capture_output=True,
        timeout=120,
    )

    def run(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "jobgate", "--db", database_url, *args],
            cwd=tmp_path / "demo",
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"jobgate {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    return run


def test_metrics_dumps_the_seed_set_of_the_database(jobgate: Run) -> None:
    run = jobgate
    for name in ("ada", "grace"):
        run("submit", "demo-hello", "--param", f"name={name}")
    run("worker", "--exit-when-idle")
    text = run("metrics")
    assert "# TYPE tg_scheduler_job_created_total counter" in text
    assert 'tg_scheduler_job_completed_total{job_class="MAINTENANCE_JOB",tenant="default"} 2.0' in text
    assert 'tg_scheduler_job_started_total{job_class="MAINTENANCE_JOB",tenant="default"} 2.0' in text
    assert 'tg_scheduler_queue_depth{job_class="MAINTENANCE_JOB",queue="default",tenant="default"} 0.0' in text
    samples = json.loads(run("--json", "metrics", "--tenant", "default"))
    created = [s for s in samples if s["name"] == "tg_scheduler_job_created_total"]
    assert created == [
        {"name": "tg_scheduler_job_created_total", "labels": {"job_class": "MAINTENANCE_JOB", "tenant": "default"},
         "value": 2.0}
    ]  # fmt: skip
    assert "tenant=" not in "".join(line for line in run("metrics", "--tenant", "nobody").splitlines() if "{" in line)


def test_the_demo_telemetry_job_publishes_a_closed_day_once(jobgate: Run, tmp_path: Path) -> None:
    run = jobgate
    for _ in range(2):
        run("submit", "TGJOBDEF-AII-TELEMETRY-001", "--request-id", os.urandom(4).hex())
        run("worker", "--exit-when-idle")
    sink = tmp_path / "demo" / "data" / "telemetry" / "aii.jsonl"
    [line] = [json.loads(x) for x in sink.read_text().splitlines()]
    assert line["tenant_id"] == "default" and len(line["period"]) == len("2026-11-29")
    assert set(line) >= {"jobs_scheduled", "job_success_rate", "replay_backlog", "dal_batch_success_rate"}
    runs = json.loads(run("--json", "runs", "list", "--class", "AII_TELEMETRY_JOB"))
    assert [r["status"] for r in runs] == ["COMPLETED", "COMPLETED"]
