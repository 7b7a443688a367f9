"""Throughput and latency of jobgate on this machine, beside the peers, from one run.

    python benchmarks/throughput.py --backend sqlite --jobs 20000 [--workers 2] [--peers] [--reps 3]

Phases, mirroring ../shared/bench/peers/common.py so the figures compare:
  1. submit: S runs one transaction each (submit_single/s), the rest in bulk (submit/s), workers stopped;
  2. process: start the worker processes, time the drain of that backlog (clock from the first completion);
  3. end to end: workers running, submit N in batches and time first submit -> last completion;
  4. light load: 500 runs one every 10 ms -> trigger->run created and submit->start p50/p99;
     plus the latency of one committed state transition (a cancel) p50/p99.
The job body is the peers' ``record`` (one Redis round trip); after every drain the benchmark
checks that each job ran exactly once (Redis count and bitcount) and that every run is COMPLETED.
With --peers, a table puts jobgate's drain, latency and single submission beside each peer's
drain, latency and single enqueue, with the ratios (``ratio_vs_<peer>``, ``single_ratio_vs_<peer>``).
Ends with one line: RESULT backend=... jobs=N submit_per_s=X process_per_s=X end_to_end_per_s=X
e2e_cpu_us_per_job=X (CPU the machine spent per job end to end: /proc/stat) p50_ms=X p99_ms=X ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/jobgate_bench"
PEERS_DIR = Path(os.environ.get("JOBGATE_PEERS_DIR") or REPO.parent / "shared" / "bench" / "peers")
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PEERS_DIR))

import common  # type: ignore[import-not-found]  # noqa: E402
import preload  # noqa: E402
from bench_site import make_site  # noqa: E402
from figures import CpuByClass, busy_cpu_seconds, child_pythonpath, machine, pct, processes_named  # noqa: E402

from jobgate.core.models import Scope  # noqa: E402
from jobgate.service import control  # noqa: E402
from jobgate.service.submission import SubmitRequest  # noqa: E402
from jobgate.testing import connection  # noqa: E402

DEFINITION = """
job_definition_id: bench-record
job_code: BENCH-RECORD
job_class: OBSERVABILITY_JOB
canonical_name: Benchmark body (peers' record)
trigger_type: manual
handler: jobgate_bench_body:record
priority: normal
params:
  - {name: i, required: true, pattern: '[0-9]{1,9}'}
  - {name: t, pattern: '[0-9]{1,12}([.][0-9]{1,9})?', default: "0"}
"""


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.config_path, self.engine = make_site(root, DEFINITION, db=args.db, synchronous=args.synchronous)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seq = 0

    # workers ---------------------------------------------------------------
    def start_workers(self) -> None:
        env = dict(os.environ, PYTHONPATH=child_pythonpath(HERE, PEERS_DIR), JOBGATE_PEERS_DIR=str(PEERS_DIR))
        log = open(Path(tempfile.gettempdir()) / "jobgate-bench-workers.log", "ab")  # noqa: SIM115
        for n in range(self.args.workers):
            cmd = [
                sys.executable,
                "-m",
                "jobgate.cli.entry",
                "--config",
                str(self.config_path),
                "worker",
                "--concurrency",
                str(self.args.concurrency),
                "--batch-size",
                str(self.args.batch_size),
                "--prefetch",
                str(self.args.prefetch),
                "--poll-ms",
                "50",
            ]
            if n > 0:
                cmd.append("--no-publisher")
            self.procs.append(
                subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )

    def stop_workers(self) -> None:
        common.stop(self.procs, grace=30)
        self.procs = []

    # cost ------------------------------------------------------------------
    def cpu_by_class(self) -> CpuByClass:
        classes: dict[str, Callable[[], list[int]]] = {
            "worker": lambda: [p.pid for p in self.procs],
            "submitter": lambda: [os.getpid()],
        }
        if self.engine.store.dialect == "postgresql":
            classes["database"] = lambda: processes_named("postgres")
        return CpuByClass(classes)

    def wal_lsn(self) -> str | None:
        """PostgreSQL's current write-ahead log position (None on SQLite)."""
        if self.engine.store.dialect != "postgresql":
            return None
        with self.engine.store.read() as tx:
            return str(connection(tx).exec_driver_sql("SELECT pg_current_wal_lsn()").scalar_one())

    def wal_bytes_since(self, lsn: str) -> float:
        with self.engine.store.read() as tx:
            sql = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(lsn)s::pg_lsn)"
            return float(connection(tx).exec_driver_sql(sql, {"lsn": lsn}).scalar_one())

    # submissions -----------------------------------------------------------
    def requests(self, n: int, *, t_enq: float = 0.0) -> list[SubmitRequest]:
        out = []
        for i in range(n):
            out.append(
                SubmitRequest(
                    "bench-record",
                    params={"i": str(i), "t": f"{t_enq:.6f}" if t_enq else "0"},
                    scope=Scope(),
                    requested_by="bench",
                    request_id=f"b{self.seq}-{i}",
                )
            )
        self.seq += 1
        return out

    def submit_bulk(self, reqs: list[SubmitRequest], batch: int = 1000) -> None:
        for start in range(0, len(reqs), batch):
            self.engine.submit_many(reqs[start : start + batch], actor="bench")

    def preload(self, n: int) -> int:
        """``n`` finished runs in the database first (``preload.py``), copies of one run that went
        through the product here; returns the runs this adds to the measured tenant (the template)."""
        (template,) = self.requests(1)
        run = self.engine.submit(template, actor="bench").run
        common.reset_sink()
        self.start_workers()
        try:
            common.wait_done(1)
        finally:
            self.stop_workers()
        seconds = preload.preload(self.engine.store, run.job_run_id, n)
        print(f"preload: {n:,} finished runs in {seconds:.0f} s", flush=True)
        return 1

    def check_completed(self, expected_total: int) -> None:
        with self.engine.store.read() as tx:
            sql = f"SELECT status, count(*) FROM job_runs WHERE tenant_id <> '{preload.TENANT}' GROUP BY status"
            rows = connection(tx).exec_driver_sql(sql).all()
        counts = {s: n for s, n in rows}
        if counts.get("COMPLETED", 0) != expected_total or len(counts) != 1:
            raise SystemExit(f"database check failed: expected {expected_total} COMPLETED, found {counts}")

    # phases ----------------------------------------------------------------
    def run_once(self) -> dict[str, Any]:
        a = self.args
        res: dict[str, Any] = {}
        total = 0
        if a.preload:
            total += self.preload(a.preload)
        # 1. submit (workers stopped)
        common.reset_sink()
        single = min(a.single, a.jobs)
        reqs = self.requests(a.jobs)
        t = time.perf_counter()
        for r in reqs[:single]:
            self.engine.submit(r, actor="bench")
        res["submit_single_per_s"] = single / (time.perf_counter() - t) if single else float("nan")
        t = time.perf_counter()
        self.submit_bulk(reqs[single:])
        res["submit_per_s"] = (a.jobs - single) / (time.perf_counter() - t) if a.jobs > single else float("nan")
        total += a.jobs
        # 2. process the backlog
        self.start_workers()
        try:
            res["process_per_s"], res["drain_s"] = common.wait_done(a.jobs)
            v = common.verify(a.jobs, settle=0)
            res["exactly_once"] = v["exactly_once"]
            # 3. end to end with workers running
            common.reset_sink()
            reqs = self.requests(a.jobs)
            by_class = self.cpu_by_class()
            wal0 = self.wal_lsn()
            by_class.start()
            cpu0 = busy_cpu_seconds()
            t0 = time.perf_counter()
            self.submit_bulk(reqs, batch=500)
            res["e2e_submit_s"] = time.perf_counter() - t0  # how much of the phase submitting took
            s = common.sink()
            while int(s.get("done") or 0) < a.jobs:
                time.sleep(0.002)
                if time.perf_counter() - t0 > common.DRAIN_TIMEOUT:
                    raise SystemExit("end-to-end phase timed out")
            res["end_to_end_per_s"] = a.jobs / (time.perf_counter() - t0)
            # CPU the whole machine spent per job end to end (submit, claim, run, settle, seal):
            # the steadier figure for comparing two trees on a noisy machine.
            res["e2e_cpu_us_per_job"] = (busy_cpu_seconds() - cpu0) / a.jobs * 1e6
            # ... and where it went: the worker processes, this submitting process, the database
            # server's processes (PostgreSQL; SQLite works inside the other two).
            for name, seconds in by_class.stop().items():
                res[f"e2e_cpu_us_{name}"] = seconds / a.jobs * 1e6
            if wal0 is not None:
                res["e2e_wal_bytes_per_job"] = self.wal_bytes_since(wal0) / a.jobs
            res["exactly_once"] &= common.verify(a.jobs, settle=0)["exactly_once"]
            total += a.jobs
            # 4. light load latency. "Light load" means the system has caught up: wait until the
            # outbox publisher has delivered the events of the bursts above before measuring.
            t_drain = time.perf_counter()
            while True:
                with self.engine.store.read() as tx:
                    if tx.outbox_backlog() == 0:
                        break
                if time.perf_counter() - t_drain > common.DRAIN_TIMEOUT:
                    raise SystemExit("outbox did not drain")
                time.sleep(0.05)
            res["outbox_drain_s"] = time.perf_counter() - t_drain
            common.reset_sink()
            created: list[float] = []
            t_start = time.time()
            for i, _ in enumerate(range(a.latency_jobs)):
                delay = t_start + i * common.LAT_GAP - time.time()
                if delay > 0:
                    time.sleep(delay)
                req = self.requests(1, t_enq=time.time())[0]
                req = SubmitRequest(
                    req.job_definition_id,
                    params={**req.params, "i": str(i)},
                    request_id=req.request_id,
                    requested_by="bench",
                )
                t1 = time.perf_counter()
                self.engine.submit(req, actor="bench")
                created.append((time.perf_counter() - t1) * 1000)
            common.wait_done(a.latency_jobs)
            res["exactly_once"] &= common.verify(a.latency_jobs)["exactly_once"]
            total += a.latency_jobs
            lat = [float(x) * 1000 for x in s.lrange("lat", 0, -1)]
            res["p50_ms"], res["p99_ms"] = pct(lat, 50), pct(lat, 99)
            res["created_p50_ms"], res["created_p99_ms"] = pct(created, 50), pct(created, 99)
        finally:
            self.stop_workers()
        self.check_completed(total)
        # state transition latency: one committed change (cancel of a pending run), one at a time
        from datetime import timedelta

        later = self.engine.clock.now() + timedelta(hours=1)
        reqs = self.requests(200)
        pending = [
            r.run.job_run_id
            for r in self.engine.submit_many(
                [
                    SubmitRequest(r.job_definition_id, params=r.params, request_id=r.request_id, due_at=later)
                    for r in reqs
                ],
                actor="bench",
            )
        ]
        trans = []
        for run_id in pending:
            t1 = time.perf_counter()
            control.cancel_run(self.engine, run_id, actor="bench")
            trans.append((time.perf_counter() - t1) * 1000)
        res["transition_p50_ms"], res["transition_p99_ms"] = pct(trans, 50), pct(trans, 99)
        with self.engine.store.write() as tx:  # leave a clean table for the next repetition
            connection(tx).exec_driver_sql(f"DELETE FROM job_runs WHERE tenant_id <> '{preload.TENANT}'")
        return res


