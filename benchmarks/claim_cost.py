"""What asking the admission rule at every attempt's start costs a worker's claim.

    python benchmarks/claim_cost.py --backend sqlite --jobs 20000 [--reps 3]
    python benchmarks/claim_cost.py --backend postgres --jobs 20000

A backlog of ``--jobs`` runs is claimed in batches of 256, started at once, as a worker's cycle
claims them: once with the rule asked for every candidate (``RunsClaim.admit``, what a worker
does) and once without it, alternating, in the same run and on the same database. It prints the
median time per claimed run of each (the claiming transaction, its commit and the decoding of the
claimed rows) and their ratio. No peer asks a governance rule when it claims, so the comparison is
with jobgate's own claim without the rule: the ratio is the rule's cost.

Wall time on a shared machine is noisy; for a steady figure count instructions instead:
``valgrind --tool=callgrind python benchmarks/claim_cost.py --jobs 2816 --mode gated`` against
``--mode warm-only`` (the same set-up and warm-up, no measured claims), divided by 2560.

Ends with one line: RESULT backend=... jobs=N gated_us_per_run=X plain_us_per_run=X ratio=X
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import machine  # noqa: E402

from jobgate.config import build_config  # noqa: E402
from jobgate.definitions import parse_definition  # noqa: E402
from jobgate.service import approvals  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.service.gates import AttemptFacts, AttemptGate  # noqa: E402
from jobgate.service.submission import SubmitRequest  # noqa: E402
from jobgate.store.base import RunsClaim  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/jobgate_bench"
BATCH = 256
JOB = {"job_definition_id": "claim-cost", "job_class": "MAINTENANCE_JOB", "handler": "jobgate_bench_body:record"}


class Bench:
    def __init__(self, backend: str, db: str | None, base: Path) -> None:
        self.base = base
        if backend == "sqlite":
            self.url = f"sqlite:///{base}/claim-cost.db"
        else:
            from sqlalchemy import create_engine, text

            schema = f"claim_cost_{uuid.uuid4().hex[:8]}"
            root = (db or DEFAULT_PG_URL).split("?")[0]
            self.admin = create_engine(root.replace("postgresql://", "postgresql+psycopg://", 1))
            with self.admin.begin() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            self.schema = schema
            self.url = f"{root}?options=-csearch_path%3D{schema}"
        self.backend = backend
        self.store = Store(self.url)
        self.engine = Engine(self.store, build_config({"data_dir": str(base / "data")}, base_dir=base, path=None))
        loaded = parse_definition(JOB, "claim_cost", self.engine.config)
        self.engine.apply_definitions([loaded], applied_by="bench")
        approvals.approve(self.engine, "default", JOB["job_definition_id"], actor="bench-approver")
        self.facts = AttemptFacts(self.engine, code=self.engine.definitions.code_reader)

    def fill(self, n: int, tag: str) -> None:
        requests = [
            SubmitRequest(JOB["job_definition_id"], requested_by="bench", request_id=f"{tag}-{i}") for i in range(n)
        ]
        for i in range(0, n, 2000):
            self.engine.submit_many(requests[i : i + 2000], actor="bench")

    def cycle(self, gated: bool) -> tuple[int, float]:
        """One claim of up to a batch, as a worker's cycle makes it; (runs, seconds)."""
        started = time.perf_counter()
        now = self.engine.clock.now()
        if gated:
            self.facts.refresh(now)
        with self.store.write() as tx:
            admit = AttemptGate(self.facts, tx, now) if gated else None
            claim = RunsClaim("claim-cost", ("default",), BATCH, now, now + timedelta(minutes=10), start_now=BATCH)
            if admit is not None:
                claim = RunsClaim(
                    claim.worker_id, claim.queues, claim.limit, claim.now, claim.lease_expires_at,
                    start_now=claim.start_now, admit=admit,
                )  # fmt: skip
            batch = tx.runs_claim(claim)
        runs = batch.runs()
        return len(runs), time.perf_counter() - started

    def drain(self, gated: bool) -> list[float]:
        """Claim until nothing is left; microseconds per claimed run of each full batch."""
        out: list[float] = []
        while True:
            n, seconds = self.cycle(gated)
            if n == 0:
                return out
            if n == BATCH:
                out.append(seconds / n * 1e6)

    def close(self) -> None:
        self.store.dispose()
        if self.backend == "postgres":
            from sqlalchemy import text

            with self.admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{self.schema}" CASCADE'))
            self.admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--db", help="database URL for --backend postgres (default: the local test server)")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--mode", choices=("compare", "gated", "plain", "warm-only"), default="compare")
    args = parser.parse_args()
    bench = Bench(args.backend, args.db, Path(tempfile.mkdtemp(prefix="jobgate-claim-cost-")))
    try:
        bench.fill(BATCH, "warm")
        bench.drain(gated=True)  # first reads, statement preparation, caches: a worker pays these once
        gc.collect()
        gc.freeze()
        gc.set_threshold(int(os.environ.get("JOBGATE_GC_THRESHOLD", "20000")))  # as a worker process runs
        if args.mode == "warm-only":
            return
        if args.mode in ("gated", "plain"):
            bench.fill(args.jobs - BATCH, "only")
            bench.drain(gated=args.mode == "gated")
            return
        print(machine())
        gated: list[float] = []
        plain: list[float] = []
        for rep in range(args.reps):
            for is_gated, into in ((True, gated), (False, plain)) if rep % 2 == 0 else ((False, plain), (True, gated)):
                bench.fill(args.jobs, f"{rep}-{is_gated}")
                figures = bench.drain(gated=is_gated)
                into.append(statistics.median(figures))
                print(f"rep {rep + 1} {'gated' if is_gated else 'plain'}: {into[-1]:.1f} us per claimed run")
        g, p = statistics.median(gated), statistics.median(plain)
        print(
            f"RESULT backend={args.backend} jobs={args.jobs} reps={args.reps} gated_us_per_run={g:.1f} "
            f"plain_us_per_run={p:.1f} ratio={g / p:.3f}"
        )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
