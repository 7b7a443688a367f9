"""The command line, run as a user runs it: a real process on a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}


def jobgate(cwd: Path, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "jobgate", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"jobgate {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    jobgate(tmp_path, "init", "demo")
    return tmp_path / "demo"


def test_init_applies_the_demo_definitions(folder: Path) -> None:
    out = json.loads(jobgate(folder, "--json", "definitions", "list").stdout)
    ids = {d["job_definition_id"] for d in out}
    assert "TGJOBDEF-REPLAY-SAMPLING-001" in ids and "demo-hello" in ids
    again = jobgate(folder.parent, "init", "demo", check=False)
    assert again.returncode == 1 and "exists" in again.stderr


def test_invalid_definition_is_refused_with_file_and_field_and_nothing_is_stored(folder: Path) -> None:
    bad = folder / "incoming"
    bad.mkdir()
    (bad / "a-good.yaml").write_text(
        "job_definition_id: fine\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
    )
    (bad / "b-bad.yaml").write_text(
        "job_definition_id: broken\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\npriority: urgent\n"
    )
    proc = jobgate(folder, "apply", str(bad), check=False)
    assert proc.returncode == 1
    assert "b-bad.yaml" in proc.stderr and "priority" in proc.stderr and "critical" in proc.stderr
    assert "Traceback" not in proc.stderr
    ids = {d["job_definition_id"] for d in json.loads(jobgate(folder, "--json", "definitions", "list").stdout)}
    assert "fine" not in ids and "broken" not in ids


def test_submit_run_and_inspect(folder: Path) -> None:
    first = jobgate(folder, "submit", "demo-hello", "--param", "name=ada", "--request-id", "r-1").stdout.strip()
    second = jobgate(folder, "submit", "demo-hello", "--param", "name=ada", "--request-id", "r-1")
    assert second.stdout.strip() == first and "already submitted" in second.stderr
    jobgate(folder, "worker", "--exit-when-idle", timeout=60)
    shown = json.loads(jobgate(folder, "--json", "runs", "show", first).stdout)
    assert shown["run"]["status"] == "COMPLETED"
    assert [t["to_status"] for t in shown["transitions"]] == [
        "CREATED",
        "SCHEDULED",
        "DISPATCHED",
        "RUNNING",
        "COMPLETED",
    ]
    listed = json.loads(jobgate(folder, "--json", "runs", "list").stdout)
    assert [r["job_run_id"] for r in listed] == [first]
    events = [json.loads(line) for line in (folder / "data" / "events.jsonl").read_text().splitlines()]
    assert [e["event_type"].rsplit(".", 1)[1] for e in events if e["job_run_id"] == first] == [
        "job_started",
        "job_completed",
    ]


def test_runs_log_prints_a_log_longer_than_one_read(folder: Path) -> None:
    """Found by a review: ``runs log`` (no --follow) printed the first 1 MiB of a log that may
    hold 10 MiB, with no note: it prints the whole log, a read at a time."""
    run_id = jobgate(folder, "submit", "demo-hello", "--param", "name=ada").stdout.strip()
    jobgate(folder, "worker", "--exit-when-idle", timeout=60)
    log = folder / "data" / "runs" / run_id / "run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(("x" * 99 + "\n") * 15_000 + "the last line\n")  # 1.5 MB
    printed = jobgate(folder, "runs", "log", run_id).stdout
    assert printed == log.read_text() and printed.endswith("the last line\n")


def test_bad_param_is_refused_and_nothing_stored(folder: Path) -> None:
    proc = jobgate(folder, "submit", "demo-hello", "--param", "name=$(id)", check=False)
    assert proc.returncode == 1 and "params.name" in proc.stderr
    assert json.loads(jobgate(folder, "--json", "runs", "list").stdout) == []


def test_cancel_and_wrong_state_errors(folder: Path) -> None:
    run = jobgate(folder, "submit", "demo-hello").stdout.strip()
    stop = jobgate(folder, "runs", "stop", run, check=False)
    assert stop.returncode == 1 and "only a running run can be stopped" in stop.stderr
    assert jobgate(folder, "runs", "cancel", run, "--reason", "not needed").stdout.strip() == f"{run} CANCELLED"
    again = jobgate(folder, "runs", "cancel", run, check=False)
    assert again.returncode == 1 and "conflict" in again.stderr
    retry = json.loads(jobgate(folder, "--json", "runs", "retry", run).stdout)
    assert retry["created"] is True and retry["retry_of"] == run
    assert json.loads(jobgate(folder, "--json", "runs", "retry", run).stdout)["job_run_id"] == retry["job_run_id"]


def test_dead_letter_and_requeue(folder: Path) -> None:
    (folder / "definitions" / "always-fails.yaml").write_text(
        "job_definition_id: always-fails\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:flaky\n"
        "params: [{name: succeed_on_attempt, pattern: '[1-9]', default: '9'}]\n"
    )
    jobgate(folder, "apply", "definitions", "--approve")
    run = jobgate(folder, "submit", "always-fails").stdout.strip()
    jobgate(folder, "worker", "--exit-when-idle", timeout=60)
    letters = json.loads(jobgate(folder, "--json", "dlq", "list").stdout)
    assert [d["job_run_id"] for d in letters] == [run]
    assert letters[0]["reason"] == "maximum_retries_exceeded"
    assert jobgate(folder, "dlq", "requeue", run).stdout.strip() == f"{run} SCHEDULED"
    assert json.loads(jobgate(folder, "--json", "dlq", "list").stdout) == []
    for wide in ((), ("--wide",)):  # with --all, a column tells the open from the resolved
        listed = jobgate(folder, "dlq", "list", "--all", *wide, "--tenant", "default").stdout
        assert "resolved" in listed and "requeued by" in listed, listed
    assert "resolved" not in jobgate(folder, "dlq", "list").stdout


def test_unknown_run_is_a_clear_error(folder: Path) -> None:
    proc = jobgate(folder, "runs", "show", "TGJOBRUN-nope", check=False)
    assert proc.returncode == 1 and "not_found" in proc.stderr and "Traceback" not in proc.stderr


def test_audit_proof_refuses_as_the_api_does(folder: Path) -> None:
    """Found by a review: ``audit proof 999`` said validation_error where the API says 404; one
    rule now (``anchors.proof_of``): no such entry, or not anchored yet, each not_found."""
    beyond = jobgate(folder, "audit", "proof", "999999", check=False)
    assert beyond.returncode == 1 and "not_found" in beyond.stderr and "no audit entry 999999" in beyond.stderr
    waiting = jobgate(folder, "audit", "proof", "1", check=False)
    assert waiting.returncode == 1 and "not_found" in waiting.stderr and "not anchored yet" in waiting.stderr


@pytest.mark.parametrize(
    ("option", "bounds"),
    [
        ("--from", ("0001-01-01T00:00:00+14:00", "2027-01-01T00:00:00Z")),
        ("--to", ("2026-01-01T00:00:00Z", "9999-12-31T23:59:59-14:00")),
    ],
)
def test_a_period_bound_with_no_instant_in_utc_is_refused(folder: Path, option: str, bounds: tuple[str, str]) -> None:
    out = folder / "period.zip"
    proc = jobgate(folder, "evidence", "export", "--from", bounds[0], "--to", bounds[1], "--out", str(out), check=False)
    assert proc.returncode == 1 and option in proc.stderr and "years 1 to 9999" in proc.stderr, proc.stderr
    assert not out.exists()


def test_apply_says_whether_each_version_may_run(folder: Path) -> None:
    """A blank "approved" read as "not approved" for a definition approved long before: the
    column now says what a newcomer needs to know of each version applied."""
    (folder / "definitions" / "later.yaml").write_text(
        "job_definition_id: later\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
    )
    states = {
        a["job_definition_id"]: a["approval"]
        for a in json.loads(jobgate(folder, "--json", "apply", "definitions").stdout)
    }
    assert states["later"] == "needs approval" and states["demo-hello"] == "approved"
    again = json.loads(jobgate(folder, "--json", "apply", "definitions/later.yaml", "--approve").stdout)
    assert [a["approval"] for a in again] == ["approved now"]
    assert "needs approval" not in jobgate(folder, "apply", "definitions").stdout
