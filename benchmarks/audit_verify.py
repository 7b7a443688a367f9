"""How long verifying the evidence takes.

Entries (default): N audit entries appended (in batches, as a busy tenant would), anchored in
windows, then ``verify_tenant`` recomputes every hash, link and anchor.

Sealed runs (``--sealed-runs N``): N finished runs, each with its four transitions and its
seal, the seals chained in ``records.sealed`` batches as the leader chains them; then
``audit verify --records``'s check (``verify_records``) recomputes every run's seal from its
rows and every batch's root. The rows are written straight into the tables (building a million
runs through workers would take the better part of an hour; verification reads the same rows).

    python benchmarks/audit_verify.py                 # 10,000 entries on SQLite, 5 repetitions
    python benchmarks/audit_verify.py --entries 100000 --backend postgres --db postgresql://...
    python benchmarks/audit_verify.py --sealed-runs 1000000 --reps 1    # target: under 60 s

There is no peer to compare with (no job queue keeps a verifiable audit chain), so it prints
its own figures: the median and spread of the verification time, and entries per second.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from figures import machine  # noqa: E402

from jobgate.config import default_config  # noqa: E402
from jobgate.core.audit import AuditEvent  # noqa: E402
from jobgate.evidence import anchors, sinks  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402
from jobgate.testing import connection  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", help="database URL for --backend postgres (an empty schema)")
    p.add_argument("--sealed-runs", type=int, default=0, help="verify N sealed runs instead of audit entries")
    a = p.parse_args()
    if a.sealed_runs:
        sealed_runs(a)
        return
    root = Path(tempfile.mkdtemp(prefix="jobgate-audit-bench-"))
    url = a.db if a.backend == "postgres" else f"sqlite:///{root}/audit.db"
    if a.backend == "postgres" and not a.db:
        raise SystemExit("--backend postgres needs --db")
    engine = Engine(Store(url), default_config(root))
    tenant = f"bench-{int(time.time())}"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    t = time.perf_counter()
    for batch in range(0, a.entries, 1000):
        events = [
            AuditEvent(
                tenant,
                "bench",
                "run.scheduled_manually",
                "run",
                f"run-{i}",
                start + timedelta(seconds=i),
                payload={"i": i},
            )
            for i in range(batch, min(a.entries, batch + 1000))
        ]
        with engine.store.write() as tx:
            tx.audit_append(events)
    append_s = time.perf_counter() - t
    sink = sinks.FileSink(root / "anchors.jsonl")
    with engine.store.write() as tx:
        made = anchors.anchor_due(tx, tenant, now=start + timedelta(days=365), window=timedelta(hours=1), sink=sink)
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        with engine.store.read() as tx:
            result = anchors.verify_tenant(tx, tenant, sink_records=sink.records())
        times.append(time.perf_counter() - t)
        assert result.ok and result.entries == a.entries, result
    median = statistics.median(times)
    print(f"machine: {machine()}")
    print(f"audit verify: backend={a.backend} entries={a.entries} anchors={len(made)} reps={a.reps}")
    print(f"append: {a.entries / append_s:,.0f} entries/s (batches of 1,000)")
    spread = f"min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}"
    print(f"verify: median {median * 1000:.0f} ms ({spread}), {a.entries / median:,.0f} entries/s")
    print(
        f"RESULT backend={a.backend} entries={a.entries} anchors={len(made)} verify_median_ms={median * 1000:.0f} "
        f"verify_entries_per_s={a.entries / median:.0f} append_entries_per_s={a.entries / append_s:.0f}"
    )
    engine.store.dispose()


def _run_rows(first: int, n: int, start_us: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Runs ``first`` .. ``first + n - 1``, finished as the worker leaves them, and their transitions."""
    runs: list[dict[str, object]] = []
    transitions: list[dict[str, object]] = []
    for i in range(first, first + n):
        rid = f"TGJOBRUN-bench-{i:012d}"
        at = start_us + i * 1000
        runs.append(
            {
                "job_run_id": rid, "tenant_id": TENANT, "idempotency_key": f"bench-{i:012d}",
                "job_definition_id": "bench-record", "definition_version": 1,
                "definition_digest": "sha256:" + "d" * 64, "job_class": "OBSERVABILITY_JOB",
                "trigger_id": f"TGTRIG-{i}", "trigger_type": "manual",
                "trigger": f'{{"trigger_id":"TGTRIG-{i}","trigger_type":"manual","requested_by":"bench"}}',
                "scope": "{}", "params": f'{{"i":"{i}","t":"0"}}', "workflow_run_id": None,
                "config_snapshot_id": "TGCFG-bench", "config_digest": "sha256:" + "c" * 64, "status": "COMPLETED",
                "attempt": 1, "max_attempts": 3, "priority": "normal", "priority_rank": 2, "queue": "default",
                "retry_policy": "standard_v1", "retry_policy_doc": None, "execution_timeout_us": None,
                "requested_by": "bench", "created_at": at, "due_at": at, "queue_deadline_at": None,
                "started_at": at + 100, "ended_at": at + 200, "next_retry_at": None, "error_code": None,
                "error_message": None, "result": '{"ok":true}', "result_ref": None, "lease_owner": None,
                "lease_token": 1, "lease_expires_at": None, "stop_requested": False, "artifact_path": None,
                "artifact_sha256": None, "artifact_size": None, "hold_reason": None, "held_at": None,
                "reviewed_by": None, "slot": None,
            }
        )  # fmt: skip
        steps = [(None, "CREATED", 0, "created"), ("CREATED", "SCHEDULED", 0, "scheduled"),
                 ("SCHEDULED", "RUNNING", 1, "claimed"), ("RUNNING", "COMPLETED", 1, "completed")]  # fmt: skip
        for k, (src, dst, attempt, reason) in enumerate(steps):
            transitions.append(
                {"job_run_id": rid, "tenant_id": TENANT, "from_status": src, "to_status": dst, "attempt": attempt,
                 "reason": reason, "actor": "bench-worker", "at": at + k * 50, "detail": None}
            )  # fmt: skip
    return runs, transitions


