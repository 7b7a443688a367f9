"""Row decoding: the trusted constructor must set exactly the fields a JobRun has."""

from __future__ import annotations

import dataclasses

from jobgate.core.models import JobRun
from jobgate.store import codec
from jobgate.store.sql.runs import _RUN_INSERT_COLUMNS
from jobgate.store.tables import job_runs


def _row() -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys((c.name for c in job_runs.c), None)
    row.update(
        job_run_id="TGJOBRUN-x",
        tenant_id="default",
        idempotency_key="k",
        job_definition_id="d",
        definition_version=1,
        definition_digest="sha256:0",
        job_class="OBSERVABILITY_JOB",
        trigger_id="t",
        trigger_type="manual",
        trigger="{}",
        scope='{"tenant_id":"default"}',
        params='{"i":"1"}',
        config_snapshot_id="c",
        config_digest="sha256:1",
        status="SCHEDULED",
        attempt=0,
        max_attempts=3,
        priority="normal",
        priority_rank=2,
        queue="default",
        retry_policy="no_retry_v1",
        created_at=1_700_000_000_000_000,
        due_at=1_700_000_000_000_001,
        execution_timeout_us=1_500_000,
        lease_token=0,
        stop_requested=0,
    )
    return row


def test_run_from_row_sets_every_field_and_equals_a_constructed_run() -> None:
    run = codec.run_from_row(_row())
    assert set(run.__dict__) == {f.name for f in dataclasses.fields(JobRun)}
    rebuilt = JobRun(**{f.name: getattr(run, f.name) for f in dataclasses.fields(JobRun)})
    assert rebuilt == run
    assert run.params == {"i": "1"} and run.execution_timeout is not None
    assert run.execution_timeout.total_seconds() == 1.5


def test_run_from_values_reads_the_table_column_order() -> None:
    row = _row()
    values = [row[c.name] for c in job_runs.c]
    assert codec.run_from_values([c.name for c in job_runs.c], values) == codec.run_from_row(row)
    assert set(_RUN_INSERT_COLUMNS) <= set(row)


def test_loads_is_exact_where_orjson_is_not() -> None:
    # orjson reads integers beyond 64 bits as floats; the standard library keeps them exact.
    big = 123456789012345678901234567890
    assert codec.loads(codec.dumps({"order_id": big})) == {"order_id": big}
    assert codec.loads('{"n": 18446744073709551617}')["n"] == 2**64 + 1
    # Documents written with NaN by the standard library (older versions) stay readable.
    value = codec.loads('{"score": NaN}')
    assert value["score"] != value["score"]
    assert codec.loads('{"a": 1.5, "b": "x"}') == {"a": 1.5, "b": "x"}
