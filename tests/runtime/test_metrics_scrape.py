"""The seed 000 §50 metrics: runs made through the engine and executed by a real worker, then
a scrape whose every figure is checked against what was done, and against the transitions
themselves (the scrape counts starts and retries from the runs' columns)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from runtime_support import running_worker, scalar, wait_all, wait_status
from sqlalchemy import text

from helpers import config_document, define
from jobgate.config import build_config
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store import codec
from jobgate.store.sqlstore import Store
from jobgate.store.tables import sla_breaches, workflow_runs
from jobgate.telemetry.metrics import CATALOGUE, exposition
from jobgate.testing import connection

SEED_NAMES = {
    "tg_scheduler_job_created_total",
    "tg_scheduler_job_started_total",
    "tg_scheduler_job_completed_total",
    "tg_scheduler_job_failed_total",
    "tg_scheduler_job_retry_total",
    "tg_scheduler_job_deadletter_total",
    "tg_scheduler_queue_depth",
    "tg_scheduler_workflow_latency_ms",
    "tg_scheduler_sla_breach_total",
    "tg_scheduler_safe_mode_job_total",
}
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture
def engine(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    doc = config_document(tmp_path)
    retry = {"strategy": "fixed_delay", "initial_delay_seconds": 0, "max_delay_seconds": 0}
    doc["retry_policies"] += [
        # one attempt, then FAILED (no dead letter)
        {**retry, "retry_policy_id": "test_fail_v1", "max_attempts": 1, "dead_letter_after_max_attempts": False},
        # a retry an hour away: the run waits in RETRY_WAIT
        {**retry, "retry_policy_id": "test_later_v1", "max_attempts": 3, "initial_delay_seconds": 3600,
         "max_delay_seconds": 3600},
    ]  # fmt: skip
    store = Store(database_url)
    yield Engine(store, build_config(doc, base_dir=tmp_path, path=None))
    store.dispose()


def scrape(engine: Engine, tenant: str | None) -> tuple[Samples, dict[str, str]]:
    """Every sample by name and sorted labels, and each family's type."""
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(exposition(engine, tenant).decode()):
        types[family.name] = family.type
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples, types


def by_class(samples: Samples, name: str, tenant: str = "acme") -> dict[str, float]:
    out = {}
    for labels, value in samples.get(name, {}).items():
        d = dict(labels)
        if d.get("tenant") == tenant and "le" not in d:
            out[d["job_class"]] = value
    return out


def submit(engine: Engine, job: str, tenant: str = "acme", **params: str) -> str:
    """A new manual run (its own request id), whatever was submitted before."""
    request = SubmitRequest(
        job,
        params=params,
        scope=Scope(tenant_id=tenant),
        requested_by="ops",
        reason="test",
        request_id=uuid.uuid4().hex,
    )
    return engine.submit(request, actor="ops").run.job_run_id


def job(engine: Engine, job_class: str, handler: str, tenant: str = "acme", **fields: Any) -> str:
    return define(engine, job_class=job_class, handler=f"engine_handlers:{handler}", tenant_id=tenant, **fields)


