"""The seed 000 §50 metrics, computed from the database at scrape time.

Every node of a cluster answers a scrape with the same numbers, because they are read from
the database rather than counted in the process that happened to do the work. A scrape runs
a few grouped queries (``store.sql.metrics``, where what each figure counts is decided) in one
read transaction, for one tenant (the API: the caller's) or for all (``jobgate metrics``).

``CATALOGUE`` lists every family with its type, labels and meaning; the README and the
catalogue in ``docs/`` are written from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from jobgate.core.models import JobClass
from jobgate.core.records import Distribution, Group, RunCounts
from jobgate.service.cluster import STALE_AFTER
from jobgate.service.engine import Engine

# Histogram bounds in milliseconds.
CLAIM_LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000)
WORKFLOW_LATENCY_BUCKETS_MS = (
    100, 500, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000, 14_400_000, 86_400_000,
)  # fmt: skip
# ``job_class`` is the class a run was created with: a class declared in jobgate.yaml is its own
# label value (not the class it gates as), and stays one after the class leaves the configuration.
LABELS = ("tenant", "job_class")
CLAIM_WINDOW = timedelta(hours=1)  # claim latency: the runs created this recently


@dataclass(frozen=True)
class Family:
    name: str  # as exposed (counters with their ``_total``)
    kind: str  # counter | gauge | histogram | gaugehistogram (a current distribution)
    labels: tuple[str, ...]
    help: str


CATALOGUE = (
    Family("tg_scheduler_job_created_total", "counter", LABELS, "Runs created."),
    Family("tg_scheduler_job_started_total", "counter", LABELS, "Attempts started (transitions to RUNNING)."),
    Family("tg_scheduler_job_completed_total", "counter", LABELS, "Runs that ended COMPLETED."),
    Family(
        "tg_scheduler_job_failed_total",
        "counter",
        LABELS,
        "Runs that ended FAILED (dead letters and escalations are counted apart).",
    ),
    Family("tg_scheduler_job_retry_total", "counter", LABELS, "Retries scheduled (transitions to RETRY_WAIT)."),
    Family("tg_scheduler_job_deadletter_total", "counter", LABELS, "Dead letters recorded (each dead-lettering)."),
    Family(
        "tg_scheduler_queue_depth",
        "gauge",
        (*LABELS, "queue"),
        "Runs waiting for a worker: CREATED, SCHEDULED, DISPATCHED, RETRY_WAIT (due or not).",
    ),
    Family(
        "tg_scheduler_workflow_latency_ms",
        "histogram",
        LABELS,
        "Finished workflows, ended_at - created_at, in milliseconds.",
    ),
    Family("tg_scheduler_sla_breach_total", "counter", LABELS, "SLA breaches recorded (reminders excluded)."),
    Family("tg_scheduler_safe_mode_job_total", "counter", LABELS, "SAFE_MODE_JOB runs created."),
    Family(
        "tg_scheduler_claim_latency_ms",
        "gaugehistogram",
        LABELS,
        "Runs created in the last hour: last claim minus the due time it answered, in milliseconds.",
    ),
    Family("tg_scheduler_lease_renewals_total", "counter", ("worker",), "Run leases renewed, by live worker."),
)
_HELP = {f.name: f.help for f in CATALOGUE}


@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape read, in one transaction."""

    runs: list[RunCounts]
    dead_letters: dict[Group, int]
    breaches: dict[Group, int]
    workflow_latency: list[Distribution]
    claim_latency: list[Distribution]
    lease_renewals: dict[str, int]


def read(engine: Engine, tenant_id: str | None) -> Snapshot:
    now = engine.clock.now()
    since = now - CLAIM_WINDOW
    with engine.store.read(tenant_id=tenant_id) as tx:
        m = tx.metrics
        m.without_jit()
        return Snapshot(
            runs=m.run_counts(tenant_id),
            dead_letters=m.dead_letter_counts(tenant_id),
            breaches=m.sla_breach_counts(tenant_id),
            workflow_latency=m.workflow_latency(tenant_id, WORKFLOW_LATENCY_BUCKETS_MS),
            claim_latency=m.claim_latency(tenant_id, since, CLAIM_LATENCY_BUCKETS_MS),
            lease_renewals=m.lease_renewals(now - STALE_AFTER),  # live workers only, as /api/v1/workers
        )


