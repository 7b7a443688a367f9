"""``jobgate demo`` runs a workflow too; the workflow commands, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}


def jobgate(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "jobgate", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"jobgate {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_the_demo_runs_its_workflow_and_the_workflow_commands_show_and_replay_it(tmp_path: Path) -> None:
    out = jobgate(tmp_path, "demo").stdout
    assert "(demo-release): COMPLETED" in out
    folder = tmp_path / "jobgate-demo"
    listed = json.loads(jobgate(folder, "--json", "workflows", "list").stdout)
    assert [(w["job_definition_id"], w["status"]) for w in listed] == [("demo-release", "COMPLETED")]
    wid = listed[0]["workflow_run_id"]
    shown = json.loads(jobgate(folder, "--json", "workflows", "show", wid, "--transitions").stdout)
    assert shown["completed_steps"][0] == "greet" and sorted(shown["completed_steps"][1:]) == ["payroll", "report"]
    assert shown["steps"][0]["outputs"] == {"greeting": "Hello, auditors!"}
    assert {s["run_status"] for s in shown["steps"]} == {"COMPLETED"}  # each step's run as it stands
    assert shown["transitions"][-1]["to"] == "COMPLETED"
    table = jobgate(folder, "workflows", "show", wid).stdout  # a step's own run in "run"
    assert "compensation run" in table and shown["steps"][0]["job_run_id"] in table
    assert "MATCH" in jobgate(folder, "replay", wid).stdout
    # a run's replay says what it checks: a MATCH read alone passed a run whose stored actor was
    # edited (found by a review), which the records check names
    step = jobgate(folder, "replay", shown["steps"][0]["job_run_id"]).stdout
    assert "(audit replay): MATCH" in step and "`jobgate audit verify --records` checks its stored record" in step
    refused = jobgate(folder, "workflows", "cancel", wid, check=False)
    assert refused.returncode == 1 and "only an active one" in refused.stderr


def test_start_and_wait_then_the_same_key_finds_the_same_workflow_run(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobgate", "worker"],
        cwd=folder,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = jobgate(
            folder,
            "--json",
            "workflows",
            "start",
            "demo-release",
            "-p",
            "who=ops",
            "--key",
            "k1",
            "--wait",
            "--timeout",
            "60",
        )
        done = json.loads(first.stdout)
        assert done["status"] == "COMPLETED" and done["remaining_steps"] == []
        again = jobgate(folder, "workflows", "start", "demo-release", "-p", "who=ops", "--key", "k1")
        assert again.stdout.strip() == done["workflow_run_id"] and "already started" in again.stderr
    finally:
        worker.terminate()
        worker.wait(30)
    bad = jobgate(folder, "workflows", "start", "demo-release", "-p", "who=$(id)", check=False)
    assert bad.returncode != 0 and "params.who" in bad.stderr
    assert (
        json.loads(jobgate(folder, "--json", "workflows", "list").stdout)[0]["workflow_run_id"]
        == done["workflow_run_id"]
    )
