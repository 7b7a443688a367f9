"""How long a metrics scrape takes: the seed 000 §50 set read from a database holding N runs.

    python benchmarks/metrics_scrape.py                     # 100,000 runs on SQLite, 5 scrapes
    python benchmarks/metrics_scrape.py --backend postgres --db postgresql://...   # an empty schema

The runs are written straight into the tables (a scrape only reads them) with the shape a
busy tenant's history has: most completed on their first attempt, some after a retry, some
dead-lettered, failed or still waiting, each with the transitions it would have recorded, plus
finished workflows. A scrape is the API's (one tenant) and ``jobgate metrics`` (all tenants).
Ends with one ``RESULT key=value ...`` line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from figures import machine  # noqa: E402

from jobgate.config import default_config  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.store import codec  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402
from jobgate.store.tables import dead_letters, job_runs, run_transitions, workflow_runs  # noqa: E402
from jobgate.telemetry.metrics import exposition  # noqa: E402
from jobgate.testing import connection  # noqa: E402

CLASSES = ("REPLAY_JOB", "DAL_ANCHOR_JOB", "MAINTENANCE_JOB", "FEDERATION_SYNC_JOB", "SAFE_MODE_JOB")
# (share of runs, final status, attempts, statuses passed through after SCHEDULED)
SHAPES: tuple[tuple[float, str, int, list[str]], ...] = (
    (0.90, "COMPLETED", 1, ["DISPATCHED", "RUNNING", "COMPLETED"]),
    (0.05, "COMPLETED", 2, ["DISPATCHED", "RUNNING", "RETRY_WAIT", "DISPATCHED", "RUNNING", "COMPLETED"]),
    (0.02, "DEAD_LETTERED", 2, ["DISPATCHED", "RUNNING", "RETRY_WAIT", "DISPATCHED", "RUNNING", "DEAD_LETTERED"]),
    (0.01, "FAILED", 1, ["DISPATCHED", "RUNNING", "FAILED"]),
    (0.02, "SCHEDULED", 0, []),
)


def _run(i: int, tenant: str, at: int, shape: tuple[float, str, int, list[str]]) -> dict[str, Any]:
    _, status, attempts, _ = shape
    return {
        "job_run_id": f"TGJOBRUN-BENCH-{tenant}-{i}",
        "tenant_id": tenant,
        "idempotency_key": f"bench-{tenant}-{i}",
        "job_definition_id": "bench-job",
        "definition_version": 1,
        "definition_digest": "sha256:bench",
        "job_class": CLASSES[i % len(CLASSES)],
        "trigger_id": f"trig-{i}",
        "trigger_type": "manual",
        "trigger": "{}",
        "scope": "{}",
        "params": "{}",
        "config_snapshot_id": "snap",
        "config_digest": "sha256:snap",
        "status": status,
        "attempt": attempts,
        "max_attempts": 3,
        "priority": "normal",
        "priority_rank": 2,
        "queue": "default",
        "retry_policy": "fixed_delay_v1",
        "created_at": at,
        "due_at": at,
        "started_at": at + 2_000 if attempts else None,
        "ended_at": at + 50_000 if status != "SCHEDULED" else None,
        "lease_token": attempts,
    }


def seed(engine: Engine, tenant: str, n: int, span: timedelta = timedelta(days=1)) -> None:
    """``n`` runs created evenly over the ``span`` before now (a day: ~4% in the last hour)."""
    step = max(1, (span // timedelta(microseconds=1)) // max(n, 1))
    start = codec.to_us(datetime.now(UTC)) - n * step
    cumulative: list[tuple[float, tuple[float, str, int, list[str]]]] = []
    total = 0.0
    for shape in SHAPES:
        total += shape[0]
        cumulative.append((total, shape))
    for chunk in range(0, n, 5_000):
        runs, moves, letters, flows = [], [], [], []
        for i in range(chunk, min(n, chunk + 5_000)):
            fraction = (i * 7919 % 1000) / 1000  # a fixed spread of shapes over the runs
            shape = next(s for edge, s in cumulative if fraction < edge)
            at = start + i * step
            run = _run(i, tenant, at, shape)
            runs.append(run)
            path = ["SCHEDULED", *shape[3]]
            attempt = 0
            for k, (src, dst) in enumerate(zip([None, *path], path, strict=False)):
                attempt += dst == "RUNNING"
                moves.append(
                    {
                        "job_run_id": run["job_run_id"],
                        "tenant_id": tenant,
                        "from_status": src,
                        "to_status": dst,
                        "attempt": attempt,
                        "reason": "bench",
                        "actor": "bench",
                        "at": at + 1_000 * (k + 1),
                    }
                )
            if shape[1] == "DEAD_LETTERED":
                letters.append(
                    {
                        "dead_letter_id": f"TGDLQ-{run['job_run_id']}",
                        "job_run_id": run["job_run_id"],
                        "tenant_id": tenant,
                        "job_class": run["job_class"],
                        "reason": "maximum_retries_exceeded",
                        "attempts": 2,
                        "requires_manual_review": False,
                        "created_at": at + 50_000,
                    }
                )
            if i % 50 == 0:
                flows.append(
                    {
                        "workflow_run_id": f"TGWF-BENCH-{tenant}-{i}",
                        "tenant_id": tenant,
                        "idempotency_key": f"wf-{tenant}-{i}",
                        "job_definition_id": "bench-flow",
                        "definition_version": 1,
                        "definition_digest": "sha256:flow",
                        "job_class": "REPLAY_JOB",
                        "status": "COMPLETED",
                        "phase": "forward",
                        "params": "{}",
                        "scope": "{}",
                        "trigger": "{}",
                        "config_snapshot_id": "snap",
                        "config_digest": "sha256:snap",
                        "created_at": at,
                        "ended_at": at + (i % 7_200) * 1_000_000,
                    }
                )
        with engine.store.write() as tx:
            connection(tx).execute(job_runs.insert(), runs)
            connection(tx).execute(run_transitions.insert(), moves)
            if letters:
                connection(tx).execute(dead_letters.insert(), letters)
            if flows:
                connection(tx).execute(workflow_runs.insert(), flows)


def timed(engine: Engine, tenant: str | None, reps: int) -> tuple[list[float], bytes]:
    times, text = [], b""
    for _ in range(reps):
        t = time.perf_counter()
        text = exposition(engine, tenant)
        times.append(time.perf_counter() - t)
    return times, text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", help="database URL for --backend postgres (an empty schema)")
    a = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="jobgate-metrics-bench-"))
    url = a.db if a.backend == "postgres" else f"sqlite:///{root}/metrics.db"
    if a.backend == "postgres" and not a.db:
        raise SystemExit("--backend postgres needs --db")
    engine = Engine(Store(url), default_config(root))
    tenant = f"bench{int(time.time())}"
    t = time.perf_counter()
    seed(engine, tenant, a.runs)
    seed_s = time.perf_counter() - t
    if a.backend == "postgres":  # the statistics autovacuum would have gathered by now
        with engine.store.write() as tx:
            connection(tx).exec_driver_sql("ANALYZE")
    one, text = timed(engine, tenant, a.reps)
    every, _ = timed(engine, None, a.reps)
    created = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.decode().splitlines()
        if line.startswith("tg_scheduler_job_created")
    )
    assert created == a.runs, created
    print(f"machine: {machine()}")
    print(f"metrics scrape: backend={a.backend} runs={a.runs} (seeded in {seed_s:.1f} s) reps={a.reps}")
    for label, xs in (("one tenant", one), ("all tenants", every)):
        spread = f"min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}"
        print(f"{label}: median {statistics.median(xs) * 1000:.0f} ms ({spread})")
    print(
        f"RESULT backend={a.backend} runs={a.runs} tenant_scrape_median_ms={statistics.median(one) * 1000:.0f} "
        f"all_scrape_median_ms={statistics.median(every) * 1000:.0f} bytes={len(text)}"
    )
    engine.store.dispose()


if __name__ == "__main__":
    main()