def families(s: Snapshot) -> Iterator[Metric]:
    """The metric families of one snapshot (pure). Every run counter has a series for every
    (tenant, job class) seen in any of them, zeros included, so a rate never starts from a gap."""
    by_group: dict[Group, list[RunCounts]] = {}
    for row in s.runs:
        by_group.setdefault((row.tenant_id, row.job_class), []).append(row)
    groups = sorted(set(by_group) | set(s.dead_letters) | set(s.breaches))

    def total(field: str) -> dict[Group, int]:
        return {g: sum(getattr(r, field) for r in rows) for g, rows in by_group.items()}

    sources: list[tuple[str, dict[Group, int]]] = [
        ("tg_scheduler_job_created", total("created")),
        ("tg_scheduler_job_started", total("started")),
        ("tg_scheduler_job_completed", total("completed")),
        ("tg_scheduler_job_failed", total("failed")),
        ("tg_scheduler_job_retry", total("retries")),
        ("tg_scheduler_job_deadletter", s.dead_letters),
    ]
    for name, values in sources:
        yield _counter(name, list(LABELS), ((list(g), values.get(g, 0)) for g in groups))
    depth = GaugeMetricFamily("tg_scheduler_queue_depth", _HELP["tg_scheduler_queue_depth"], labels=[*LABELS, "queue"])
    for row in sorted(s.runs, key=lambda r: (r.tenant_id, r.job_class, r.queue)):
        depth.add_metric([row.tenant_id, row.job_class, row.queue], row.pending)
    yield depth
    yield _histogram("tg_scheduler_workflow_latency_ms", WORKFLOW_LATENCY_BUCKETS_MS, s.workflow_latency)
    yield _counter("tg_scheduler_sla_breach", list(LABELS), ((list(g), s.breaches.get(g, 0)) for g in groups))
    created = total("created")
    safe = JobClass.SAFE_MODE_JOB.value
    tenants = sorted({tenant for tenant, _ in groups})
    yield _counter(
        "tg_scheduler_safe_mode_job", list(LABELS), (([t, safe], created.get((t, safe), 0)) for t in tenants)
    )
    yield _histogram("tg_scheduler_claim_latency_ms", CLAIM_LATENCY_BUCKETS_MS, s.claim_latency, gauge=True)
    yield _counter("tg_scheduler_lease_renewals", ["worker"], (([w], n) for w, n in sorted(s.lease_renewals.items())))


def _counter(name: str, labels: list[str], samples: Iterable[tuple[list[str], int]]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, _HELP[f"{name}_total"], labels=labels)
    for values, n in samples:
        family.add_metric(values, n)
    return family


def _histogram(name: str, bounds: Sequence[float], rows: Sequence[Distribution], *, gauge: bool = False) -> Metric:
    """A cumulative histogram, or with ``gauge`` a gauge histogram: the distribution of what is
    in a window now, whose buckets may shrink (read them directly, not through ``rate()``)."""
    family: HistogramMetricFamily | GaugeHistogramMetricFamily
    if gauge:
        family = GaugeHistogramMetricFamily(name, _HELP[name], labels=list(LABELS))
    else:
        family = HistogramMetricFamily(name, _HELP[name], labels=list(LABELS))
    for d in sorted(rows, key=lambda r: (r.tenant_id, r.job_class)):
        buckets: list[tuple[str, float]] = [(_bound(b), float(n)) for b, n in zip(bounds, d.cumulative, strict=True)]
        buckets.append(("+Inf", float(d.count)))
        family.add_metric([d.tenant_id, d.job_class], buckets, d.sum_ms)
    return family


def _bound(b: float) -> str:
    return str(float(b))


class SchedulerMetrics(Collector):
    """The seed §50 set for one tenant (``tenant_id``) or every tenant (``None``)."""

    def __init__(self, engine: Engine, tenant_id: str | None) -> None:
        self.engine = engine
        self.tenant_id = tenant_id

    def collect(self) -> Iterator[Metric]:
        yield from families(read(self.engine, self.tenant_id))


def exposition(engine: Engine, tenant_id: str | None) -> bytes:
    """The Prometheus text exposition of the seed §50 set (``jobgate metrics``)."""
    registry = CollectorRegistry()
    registry.register(SchedulerMetrics(engine, tenant_id))
    return generate_latest(registry)
