"""Prometheus instruments: this process's HTTP figures, and per-scrape run counts from the database."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobgate.service.engine import Engine

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
NO_TENANT = "-"  # requests refused before a token named a tenant


class HttpMetrics:
    """This process's request counts and latencies by tenant, route template (not the raw
    path, so ids do not grow the label set) and status. A scrape shows the caller's tenant's
    series only; an unknown method is counted as ``other``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "jobgate_http_requests_total",
            "HTTP requests served",
            ["tenant", "method", "route", "status"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "jobgate_http_request_seconds",
            "HTTP request latency",
            ["tenant", "method", "route"],
            registry=self.registry,
        )

    def observe(self, tenant: str | None, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        tenant = tenant or NO_TENANT
        self.requests.labels(tenant, method, route, str(status)).inc()
        self.seconds.labels(tenant, method, route).observe(seconds)

    def for_tenant(self, tenant_id: str) -> Collector:
        return _TenantSeries(self.registry, tenant_id)


class _TenantSeries(Collector):
    def __init__(self, registry: CollectorRegistry, tenant_id: str) -> None:
        self.registry = registry
        self.tenant_id = tenant_id

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples if s.labels.get("tenant") == self.tenant_id]
            yield kept


class TenantRuns(Collector):
    """Open runs by status and job class, the due queue and the outbox, for one tenant."""

    def __init__(self, engine: Engine, tenant_id: str) -> None:
        self.engine = engine
        self.tenant_id = tenant_id

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        now = engine.clock.now()
        with engine.store.read(tenant_id=self.tenant_id) as tx:
            counts = tx.runs_open_counts(self.tenant_id)
            held = tx.runs_held_counts(self.tenant_id)
            due, oldest = tx.runs_due_summary(self.tenant_id, now)
            outbox, _ = tx.outbox_summary(self.tenant_id)
        runs = GaugeMetricFamily("jobgate_runs_open", "Runs not yet terminal", labels=["tenant", "status", "job_class"])
        for (status, job_class), n in sorted(counts.items()):
            runs.add_metric([self.tenant_id, status, job_class], n)
        yield runs
        holds = GaugeMetricFamily(
            "jobgate_runs_held",
            "Runs a governance gate holds, by hold reason",
            labels=["tenant", "reason", "job_class"],
        )
        for (reason, job_class), n in sorted(held.items()):
            holds.add_metric([self.tenant_id, reason, job_class], n)
        yield holds
        depth = GaugeMetricFamily("jobgate_queue_due", "Runs due and waiting for a worker", labels=["tenant"])
        depth.add_metric([self.tenant_id], due)
        yield depth
        lag = GaugeMetricFamily(
            "jobgate_queue_oldest_due_seconds", "How long the oldest due run has waited", labels=["tenant"]
        )
        lag.add_metric([self.tenant_id], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
        yield lag
        backlog = GaugeMetricFamily("jobgate_outbox_backlog", "Events not yet delivered", labels=["tenant"])
        backlog.add_metric([self.tenant_id], outbox)
        yield backlog