TENANT = "bench"


def sealed_runs(a: argparse.Namespace) -> None:
    from jobgate.core import seals
    from jobgate.store.sql import driver
    from jobgate.store.sql import seals as record_seals
    from jobgate.store.tables import job_runs, run_transitions
    from jobgate.store.tables import record_seals as seal_table

    root = Path(tempfile.mkdtemp(prefix="jobgate-seal-bench-"))
    url = a.db if a.backend == "postgres" else f"sqlite:///{root}/sealed.db"
    if a.backend == "postgres" and not a.db:
        raise SystemExit("--backend postgres needs --db")
    store = Store(url, synchronous="NORMAL") if a.backend == "sqlite" else Store(url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    t = time.perf_counter()
    chunk = 20_000
    for done in range(0, a.sealed_runs, chunk):
        n = min(chunk, a.sealed_runs - done)
        runs, transitions = _run_rows(done, n, 1_767_225_600_000_000)
        seal_rows = []
        for k, r in enumerate(runs):
            parts = seals.run_parts(r, transitions[k * 4 : k * 4 + 4], [])
            rid = str(r["job_run_id"])
            seal_rows.append(
                (TENANT, "run", rid, "sealed", parts.extent, parts.identity, parts.outcome, parts.history,
                 seals.seal_of("run", rid, "sealed", parts), None, 0)
            )  # fmt: skip
        with store.write() as tx:
            cols = tuple(runs[0])
            driver.insert_rows(connection(tx), job_runs, cols, [tuple(r[c] for c in cols) for r in runs])
            tcols = tuple(transitions[0])
            trows = [tuple(r[c] for c in tcols) for r in transitions]
            driver.insert_rows(connection(tx), run_transitions, tcols, trows)
            driver.insert_rows(connection(tx), seal_table, record_seals.SEAL_COLUMNS, seal_rows)
        if done and done % 200_000 == 0:
            print(f"  ... {done:,} runs written", flush=True)
    with store.write() as tx:
        batches = tx.seals_chain(TENANT, now)
    build_s = time.perf_counter() - t
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        with store.read() as tx:
            report = tx.seals_verify(TENANT)
        times.append(time.perf_counter() - t)
        assert report.ok and report.checked["run"] == a.sealed_runs, (report.checked, report.findings[:3])
    median = statistics.median(times)
    print(f"machine: {machine()}")
    print(f"sealed runs: backend={a.backend} runs={a.sealed_runs:,} batches={len(batches)} reps={a.reps}")
    print(f"built in {build_s:.0f} s (rows written directly, seals computed with core.seals)")
    spread = f"min {min(times):.1f} s, max {max(times):.1f} s"
    print(f"verify --records: median {median:.1f} s ({spread}), {a.sealed_runs / median:,.0f} runs/s")
    print("peers: none keeps sealed run records, so there is nothing to compare with")
    print(
        f"RESULT backend={a.backend} sealed_runs={a.sealed_runs} batches={len(batches)} "
        f"verify_median_s={median:.2f} verify_runs_per_s={a.sealed_runs / median:.0f}"
    )
    store.dispose()


if __name__ == "__main__":
    main()
