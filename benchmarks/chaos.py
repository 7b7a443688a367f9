"""Chaos: nothing lost, nothing doubled, while workers die and the database restarts.

    python benchmarks/chaos.py            # the long mode: 10,000 jobs (a few minutes)
    python benchmarks/chaos.py --short    # CI: 1,500 jobs, the same faults, under a minute

On the local PostgreSQL (a fresh schema in the ``jobgate_chaos`` database, dropped at the end):
N runs whose job sleeps a little and then inserts one row (run id, attempt, worker pid) into
``chaos_effects``, a table with no unique constraint, through the exactly-once completion
(``ctx.on_complete``). Three ``jobgate worker`` processes run them; faults while they do:
  - every 1-3 s one worker is SIGKILLed and a new one started in its place;
  - once, at 30 % done, the PostgreSQL server is restarted (``pg_ctlcluster … restart``);
  - once, at 60 % done, every session of the database is killed (``pg_terminate_backend``).
Faults stop at 80 % done; then every run must end. Afterwards it checks: every run terminal,
none lost, exactly one effect row per completed run, no effect row from an attempt other than
the one whose completion was accepted (a stale completion), attempts never above their
maximum, and the last run ended within lease + 30 s of the last fault.

Ends with one line: RESULT runs=N terminal=N lost=N duplicate_effects=N
stale_completions_accepted=N max_attempts_exceeded=N seconds_after_last_fault=X …
and exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import child_pythonpath, machine  # noqa: E402

from jobgate.config import load_config  # noqa: E402
from jobgate.definitions import load_definitions  # noqa: E402
from jobgate.service import approvals  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.service.submission import SubmitRequest  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402
from jobgate.testing import connection  # noqa: E402

ADMIN_URL = os.environ.get("JOBGATE_CHAOS_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = "jobgate_chaos"
TERMINAL = ("COMPLETED", "FAILED", "DEAD_LETTERED", "CANCELLED", "ESCALATED")
DEFINITION = """
job_definition_id: chaos-effect
job_code: CHAOS-EFFECT
job_class: MAINTENANCE_JOB
canonical_name: Chaos benchmark body (one effect row, exactly once)
trigger_type: manual
handler: chaos_body:effect
retry_policy: chaos_retry_v1
params:
  - {name: i, required: true, pattern: '[0-9]{1,9}'}
  - {name: ms, pattern: '[0-9]{1,5}', default: "50"}