def run_peers(names: list[str], n: int) -> list[dict[str, Any]]:
    results_dir = Path(tempfile.mkdtemp(prefix="jobgate-peers-"))
    env = dict(os.environ, BENCH_N=str(n), BENCH_RESULTS=str(results_dir))
    print(f"running peers {' '.join(names)} with BENCH_N={n} (this takes a while) ...", flush=True)
    subprocess.run(["bash", str(PEERS_DIR.parent / "run_peers.sh"), *names], env=env, check=False)
    path = results_dir / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fmt(x: float) -> str:
    return "nan" if x != x else (f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", help="database URL for --backend postgres (default: the local test server)")
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument(
        "--concurrency",
        type=int,
        help="executor threads per worker (default 64 on SQLite, 96 on PostgreSQL: a worker claims for its free "
        "threads, and on PostgreSQL, where a cycle waits on round trips, bigger cycles drain faster; the shared "
        "job body's Redis client allows 100 connections per process)",
    )
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=0, help="runs claimed beyond free threads (the CLI default)")
    p.add_argument("--single", type=int, default=2000, help="runs submitted one transaction each")
    p.add_argument("--latency-jobs", type=int, default=common.LAT_N)
    p.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--preload", type=int, default=0, help="finished runs stored before measuring (scale)")
    p.add_argument("--peers", nargs="?", const="default", help="also run the peers harness (names, comma-separated)")
    args = p.parse_args()
    if args.concurrency is None:
        args.concurrency = 96 if args.backend == "postgres" else 64
    if args.backend == "postgres" and not args.db:
        args.db = os.environ.get("JOBGATE_BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    print(f"machine: {machine()}")
    print(
        f"jobgate: backend={args.backend} jobs={args.jobs} workers={args.workers} concurrency={args.concurrency} "
        f"batch={args.batch_size} prefetch={args.prefetch} synchronous={args.synchronous}",
        flush=True,
    )
    runs = []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="jobgate-bench-") as tmp:
            bench = Bench(args, Path(tmp))
            r = bench.run_once()
            bench.engine.store.dispose()
        print(
            f"rep {rep + 1}: " + " ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in r.items()),
            flush=True,
        )
        runs.append(r)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], float)}
    exactly_once = all(r["exactly_once"] for r in runs)
    extra = ""
    if args.peers:
        names = (
            (["huey-sqlite"] if args.backend == "sqlite" else ["huey-postgres", "procrastinate"])
            if args.peers == "default"
            else args.peers.split(",")
        )
        peers = run_peers(names, args.jobs)
        # The single submission (one trigger, one durable transaction) beside each peer's single
        # enqueue: the submit path a caller feels, which issue 22 asks to see next to the peers'.
        print(
            "\n| system | backend | process/s | latency p50 ms | latency p99 ms | single submit/s "
            "| jobgate process/s ÷ peer | jobgate single ÷ peer |"
        )
        print("|---|---|---|---|---|---|---|---|")
        single = med["submit_single_per_s"]
        print(
            f"| jobgate | {args.backend} | {med['process_per_s']:.0f} | {med['p50_ms']:.1f} "
            f"| {med['p99_ms']:.1f} | {single:.0f} | 1.00 | 1.00 |"
        )
        best = 0.0
        for pr in peers:
            rate = statistics.median([x for x in (pr.get("process_per_s"), pr.get("process_bulk_per_s")) if x])
            best = max(best, rate)
            enqueue = pr.get("enqueue_single_per_s") or float("nan")
            print(
                f"| {pr['system']} | {pr['backend']} | {rate:.0f} | {pr['lat_p50_ms']:.1f} | {pr['lat_p99_ms']:.1f} "
                f"| {fmt(enqueue)} | {med['process_per_s'] / rate:.2f} | {single / enqueue:.2f} |"
            )
            key = f"{pr['system']}_{pr['backend']}"
            extra += f" ratio_vs_{key}={med['process_per_s'] / rate:.2f} single_ratio_vs_{key}={single / enqueue:.2f}"
        if best:
            extra += f" best_peer_process_per_s={best:.0f}"
    # where the end-to-end CPU went, by process class, and PostgreSQL's WAL bytes, per job
    by_class = [k for k in sorted(med) if k.startswith(("e2e_cpu_us_", "e2e_wal_")) and k != "e2e_cpu_us_per_job"]
    cost = "".join(f"{k}={med[k]:.0f} " for k in by_class)
    print(
        f"RESULT backend={args.backend} jobs={args.jobs} submit_per_s={med['submit_per_s']:.0f} "
        f"process_per_s={med['process_per_s']:.0f} end_to_end_per_s={med['end_to_end_per_s']:.0f} "
        f"e2e_cpu_us_per_job={med['e2e_cpu_us_per_job']:.0f} {cost}"
        f"p50_ms={med['p50_ms']:.1f} p99_ms={med['p99_ms']:.1f} submit_single_per_s={med['submit_single_per_s']:.0f} "
        f"created_p50_ms={med['created_p50_ms']:.1f} created_p99_ms={med['created_p99_ms']:.1f} "
        f"transition_p50_ms={med['transition_p50_ms']:.1f} transition_p99_ms={med['transition_p99_ms']:.1f} "
        f"workers={args.workers} reps={args.reps} preload={args.preload} "
        f"exactly_once={'yes' if exactly_once else 'NO'}{extra}"
    )
    if not exactly_once:
        sys.exit(1)


if __name__ == "__main__":
    main()