def test_a_scrape_counts_what_the_runs_did(engine: Engine) -> None:
    ok = job(engine, "MAINTENANCE_JOB", "succeed")
    flaky = job(
        engine,
        "REPLAY_JOB",
        "fail_until",
        retry_policy="test_fixed_v1",
        params=[{"name": "ok_on", "pattern": "[0-9]"}],
    )
    bad = job(engine, "DAL_ANCHOR_JOB", "fail_final")  # non-retryable: dead-lettered at once
    broken = job(engine, "FEDERATION_SYNC_JOB", "fail_retryable", retry_policy="test_fail_v1")
    patient = job(engine, "AUDIT_INTEGRITY_JOB", "fail_retryable", retry_policy="test_later_v1")
    safe = job(engine, "SAFE_MODE_JOB", "succeed")
    slow = job(engine, "OBSERVABILITY_JOB", "sleep", params=[{"name": "seconds", "pattern": "[0-9.]{1,4}"}])
    parked = job(engine, "MAINTENANCE_JOB", "succeed", queue="parked")  # no worker serves it
    elsewhere = job(engine, "MAINTENANCE_JOB", "succeed", tenant="other")

    with running_worker(engine, lease=timedelta(seconds=1.5)) as worker:
        done = [submit(engine, ok) for i in range(3)]
        done += [submit(engine, flaky, ok_on="2") for i in range(2)]
        done += [submit(engine, safe), submit(engine, slow, seconds="1.2"), submit(engine, elsewhere, "other")]
        lettered, failed = submit(engine, bad), submit(engine, broken)
        waiting = submit(engine, patient)
        parked_runs = [submit(engine, parked) for i in range(2)]
        wait_all(engine, done, RunStatus.COMPLETED)
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
        wait_status(engine, failed, RunStatus.FAILED)
        # Retried once, then cancelled while waiting: attempt 1, one RETRY_WAIT, never completed.
        wait_status(engine, waiting, RunStatus.RETRY_WAIT)
        control.cancel_run(engine, waiting, actor="ops", tenant_id="acme")
        worker_id = worker.worker_id
        live, _ = scrape(engine, "acme")  # lease renewals are the live workers'
    _record_sla_and_workflows(engine)

    samples, types = scrape(engine, "acme")
    assert SEED_NAMES | {"tg_scheduler_claim_latency_ms", "tg_scheduler_lease_renewals_total"} <= {
        f.name for f in CATALOGUE
    }
    for f in CATALOGUE:  # every family is exposed with its declared type and labels
        # (the text format has no gauge histogram type: its buckets are typed histogram)
        assert types[f.name.removesuffix("_total")] == ("histogram" if f.kind == "gaugehistogram" else f.kind)
        sample = f.name + ("_bucket" if "histogram" in f.kind else "")
        for labels in {**samples.get(sample, {}), **live.get(sample, {})}:
            assert {k for k, _ in labels} - {"le"} == set(f.labels), (f.name, labels)

    assert by_class(samples, "tg_scheduler_job_created_total") == {
        "MAINTENANCE_JOB": 5,
        "REPLAY_JOB": 2,
        "DAL_ANCHOR_JOB": 1,
        "FEDERATION_SYNC_JOB": 1,
        "AUDIT_INTEGRITY_JOB": 1,
        "SAFE_MODE_JOB": 1,
        "OBSERVABILITY_JOB": 1,
    }
    zero = dict.fromkeys(by_class(samples, "tg_scheduler_job_created_total"), 0.0)
    assert by_class(samples, "tg_scheduler_job_started_total") == {
        **zero,
        "MAINTENANCE_JOB": 3,
        "REPLAY_JOB": 4,
        "DAL_ANCHOR_JOB": 1,
        "FEDERATION_SYNC_JOB": 1,
        "AUDIT_INTEGRITY_JOB": 1,
        "SAFE_MODE_JOB": 1,
        "OBSERVABILITY_JOB": 1,
    }
    assert by_class(samples, "tg_scheduler_job_completed_total") == {
        **zero,
        "MAINTENANCE_JOB": 3,
        "REPLAY_JOB": 2,
        "SAFE_MODE_JOB": 1,
        "OBSERVABILITY_JOB": 1,
    }
    assert by_class(samples, "tg_scheduler_job_failed_total") == {**zero, "FEDERATION_SYNC_JOB": 1}
    assert by_class(samples, "tg_scheduler_job_retry_total") == {**zero, "REPLAY_JOB": 2, "AUDIT_INTEGRITY_JOB": 1}
    assert by_class(samples, "tg_scheduler_job_deadletter_total") == {**zero, "DAL_ANCHOR_JOB": 1}
    assert by_class(samples, "tg_scheduler_safe_mode_job_total") == {"SAFE_MODE_JOB": 1}
    assert by_class(samples, "tg_scheduler_sla_breach_total") == {**zero, "REPLAY_JOB": 2}
    depth = {dict(k)["queue"]: v for k, v in samples["tg_scheduler_queue_depth"].items() if v}
    assert depth == {"parked": 2}

    # The run counters agree with the transitions they summarise.
    for status, name in (("RUNNING", "started"), ("RETRY_WAIT", "retry")):
        counted = {
            c: float(n)
            for c, n in _rows(
                engine,
                "SELECT r.job_class, count(*) FROM run_transitions t JOIN job_runs r ON r.job_run_id = t.job_run_id "
                "WHERE r.tenant_id = 'acme' AND t.to_status = :s GROUP BY r.job_class",
                s=status,
            )
        }
        assert {c: n for c, n in by_class(samples, f"tg_scheduler_job_{name}_total").items() if n} == counted

    # Claim latency: every run claimed for its current due time (not the cancelled retry).
    claims = {dict(k)["job_class"]: v for k, v in samples["tg_scheduler_claim_latency_ms_gcount"].items()}
    assert claims == {
        "MAINTENANCE_JOB": 3,
        "REPLAY_JOB": 2,
        "DAL_ANCHOR_JOB": 1,
        "FEDERATION_SYNC_JOB": 1,
        "SAFE_MODE_JOB": 1,
        "OBSERVABILITY_JOB": 1,
    }
    expected: dict[str, float] = {}
    for job_class, waited in _rows(
        engine,
        "SELECT r.job_class, max(t.at) - r.due_at FROM run_transitions t JOIN job_runs r "
        "ON r.job_run_id = t.job_run_id WHERE r.tenant_id = 'acme' AND t.to_status = 'DISPATCHED' "
        "GROUP BY r.job_run_id, r.job_class, r.due_at",
    ):
        if waited >= 0:
            expected[job_class] = expected.get(job_class, 0.0) + waited / 1000
    sums = {dict(k)["job_class"]: v for k, v in samples["tg_scheduler_claim_latency_ms_gsum"].items()}
    assert sums == pytest.approx(expected)
    inf = (("job_class", "MAINTENANCE_JOB"), ("le", "+Inf"), ("tenant", "acme"))
    assert samples["tg_scheduler_claim_latency_ms_bucket"][inf] == 3

    # Workflows: two finished (300 ms and 4 s), one still running.
    wf = samples["tg_scheduler_workflow_latency_ms_bucket"]
    key = (("job_class", "REPLAY_JOB"), ("tenant", "acme"))
    assert wf[(key[0], ("le", "500.0"), key[1])] == 1
    assert wf[(key[0], ("le", "5000.0"), key[1])] == 2
    assert wf[(key[0], ("le", "+Inf"), key[1])] == 2
    assert samples["tg_scheduler_workflow_latency_ms_sum"][key] == 4300.0
    assert samples["tg_scheduler_workflow_latency_ms_count"][key] == 2

    # Lease renewals: the slow run's lease was renewed, counted where it was renewed, shown
    # while the worker lives. Its series ends when it stops (workers rows are kept for good).
    renewals = live["tg_scheduler_lease_renewals_total"][(("worker", worker_id),)]
    assert renewals >= 1
    assert renewals == scalar(engine, "SELECT lease_renewals FROM workers WHERE worker_id = :w", w=worker_id)
    assert samples.get("tg_scheduler_lease_renewals_total", {}) == {}

    # Tenants: the API's scrape is one tenant's; the CLI's has both.
    assert all(dict(k).get("tenant") in (None, "acme") for series in samples.values() for k in series)
    everyone, _ = scrape(engine, None)
    assert by_class(everyone, "tg_scheduler_job_completed_total", "other") == {"MAINTENANCE_JOB": 1}
    assert by_class(everyone, "tg_scheduler_job_created_total") == by_class(samples, "tg_scheduler_job_created_total")
    assert len(parked_runs) == 2