"""


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


class Chaos:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.schema = f"chaos_{uuid.uuid4().hex[:10]}"
        admin = create_engine(
            ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": DATABASE}).first():
                conn.execute(text(f"CREATE DATABASE {DATABASE}"))
        admin.dispose()
        base = ADMIN_URL.rsplit("/", 1)[0] + f"/{DATABASE}"
        self.db_url = f"{base}?options=-csearch_path%3D{self.schema}"
        self.raw = create_engine(base.replace("postgresql://", "postgresql+psycopg://", 1), pool_pre_ping=True)
        with self.raw.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{self.schema}"'))
        (root / "definitions").mkdir(parents=True)
        body = "naive_effect" if args.naive else "effect"
        (root / "definitions" / "chaos.yaml").write_text(DEFINITION.replace("chaos_body:effect", f"chaos_body:{body}"))
        (root / "jobgate.yaml").write_text(
            json.dumps(
                {
                    "database": self.db_url,
                    "data_dir": str(root / "data"),
                    "definitions": ["definitions"],
                    "events": {"jsonl_path": None, "log": False},
                    "worker": {"lease_seconds": args.lease_seconds, "maximum_run_age_seconds": 86400},
                    "retry_policies": [
                        {
                            "retry_policy_id": "chaos_retry_v1",
                            "strategy": "fixed_delay",
                            "max_attempts": 25,
                            "initial_delay_seconds": 0,
                            "max_delay_seconds": 0,
                        }
                    ],
                }
            )
        )
        self.config_path = root / "jobgate.yaml"
        config = load_config(self.config_path)
        self.engine = Engine(Store(config.database), config)
        for applied in self.engine.apply_definitions(load_definitions([root / "definitions"], config)):
            approvals.approve(self.engine, "default", applied.job_definition_id, actor="bench")  # an admin's blessing
        with self.engine.store.write() as tx:
            connection(tx).exec_driver_sql(
                "CREATE TABLE chaos_effects (job_run_id VARCHAR(64) NOT NULL, attempt INTEGER NOT NULL, "
                "worker_pid INTEGER NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
            )
        self.workers: list[subprocess.Popen[bytes]] = []
        self.worker_log = open(root / "workers.log", "ab")  # noqa: SIM115
        self.faults: list[tuple[float, str]] = []

    # workers ---------------------------------------------------------------
    def start_worker(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=child_pythonpath(HERE), JOBGATE_CHAOS_DB=self.db_url)
        cmd = [sys.executable, "-m", "jobgate.cli.entry", "--config", str(self.config_path), "worker"]
        cmd += ["--concurrency", str(self.args.concurrency), "--poll-ms", "200"]
        return subprocess.Popen(cmd, env=env, stdout=self.worker_log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill_one(self) -> None:
        victim = random.randrange(len(self.workers))
        proc = self.workers[victim]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.workers[victim] = self.start_worker()
        self.fault(f"SIGKILLed worker pid {proc.pid}, started pid {self.workers[victim].pid}")

    def fault(self, what: str) -> None:
        self.faults.append((time.monotonic(), what))
        log(what)

    def restart_server(self) -> None:
        if self.args.no_server_restart:
            return
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.fault(f"restarted the PostgreSQL {version} server")

    def kill_sessions(self) -> None:
        for _ in range(30):  # the server may still be starting after the restart
            try:
                with self.raw.begin() as conn:
                    n = conn.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE datname = :d AND pid <> pg_backend_pid()"
                        ),
                        {"d": DATABASE},
                    ).scalar_one()
                self.fault(f"killed all {n} sessions of the database")
                return
            except Exception:
                time.sleep(1)
        raise SystemExit("could not reach PostgreSQL to kill its sessions")

    # progress --------------------------------------------------------------
    def done_count(self) -> int:
        for _ in range(60):
            try:
                with self.raw.begin() as conn:
                    conn.execute(text(f'SET LOCAL search_path = "{self.schema}"'))
                    q = text("SELECT count(*) FROM job_runs WHERE status = ANY(:t)")
                    return int(conn.execute(q, {"t": list(TERMINAL)}).scalar_one())
            except Exception:
                time.sleep(1)  # the server is restarting
        raise SystemExit("PostgreSQL did not come back within a minute")

    # the run ---------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        n = self.args.jobs
        requests = [
            SubmitRequest("chaos-effect", params={"i": str(i), "ms": str(self.args.body_ms)}, request_id=f"c{i}")
            for i in range(n)
        ]
        for start in range(0, n, 1000):
            self.engine.submit_many(requests[start : start + 1000], actor="chaos")
        log(f"submitted {n} runs; starting {self.args.workers} workers")
        self.workers = [self.start_worker() for _ in range(self.args.workers)]
        t0 = time.monotonic()
        deadline = t0 + self.args.timeout
        restarted = sessions_killed = False
        next_kill = t0 + random.uniform(1, 3)
        last_done_at, done = t0, 0
        next_report = t0 + 10
        try:
            while done < n and time.monotonic() < deadline:
                time.sleep(0.2)
                done = self.done_count()
                if time.monotonic() >= next_report:
                    log(f"{done}/{n} runs ended ({100 * done / n:.0f} %), {len(self.faults)} faults so far")
                    next_report = time.monotonic() + 10
                if done >= n:
                    last_done_at = time.monotonic()
                    break
                frac = done / n
                if frac < 0.8:
                    if not restarted and frac >= 0.3:
                        restarted = True
                        self.restart_server()
                    elif not sessions_killed and frac >= 0.6:
                        sessions_killed = True
                        self.kill_sessions()
                    elif time.monotonic() >= next_kill:
                        self.kill_one()
                        next_kill = time.monotonic() + random.uniform(1, 3)
        finally:
            for proc in self.workers:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in self.workers:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        elapsed = time.monotonic() - t0
        last_fault = self.faults[-1][0] if self.faults else t0
        return self.verify(n, elapsed, last_done_at - last_fault if done >= n else float("inf"))

    def verify(self, n: int, elapsed: float, after_fault: float) -> dict[str, Any]:
        with self.raw.begin() as conn:
            conn.execute(text(f'SET LOCAL search_path = "{self.schema}"'))

            def one(sql: str, **params: Any) -> int:
                return int(conn.execute(text(sql), params).scalar_one())

            runs = one("SELECT count(*) FROM job_runs")
            terminal = one("SELECT count(*) FROM job_runs WHERE status = ANY(:t)", t=list(TERMINAL))
            completed = one("SELECT count(*) FROM job_runs WHERE status = 'COMPLETED'")
            by_status = conn.execute(text("SELECT status, count(*) FROM job_runs GROUP BY status")).all()
            statuses: dict[str, int] = {str(s): int(n) for s, n in by_status}
            duplicates = one(
                "SELECT count(*) FROM (SELECT job_run_id FROM chaos_effects GROUP BY job_run_id HAVING count(*) > 1) d"
            )
            missing = one(
                "SELECT count(*) FROM job_runs r WHERE r.status = 'COMPLETED' "
                "AND NOT EXISTS (SELECT 1 FROM chaos_effects e WHERE e.job_run_id = r.job_run_id)"
            )
            orphans = one(
                "SELECT count(*) FROM chaos_effects e JOIN job_runs r USING (job_run_id) WHERE r.status <> 'COMPLETED'"
            )
            # An effect row must come from the attempt, and the worker, whose completion was accepted
            # (worker ids are opaque: the worker's registration names its process).
            stale = one(
                "SELECT count(*) FROM chaos_effects e JOIN run_transitions t ON t.job_run_id = e.job_run_id "
                "AND t.to_status = 'COMPLETED' WHERE t.attempt <> e.attempt OR NOT EXISTS "
                "(SELECT 1 FROM workers w WHERE w.worker_id = t.actor AND w.pid = e.worker_pid)"
            )
            over = one("SELECT count(*) FROM job_runs WHERE attempt > max_attempts")
            attempts = one("SELECT coalesce(sum(attempt), 0) FROM job_runs")
        return {
            "runs": runs,
            "submitted": n,
            "terminal": terminal,
            "completed": completed,
            "lost": n - terminal,
            "duplicate_effects": duplicates,
            "missing_effects": missing,
            "effects_of_unfinished_runs": orphans,
            "stale_completions_accepted": stale,
            "max_attempts_exceeded": over,
            "retried_attempts": attempts - runs,
            "faults": len(self.faults),
            "seconds": round(elapsed, 1),
            "seconds_after_last_fault": round(after_fault, 1),
            "statuses": statuses,
        }

    def close(self) -> None:
        try:
            self.engine.store.dispose()
            with self.raw.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
        finally:
            self.raw.dispose()
            self.worker_log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_true", help="CI size: 1,500 jobs")
    parser.add_argument("--jobs", type=int, help="runs (default 10,000; 1,500 with --short)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--body-ms", type=int, help="how long each job sleeps before its effect (400 / 250)")
    parser.add_argument("--lease-seconds", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, help="give up after this many seconds (default 240 / 900)")
    parser.add_argument("--no-server-restart", action="store_true", help="skip the PostgreSQL restart")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument(
        "--naive",
        action="store_true",
        help="the job writes its row itself (no fenced completion): the checks must fail",
    )
    args = parser.parse_args()
    args.jobs = args.jobs or (1500 if args.short else 10_000)
    args.timeout = args.timeout or (240.0 if args.short else 900.0)
    # Long enough bodies that the run lasts through its faults (~30 s short, ~2 min long).
    args.body_ms = args.body_ms or (400 if args.short else 250)
    random.seed(args.seed)
    print(f"machine: {machine()}")
    print(f"chaos: {args.jobs} jobs, {args.workers} workers x {args.concurrency} threads, lease {args.lease_seconds} s")
    with tempfile.TemporaryDirectory(prefix="jobgate-chaos-") as tmp:
        chaos = Chaos(args, Path(tmp))
        try:
            r = chaos.run()
        finally:
            chaos.close()
    print(f"statuses: {r.pop('statuses')}")
    budget = args.lease_seconds + 30
    checks = {
        "every run terminal": r["terminal"] == r["submitted"] == r["runs"],
        "none lost": r["lost"] == 0,
        "one effect per completed run": r["duplicate_effects"] == 0 and r["missing_effects"] == 0,
        "no effect without a completion": r["effects_of_unfinished_runs"] == 0,
        "no stale completion accepted": r["stale_completions_accepted"] == 0,
        "attempts within their maximum": r["max_attempts_exceeded"] == 0,
        f"done within lease + 30 s ({budget:g} s) of the last fault": r["seconds_after_last_fault"] <= budget,
    }
    for what, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in r.items()))
    if not all(checks.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
