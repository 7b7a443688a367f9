"""Leader failover with real scheduler processes: the leader is SIGKILLed again and again while a
one-second schedule fires; afterwards every slot has exactly one run (counted, not assumed).

``JOBGATE_FAILOVER_SECONDS`` sets the length (default 120 one-second fires, as the issue asks).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from tests.cli.test_cli import ENV, jobgate

SECONDS = int(os.environ.get("JOBGATE_FAILOVER_SECONDS", "120"))
LEASE = "2"


def start_scheduler(folder: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobgate", "scheduler", "--lease-seconds", LEASE],
            cwd=folder,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def leader_pid(db: Path, log: Path) -> int | None:
    """The leading scheduler's process: its lock names its opaque owner id, and each scheduler's
    start-up line in the shared log names its owner with its pid."""
    with sqlite3.connect(db, timeout=30) as conn:
        row = conn.execute("SELECT owner, expires_at FROM locks WHERE name = 'scheduler-leader'").fetchone()
    if row is None or row[1] < time.time() * 1_000_000:
        return None
    started = re.search(rf"scheduler {re.escape(row[0])} \(pid (\d+)\)", log.read_text(errors="replace"))
    return None if started is None else int(started.group(1))


@pytest.mark.slow
def test_each_fire_makes_exactly_one_run_while_leaders_are_killed(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder, db, log = tmp_path / "demo", tmp_path / "demo" / "jobgate.db", tmp_path / "schedulers.log"
    jobgate(
        folder, "schedules", "add", "beat", "TGJOBDEF-AUDIT-ANCHOR-001", "--every", "1", "--misfire", "fire_all",
        "--grace-seconds", "60", "--max-catchup", "1000",
    )  # fmt: skip
    listed = json.loads(jobgate(folder, "--json", "schedules", "list").stdout)
    (created,) = [s["planned_through"] for s in listed if s["schedule_id"] == "beat"]  # (and the demo's own)
    procs = [start_scheduler(folder, log), start_scheduler(folder, log)]
    kills = 0
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            # real time: scheduler processes fail over on their 2 s leases while a 1 s schedule fires
            time.sleep(4)
            pid = leader_pid(db, log)
            for p in procs:
                if p.pid == pid and p.poll() is None:
                    p.send_signal(signal.SIGKILL)  # no chance to release the lease or finish a write
                    p.wait()
                    kills += 1
                    procs.remove(p)
                    procs.append(start_scheduler(folder, log))  # a replacement joins as standby
                    break
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
    jobgate(folder, "scheduler", "--once")  # decide every slot up to now
    with sqlite3.connect(db) as conn:
        beat = "requested_by = 'scheduler' AND trigger_id LIKE 'TGTRIG-beat@%'"
        triggers = [r[0] for r in conn.execute(f"SELECT trigger_id FROM job_runs WHERE {beat}")]
        through = conn.execute("SELECT watermark FROM schedules WHERE schedule_id = 'beat'").fetchone()[0]
        misses = conn.execute("SELECT count(*) FROM schedule_misses WHERE schedule_id = 'beat'").fetchone()[0]
    start = datetime.fromisoformat(created.replace("Z", "+00:00"))
    end = datetime.fromisoformat("1970-01-01T00:00:00+00:00") + timedelta(microseconds=through)
    # The interval counts from the moment the schedule was added; slots are whole seconds after it.
    expected = []
    k = 1
    while start + timedelta(seconds=k) <= end:
        at = start + timedelta(seconds=k)
        expected.append("TGTRIG-beat@" + at.isoformat().replace("+00:00", "Z"))
        k += 1
    assert kills >= SECONDS // 8, f"only {kills} leaders were killed"
    assert len(triggers) == len(set(triggers)), "a fire made two runs"
    assert sorted(triggers) == sorted(expected), "a slot has no run, or a run belongs to no slot"
    assert misses == 0
    assert len(expected) >= SECONDS - 5