def _record_sla_and_workflows(engine: Engine) -> None:
    """Rows as the SLA monitor and the workflow engine record them (their own tests cover
    how): two breaches and a reminder; two finished workflows and a running one."""
    now = codec.to_us(engine.clock.now())
    breach = {
        "tenant_id": "acme",
        "subject_kind": "run",
        "job_class": "REPLAY_JOB",
        "job_definition_id": "flow",
        "kind": "sla_deadline",
        "sla_policy": "p",
        "deadline": now,
        "detected_at": now,
        "severity": "warning",
        "requires_escalation": False,
    }
    flow = {
        "tenant_id": "acme",
        "job_definition_id": "flow",
        "definition_version": 1,
        "definition_digest": "d",
        "job_class": "REPLAY_JOB",
        "phase": "forward",
        "params": "{}",
        "scope": "{}",
        "trigger": "{}",
        "config_snapshot_id": "s",
        "config_digest": "d",
        "created_at": now,
    }
    with engine.store.write() as tx:
        for i, phase in enumerate(("breach", "breach", "reminder")):
            row = {**breach, "sla_breach_id": uuid.uuid4().hex, "subject_id": f"run-{i}", "phase": phase}
            connection(tx).execute(sla_breaches.insert().values(**row))
        for took_ms in (300, 4000, None):
            key = f"TGWF-{uuid.uuid4().hex[:12]}"
            status = "RUNNING" if took_ms is None else "COMPLETED"
            ended = None if took_ms is None else now + took_ms * 1000
            row = {**flow, "workflow_run_id": key, "idempotency_key": key, "status": status, "ended_at": ended}
            connection(tx).execute(workflow_runs.insert().values(**row))


def _rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    with engine.store.read() as tx:
        return list(connection(tx).execute(text(sql), params).all())


def test_an_empty_database_exposes_every_family(engine: Engine) -> None:
    text_ = exposition(engine, "acme").decode()
    for f in CATALOGUE:
        assert f"# TYPE {f.name} " in text_
