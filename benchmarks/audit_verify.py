"""How long verifying the audit log takes: N entries appended (in batches, as a busy tenant
would), anchored in windows, then ``verify_tenant`` recomputes every hash, link and anchor.

    python benchmarks/audit_verify.py                 # 10,000 entries on SQLite, 5 repetitions
    python benchmarks/audit_verify.py --entries 100000 --backend postgres --db postgresql://...

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

from jobgate import anchoring  # noqa: E402
from jobgate.config import default_config  # noqa: E402
from jobgate.core.audit import AuditEvent  # noqa: E402
from jobgate.service.engine import Engine  # noqa: E402
from jobgate.store.sqlstore import Store  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", help="database URL for --backend postgres (an empty schema)")
    a = p.parse_args()
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
    sink = anchoring.FileSink(root / "anchors.jsonl")
    with engine.store.write() as tx:
        made = anchoring.anchor_due(
            tx.conn, tenant, now=start + timedelta(days=365), window=timedelta(hours=1), sink=sink
        )
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        with engine.store.read() as tx:
            result = anchoring.verify_tenant(tx.conn, tenant, sink_records=sink.records())
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


if __name__ == "__main__":
    main()
