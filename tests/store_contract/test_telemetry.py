"""Telemetry rollups (``tx.telemetry``): one tenant's counts for one period, and the publications
of periods, on both backends.

The contract: a period's cohort is the tenant's runs created in ``[start, end)``, and of those
only what happened before ``end`` counts, so a closed period reads the same whenever it is read;
a period is published once per tenant (a second publication of it records nothing), and the
publications are read back newest period first, or the latest of one kind of period.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.store_contract.support import (
    T0,
    apply,
    claim,
    complete,
    completion,
    dead_letter,
    failure,
    get,
    make,
    running,
)

from jobgate.core.models import JobClass
from jobgate.core.records import BreachRecord, PeriodCounts, Publication, WorkflowRecord, WorkflowUpdate
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine

HOUR = timedelta(hours=1)


def test_period_counts_count_the_cohort_created_in_the_period(engine: Engine) -> None:
    now = engine.clock.now()
    start, end = now - HOUR, now + HOUR
    complete(engine)
    complete(engine, job_class=JobClass.DAL_ANCHOR_JOB)
    make(engine, job_class=JobClass.DAL_ANCHOR_JOB)
    (retried,) = running(engine)
    apply(engine, [failure(engine, retried)])
    (again,) = claim(engine, queues=[retried.queue], start_now=1, now=get(engine, retried.job_run_id).due_at)
    apply(engine, [failure(engine, again)])
    lettered = dead_letter(engine)
    make(engine, job_class=JobClass.REPLAY_JOB)  # open: in the replay backlog
    complete(engine, job_class=JobClass.REPLAY_JOB)  # finished: not
    make(engine, job_class=JobClass.REPLAY_JOB, at=start - HOUR)  # older, still open: in the backlog
    make(engine, tenant="tenant-b")
    breach = BreachRecord(
        "BR-1", "default", "run", lettered.job_run_id, "MAINTENANCE_JOB", "job-a", None, "sla_deadline", "breach",
        "sla-1h", now, now, "critical", False,
    )  # fmt: skip
    workflow = WorkflowRecord(
        "wf-1", "default", "key-1", "flow", 1, "sha256:f", "MAINTENANCE_JOB", RunStatus.RUNNING, "forward",
        {}, {}, {}, "snap-1", "sha256:c", None, now,
    )  # fmt: skip
    with engine.store.write() as tx:
        tx.sla.breach_insert(breach)
        tx.workflow_insert(workflow, [], [])
        ended = {"status": RunStatus.COMPLETED, "ended_at": now + timedelta(seconds=3)}
        tx.workflow_apply(WorkflowUpdate("wf-1", "default", 0, ended, [], []))
    with engine.store.read() as tx:
        counts = tx.telemetry.period_counts("default", start, end)
        assert tx.telemetry.period_counts("tenant-c", start, end) == PeriodCounts(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert counts == PeriodCounts(
        scheduled=7,
        completed=3,
        retries=2,
        dead_lettered=1,
        breached=1,
        dal_scheduled=2,
        dal_completed=1,
        workflows_finished=1,
        workflow_latency_us=3_000_000,
        replay_backlog=2,
    )


def test_a_closed_period_counts_only_what_happened_before_its_end(engine: Engine) -> None:
    start, end = T0, T0 + timedelta(seconds=1)
    (run,) = running(engine, at=T0)
    make(engine, at=end)  # created at the end: the next period's
    with engine.store.read() as tx:
        before = tx.telemetry.period_counts("default", start, end)
    assert apply(engine, [completion(engine, run)])  # completed now, long after the end
    with engine.store.read() as tx:
        after = tx.telemetry.period_counts("default", start, end)
    assert before == after
    assert (after.scheduled, after.completed) == (1, 0)


def _publication(period: str, start: datetime, end: datetime, tenant: str = "default", **kw: object) -> Publication:
    fields: dict[str, object] = {
        "figures": {"scheduled": 3}, "digest": f"sha256:{period}", "published_at": end, "job_run_id": None,
    }  # fmt: skip
    fields.update(kw)
    return Publication(tenant, period, start, end, sink="file", **fields)  # type: ignore[arg-type]


def test_a_period_is_published_once_per_tenant(engine: Engine) -> None:
    day = _publication("2024-03-04", T0, T0 + 24 * HOUR, job_run_id="TGJOBRUN-1")
    with engine.store.write() as tx:
        assert tx.telemetry.publication_put(day)
        assert not tx.telemetry.publication_put(_publication("2024-03-04", T0, T0 + 24 * HOUR, figures={"x": 1}))
        assert tx.telemetry.publication_put(_publication("2024-03-04", T0, T0 + 24 * HOUR, tenant="tenant-b"))
    with engine.store.read() as tx:
        assert tx.telemetry.publication_get("default", "2024-03-04") == day
        assert tx.telemetry.publication_get("default", "2024-03-05") is None
        assert tx.telemetry.publication_get("tenant-c", "2024-03-04") is None


def test_publications_are_listed_latest_period_first(engine: Engine) -> None:
    month = _publication("2024-03", T0 - 3 * 24 * HOUR, T0 + 27 * 24 * HOUR)
    days = [_publication(f"2024-03-0{d}", T0 + (d - 4) * 24 * HOUR, T0 + (d - 3) * 24 * HOUR) for d in (4, 5, 6)]
    quarter = _publication("2024-Q1", T0 - 63 * 24 * HOUR, T0 + 27 * 24 * HOUR)
    with engine.store.write() as tx:
        for p in (*days, month, quarter, _publication("2024-03-09", T0, T0 + HOUR, tenant="tenant-b")):
            tx.telemetry.publication_put(p)
    with engine.store.read() as tx:
        listed = tx.telemetry.publications_list("default")
        assert [p.period for p in tx.telemetry.publications_list("default", limit=2)] == ["2024-03-06", "2024-03-05"]
        assert tx.telemetry.publications_list("tenant-c") == []
        assert tx.telemetry.publication_last("default", "day") == days[-1]
        assert tx.telemetry.publication_last("default", "month") == month
        assert tx.telemetry.publication_last("default", "quarter") == quarter
        assert tx.telemetry.publication_last("tenant-c", "day") is None
    # Latest period first: by the period's start.
    assert [p.period for p in listed] == ["2024-03-06", "2024-03-05", "2024-03-04", "2024-03", "2024-Q1"]
