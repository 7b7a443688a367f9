"""The DAL_ANCHOR_JOB anchors the audit log's ended windows in its own fenced completion and
writes each root to the sink; the chain then verifies against both."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from runtime_support import running_worker, wait_status

from helpers import define, make_config
from jobgate.core.states import RunStatus
from jobgate.evidence import anchors, sinks
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from jobgate.testing import SkewedClock


def test_the_anchor_job_anchors_ended_windows_once(database_url: str, tmp_path: Path) -> None:
    config = make_config(tmp_path, evidence={"anchor_window_seconds": 1, "anchor_sink": "sink/anchors.jsonl"})
    store = Store(database_url)
    clock = SkewedClock(timedelta(0), base=store.clock())  # the engine's clock, moved on when the test says
    engine = Engine(store, config, clock=clock)
    try:
        job = define(engine, job_class="DAL_ANCHOR_JOB", handler="jobgate.anchoring:anchor_job")  # audited: approved
        clock.skew = timedelta(seconds=1.1)  # the window of that approval has ended
        with running_worker(engine):
            first = engine.submit(SubmitRequest(job, requested_by="ops", reason="hourly"), actor="ops").run
            wait_status(engine, first.job_run_id, RunStatus.COMPLETED)
        sink = sinks.FileSink(tmp_path / "sink" / "anchors.jsonl")
        records = sink.records()
        assert records and records[0]["first_seq"] == 1
        with engine.store.read() as tx:
            result = anchors.verify_tenant(tx, "default", sink_records=records)
        assert result.ok and result.anchors == len(records), result
    finally:
        store.dispose()
