"""``jobgate contracts``: the demo's delivered events and definition files checked from the
command line, as a user would, and a violation named with its file, line and path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobgate.contracts import validate

ENV = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}


def jobgate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120
    )


def test_the_demo_s_delivered_events_conform_and_a_tampered_one_is_named(tmp_path: Path) -> None:
    demo = jobgate(tmp_path, "demo")
    assert demo.returncode == 0, demo.stderr
    events = tmp_path / "jobgate-demo" / "data" / "events.jsonl"
    checked = jobgate(tmp_path, "contracts", "check-events", str(events))
    assert checked.returncode == 0, checked.stderr
    lines = events.read_text(encoding="utf-8").splitlines()
    assert checked.stdout.strip() == f"ok: {len(lines)} events in {events} conform to their contracts"
    assert {json.loads(line)["event_type"] for line in lines} >= {
        "trustgate.scheduler.job_started",
        "trustgate.scheduler.job_failed",
        "trustgate.scheduler.job_retried",
        "trustgate.scheduler.job_completed",
    }

    third = json.loads(lines[2])
    third["job_class"] = "report"  # neither a built-in class nor a declarable name
    events.write_text("\n".join([*lines[:2], json.dumps(third), *lines[3:]]) + "\n", encoding="utf-8")
    refused = jobgate(tmp_path, "contracts", "check-events", str(events))
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: contract_violation: comp.TG.EVENT.")
    assert ": job_class:" in refused.stderr


def test_the_schedule_changes_dsail_reads_conform(tmp_path: Path) -> None:
    """What DSAIL learns of its recommendations (applied, refused) and of operators' changes."""
    folder = tmp_path / "demo"
    assert jobgate(tmp_path, "init", "demo").returncode == 0
    add = ["schedules", "add", "adapt", "TGJOBDEF-AUDIT-ANCHOR-001", "--every", "3600", "--adaptive"]
    assert jobgate(folder, *add, "--min-every", "600", "--max-every", "7200").returncode == 0
    assert jobgate(folder, "schedules", "recommend", "adapt", "--every", "1800", "--by", "dsail").returncode == 0
    assert jobgate(folder, "schedules", "recommend", "adapt", "--every", "60", "--by", "dsail").returncode == 1
    assert jobgate(folder, "schedules", "pause", "adapt").returncode == 0
    changes = jobgate(folder, "--json", "schedules", "changes", "adapt")
    assert changes.returncode == 0, changes.stderr
    entries = json.loads(changes.stdout)
    assert [(e["field"], e["accepted"]) for e in entries] == [
        ("created", True),
        ("every", True),
        ("every", False),
        ("paused", True),
    ]
    for entry in entries:
        validate("comp.DSAIL.INPUT.SCHEDULER-FEEDBACK.v1_0", entry)


def test_a_definition_file_is_validated_by_its_contract(tmp_path: Path) -> None:
    csi = "comp.TG.INPUT.JOB-DEFINITION.v1_0"
    good = Path(__file__).resolve().parents[2] / "src" / "jobgate" / "demo" / "definitions" / "replay-sampling.json"
    ok = jobgate(tmp_path, "contracts", "validate", csi, str(good))
    assert ok.returncode == 0 and ok.stdout.strip() == f"ok: {good} conforms to {csi}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("job_definition_id: x\njob_class: MAINTENANCE_JOB\nhandler: m:f\nrunner: py\npriority: urgent\n")
    refused = jobgate(tmp_path, "contracts", "validate", csi, str(bad))
    assert refused.returncode == 1
    assert f"{bad}: priority: must be one of: critical, high, normal, low, background" in refused.stderr
    assert "(document): must have only one of: target_engine_meid | handler | runner" in refused.stderr
    unknown = jobgate(tmp_path, "contracts", "validate", "comp.TG.OUTPUT.NOPE.v1_0", str(bad))
    assert unknown.returncode == 1 and "unknown contract" in unknown.stderr
