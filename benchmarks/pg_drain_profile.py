"""Where a PostgreSQL drain spends its time: CPU per process class and WAL per job.

    python benchmarks/pg_drain_profile.py [--jobs 20000] [--workers 2] [--reps 3] [--db URL] [--phase e2e]

``--phase drain`` (the default) submits N runs with the workers stopped (the throughput
benchmark's bulk phase), starts the worker processes, and measures their drain of the backlog.
``--phase e2e`` measures the throughput benchmark's end-to-end phase instead: the workers are
running, and this process submits the N runs in batches of 500 while they drain; its own CPU
(class ``benchmark``) is then the cost of submitting. Over the measured phase it reads:
  - CPU seconds of every process on this host by class (PostgreSQL server processes, jobgate
    workers, Redis, this process, the rest) from ``/proc/<pid>/stat``, so the figure is CPU
    spent, not wall time, and holds up better than throughput on a noisy VM;
  - bytes of WAL written (``pg_current_wal_lsn``) per completed job;
  - the ten statements with the most execution + planning time, when the database has the
    ``pg_stat_statements`` extension (it needs ``shared_preload_libraries``; skipped otherwise).
The job body is the peers' ``record``, as in ``throughput.py``. Linux only (``/proc``).
Ends with one line: RESULT backend=postgres jobs=N drain_per_s=X cpu_ms_per_job=X postgres_ms_per_job=X
workers_ms_per_job=X wal_bytes_per_job=X reps=N (medians).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402
import throughput  # noqa: E402
from figures import machine  # noqa: E402

common = throughput.common  # type: ignore[attr-defined]  # the peers' harness, imported by throughput
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _classify(pid: int, comm: str, cmdline: str) -> str:
    if comm.startswith("postgres") or cmdline.startswith("postgres"):
        return "postgres"
    if "redis" in comm or "redis" in cmdline:
        return "redis"
    if "jobgate.cli.entry" in cmdline and " worker" in cmdline:
        return "workers"
    if pid == os.getpid():
        return "benchmark"
    return "other"


def cpu_by_class() -> dict[str, float]:
    """CPU seconds (user + system) used so far by every live process, summed per class."""
    out: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
        key = _classify(int(entry), comm, cmdline)
        out[key] = out.get(key, 0.0) + seconds
    return out


def _statements(conn: Any) -> list[tuple[Any, ...]] | None:
    has = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'").fetchone()
    if not has:
        return None
    try:
        return list(
            conn.execute(
                "SELECT calls, total_exec_time + total_plan_time, rows, wal_bytes,"
                " left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " ORDER BY 2 DESC LIMIT 10"
            )
        )
    except psycopg.Error:  # created but not preloaded: nothing to read
        return None


def run_once(args: argparse.Namespace) -> dict[str, float]:
    bench_args = argparse.Namespace(
        backend="postgres",
        db=args.db,
        jobs=args.jobs,
        workers=args.workers,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        prefetch=0,
        single=0,
        latency_jobs=0,
        synchronous="FULL",
        reps=1,
        peers=None,
    )
    e2e = args.phase == "e2e"
    warmup = 200 if e2e else 0  # e2e: the workers are up and have run a few jobs before the clock starts
    with tempfile.TemporaryDirectory(prefix="jobgate-pgprof-") as tmp:
        bench = throughput.Bench(bench_args, Path(tmp))
        common.reset_sink()
        bench.submit_bulk(bench.requests(warmup if e2e else args.jobs))
        with psycopg.connect(args.db, autocommit=True) as pg:
            bench.start_workers()
            try:
                sink = common.sink()
                # Measure from the first completion: process start-up (imports) is not the drain.
                deadline = time.monotonic() + common.DRAIN_TIMEOUT
                while int(sink.get("done") or 0) < (warmup if e2e else 1):
                    if time.monotonic() > deadline:
                        raise SystemExit("workers did not start")
                    time.sleep(0.005)
                if _statements(pg) is not None:
                    pg.execute("SELECT pg_stat_statements_reset()")
                if e2e:
                    common.reset_sink()
                    reqs = bench.requests(args.jobs)
                done0, cpu0, t0 = int(sink.get("done") or 0), cpu_by_class(), time.perf_counter()
                wal0 = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                if e2e:
                    bench.submit_bulk(reqs, batch=500)
                while int(sink.get("done") or 0) < args.jobs:
                    if time.monotonic() > deadline:
                        raise SystemExit("drain timed out")
                    time.sleep(0.005)
                seconds, cpu1 = time.perf_counter() - t0, cpu_by_class()
                wal1 = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                wal = float(pg.execute("SELECT pg_wal_lsn_diff(%s, %s)", (wal1, wal0)).fetchone()[0])  # type: ignore[index]
                top = _statements(pg)
            finally:
                bench.stop_workers()
        bench.check_completed(args.jobs + warmup)
        bench.engine.store.dispose()
    jobs = args.jobs - done0
    used = {k: cpu1.get(k, 0.0) - cpu0.get(k, 0.0) for k in cpu1}
    print(
        f"  {'ran end to end' if e2e else 'drained'} {jobs} in {seconds:.2f} s = {jobs / seconds:,.0f} jobs/s; "
        + "CPU ms per job: "
        + ", ".join(f"{k} {1000 * v / jobs:.3f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0.01)
        + f"; cores busy {sum(used.values()) / seconds:.2f}; WAL {wal / jobs:,.0f} bytes per job",
        flush=True,
    )
    if top:
        print("  statements (calls, ms exec+plan, rows, WAL bytes, text):")
        for calls, ms, rows, wal_bytes, query in top:
            print(f"    {calls:6d} {ms:8.0f} {rows:7d} {int(wal_bytes):11,d}  {query}")
    return {
        "drain_per_s": jobs / seconds,
        "cpu_ms_per_job": 1000 * sum(used.values()) / jobs,
        "postgres_ms_per_job": 1000 * used.get("postgres", 0.0) / jobs,
        "workers_ms_per_job": 1000 * used.get("workers", 0.0) / jobs,
        "wal_bytes_per_job": wal / jobs,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", default=os.environ.get("JOBGATE_BENCH_POSTGRES_URL", throughput.DEFAULT_PG_URL))
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=96)  # as throughput.py on PostgreSQL
    p.add_argument("--phase", choices=["drain", "e2e"], default="drain")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(f"machine: {machine()}")
    print(
        f"jobgate profile: phase={args.phase} jobs={args.jobs} workers={args.workers} concurrency={args.concurrency}",
        flush=True,
    )
    runs = []
    for rep in range(args.reps):
        print(f"rep {rep + 1}:", flush=True)
        runs.append(run_once(args))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(
        f"RESULT backend=postgres phase={args.phase} jobs={args.jobs} drain_per_s={med['drain_per_s']:.0f} "
        f"cpu_ms_per_job={med['cpu_ms_per_job']:.3f} postgres_ms_per_job={med['postgres_ms_per_job']:.3f} "
        f"workers_ms_per_job={med['workers_ms_per_job']:.3f} wal_bytes_per_job={med['wal_bytes_per_job']:.0f} "
        f"reps={args.reps}"
    )


if __name__ == "__main__":
    main()
