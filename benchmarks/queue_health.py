"""Claim latency with a large history: does the queue stay fast when finished runs pile up?

    python benchmarks/queue_health.py --backend postgres            # 1,000,000 finished runs
    python benchmarks/queue_health.py --backend sqlite --short      # 100,000, a few seconds

It measures one claim transaction (``runs_claim``: candidates, rate and concurrency limits,
the claim itself, its transitions and events) for a batch of 10 fresh runs, 300 times, first
with an empty history and then after N finished (COMPLETED) runs were added to ``job_runs``.
The claim reads the partial index of claimable runs, so finished rows should cost nothing;
the ratio of the two medians says whether they do. Ends with one line:
RESULT backend=... finished=N claim_p50_ms_empty=X claim_p50_ms_full=X ratio=X ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import machine, pct  # noqa: E402

from jobgate.config import load_config  # noqa: E402
from jobgate.definitions import load_definitions  # noqa: E402
from jobgate.service import approvals  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.service.submission import SubmitRequest  # noqa: E402
from jobgate.store.base import RunsClaim  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402
from jobgate.store.tables import job_runs  # noqa: E402
from jobgate.testing import connection  # noqa: E402

PG_URL = "postgresql://postgres@127.0.0.1:5432/jobgate_bench"
DEFINITION = """
job_definition_id: health-probe
job_code: HEALTH-PROBE
job_class: OBSERVABILITY_JOB
canonical_name: Queue health probe
trigger_type: manual
handler: jobgate.standins:hello  # never run: only claimed
params:
  - {name: i, required: true, pattern: '[0-9]{1,9}'}
"""
# Every column of a run copied from a template row, except those that make each copy unique.
_VARYING = {"job_run_id", "idempotency_key", "status", "attempt", "ended_at"}


def fill_history(engine: Engine, n: int) -> None:
    """Add ``n`` COMPLETED runs, cloned in the database from one template run (fast: one statement)."""
    template = engine.submit(SubmitRequest("health-probe", params={"i": "0"}, request_id="template")).run
    columns = [c.name for c in job_runs.c if c.name not in _VARYING]
    copied = ", ".join(columns)
    pg = engine.store.dialect == "postgresql"
    series = "generate_series(1, :n) AS g(x)" if pg else "g"
    prefix = "" if pg else "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n) "
    cast = "x::text" if pg else "CAST(x AS TEXT)"
    sql = (
        f"{prefix}INSERT INTO job_runs (job_run_id, idempotency_key, status, attempt, ended_at, {copied}) "
        f"SELECT 'TGJOBRUN-old-' || {cast}, 'old-' || {cast}, 'COMPLETED', 1, created_at, {copied} "
        f"FROM job_runs, {series} WHERE job_run_id = :t"
    )
    from sqlalchemy import text

    t0 = time.perf_counter()
    with engine.store.write() as tx:
        connection(tx).execute(text(sql), {"n": n, "t": template.job_run_id})
        if pg:
            connection(tx).exec_driver_sql("ANALYZE job_runs")
    print(f"  added {n:,} finished runs in {time.perf_counter() - t0:.1f} s")


def claim_latencies(engine: Engine, rounds: int, batch: int = 10) -> list[float]:
    """Submit ``batch`` runs, time one claim of them; then finish them (outside the timing)."""
    out: list[float] = []
    for r in range(rounds):
        reqs = [
            SubmitRequest("health-probe", params={"i": str(i)}, request_id=f"h{uuid.uuid4().hex}-{i}")
            for i in range(batch)
        ]
        engine.submit_many(reqs, actor="bench")
        now = engine.clock.now()
        t0 = time.perf_counter()
        with engine.store.write() as tx:
            claimed = tx.runs_claim(RunsClaim("bench-worker", ("default",), batch, now, now + timedelta(seconds=30)))
        out.append(1000 * (time.perf_counter() - t0))
        ids = [run.job_run_id for run in claimed.runs()]
        if len(ids) != batch:
            raise SystemExit(f"round {r}: claimed {len(ids)} of {batch}")
        with engine.store.write() as tx:
            connection(tx).exec_driver_sql(
                "UPDATE job_runs SET status = 'COMPLETED', lease_owner = NULL, lease_expires_at = NULL "
                f"WHERE job_run_id IN ({', '.join(repr(i) for i in ids)})"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--db", help="PostgreSQL URL (default: the local jobgate_bench database)")
    parser.add_argument("--finished", type=int, help="finished runs to add (default 1,000,000; 100,000 --short)")
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    finished = args.finished or (100_000 if args.short else 1_000_000)
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="jobgate-health-") as tmp:
        root = Path(tmp)
        schema = f"health_{uuid.uuid4().hex[:10]}"
        if args.backend == "postgres":
            from sqlalchemy import create_engine

            base = args.db or PG_URL
            admin = create_engine(base.replace("postgresql://", "postgresql+psycopg://", 1))
            with admin.begin() as conn:
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
        else:
            url = f"sqlite:///{root}/jobgate.db"
        (root / "definitions").mkdir()
        (root / "definitions" / "probe.yaml").write_text(DEFINITION)
        (root / "jobgate.yaml").write_text(
            json.dumps({"database": url, "data_dir": str(root / "data"), "definitions": ["definitions"]})
        )
        config = load_config(root / "jobgate.yaml")
        engine = Engine(Store(config.database), config)
        try:
            for applied in engine.apply_definitions(load_definitions([root / "definitions"], config)):
                approvals.approve(engine, "default", applied.job_definition_id, actor="bench")  # an admin's blessing
            claim_latencies(engine, 20)  # warm up
            empty = claim_latencies(engine, args.rounds)
            print(f"  empty history: claim p50 {statistics.median(empty):.2f} ms, p99 {pct(empty, 99):.2f} ms")
            fill_history(engine, finished)
            full = claim_latencies(engine, args.rounds)
            print(f"  {finished:,} finished: claim p50 {statistics.median(full):.2f} ms, p99 {pct(full, 99):.2f} ms")
        finally:
            engine.store.dispose()
            if args.backend == "postgres":
                with admin.begin() as conn:
                    conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
                admin.dispose()
    p50_empty, p50_full = statistics.median(empty), statistics.median(full)
    print(
        f"RESULT backend={args.backend} finished={finished} rounds={args.rounds} batch=10 "
        f"claim_p50_ms_empty={p50_empty:.2f} claim_p99_ms_empty={pct(empty, 99):.2f} "
        f"claim_p50_ms_full={p50_full:.2f} claim_p99_ms_full={pct(full, 99):.2f} ratio={p50_full / p50_empty:.2f}"
    )


if __name__ == "__main__":
    main()
