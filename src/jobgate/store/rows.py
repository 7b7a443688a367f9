"""What a transaction reads and writes beyond runs, by domain: anchors, telemetry, metrics, the
SLA monitor's rows, sealed records for export.

Each class is bound to the transaction's connection and reached through ``StoreTx``
(``tx.anchors``, ``tx.telemetry``, ``tx.metrics``, ``tx.sla``, ``tx.evidence``): the store stays
the one door to the database without a single class of two hundred methods, and nothing outside
``store`` holds a connection.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from jobgate.core.audit import AuditEntry
from jobgate.core.models import JobRun
from jobgate.core.records import (
    Anchor,
    BatchEntry,
    BreachRecord,
    DefinitionPolicies,
    Distribution,
    Group,
    Left,
    PeriodCounts,
    Publication,
    RunCounts,
    WorkflowSubject,
)
from jobgate.core.sla import SlaGroups
from jobgate.store.sql import governance, metrics, seals, sla, telemetry

SLA_BREACH = "sla_breach"  # its kind of sealed record (``core.seals.SPECS``)


class AnchorRows:
    """A transaction's anchors, and the audit entries they cover (``StoreTx.anchors``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def head_lock(self, tenant_id: str) -> None:
        """Hold the tenant's chain head until the transaction ends (PostgreSQL; SQLite's single
        writer holds everything already): appends to the chain wait meanwhile."""
        governance.audit_head_lock(self._conn, tenant_id, lock_rows=self._conn.dialect.name == "postgresql")

    def of(self, tenant_id: str) -> list[Anchor]:
        """The tenant's anchors, oldest first."""
        return governance.anchors_list(self._conn, tenant_id)

    def last(self, tenant_id: str, mode: str | None = None) -> Anchor | None:
        return governance.anchor_last(self._conn, tenant_id, mode)

    def put(self, a: Anchor) -> bool:
        """Insert; False when that position is taken (another anchorer won: the caller retries)."""
        return governance.anchor_put(self._conn, a)

    def signers(self) -> dict[str, int]:
        """How many anchors (every tenant's) each key id signed."""
        return governance.anchor_signers(self._conn)

    def entries(self, tenant_id: str, first_seq: int, last_seq: int) -> list[AuditEntry]:
        return governance.audit_range(self._conn, tenant_id, first_seq, last_seq)

    def first_after(self, tenant_id: str, after_seq: int) -> AuditEntry | None:
        return governance.audit_first_after(self._conn, tenant_id, after_seq)

    def last_before(self, tenant_id: str, after_seq: int, before: datetime) -> int | None:
        """The highest position after ``after_seq`` of an entry written before ``before``."""
        return governance.audit_last_before(self._conn, tenant_id, after_seq, before)


class TelemetryRows:
    """A transaction's telemetry periods and their publications (``StoreTx.telemetry``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def period_counts(self, tenant_id: str, start: datetime, end: datetime) -> PeriodCounts:
        return telemetry.period_counts(self._conn, tenant_id, start, end)

    def publication_put(self, p: Publication) -> bool:
        """Record the publication of (tenant, period) unless one exists; True if this call made it."""
        return telemetry.publication_put(self._conn, p)

    def publication_get(self, tenant_id: str, period: str) -> Publication | None:
        return telemetry.publication_get(self._conn, tenant_id, period)

    def publications_list(self, tenant_id: str, limit: int = 100) -> list[Publication]:
        """The tenant's publications, latest period first."""
        return telemetry.publications_list(self._conn, tenant_id, limit)

    def publication_last(self, tenant_id: str, kind: str) -> Publication | None:
        """The tenant's latest publication of one period kind (``day``, ``month``, ``quarter``),
        told apart by the shape of the name: ``2026-11-29``, ``2026-11``, ``2026-Q4``."""
        return telemetry.publication_last(self._conn, tenant_id, kind)


class MetricRows:
    """A transaction's grouped counts behind ``/metrics`` (``StoreTx.metrics``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def without_jit(self) -> None:
        """PostgreSQL only: no JIT compilation for this transaction's reads. The planner prices a
        scrape's grouped reads (a probe per candidate run) above its JIT thresholds, and
        compiling then costs far more than running them (measured: 1.3 s of JIT for a 60 ms
        query)."""
        return metrics.without_jit(self._conn)

    def run_counts(self, tenant_id: str | None) -> list[RunCounts]:
        """Created, started, completed, failed, retried and pending runs: one pass over the runs,
        with the transitions read (through their run index) only for runs that may have retried."""
        return metrics.run_counts(self._conn, tenant_id)

    def dead_letter_counts(self, tenant_id: str | None) -> dict[Group, int]:
        """Dead letters recorded (one per dead-lettering: a run requeued and dead-lettered again
        counts twice)."""
        return metrics.dead_letter_counts(self._conn, tenant_id)

    def sla_breach_counts(self, tenant_id: str | None) -> dict[Group, int]:
        """SLA breaches (not reminders) of runs and workflows."""
        return metrics.sla_breach_counts(self._conn, tenant_id)

    def workflow_latency(self, tenant_id: str | None, bounds_ms: Sequence[float]) -> list[Distribution]:
        """Finished workflows' ``ended_at - created_at``."""
        return metrics.workflow_latency(self._conn, tenant_id, bounds_ms)

    def claim_latency(self, tenant_id: str | None, since: datetime, bounds_ms: Sequence[float]) -> list[Distribution]:
        """Runs created since ``since``: each one's last claim minus the due time it answered."""
        return metrics.claim_latency(self._conn, tenant_id, since, bounds_ms)

    def lease_renewals(self, alive_since: datetime) -> dict[str, int]:
        """Run leases each live worker has renewed (workers serve every tenant): those not stopped
        that heartbeat at or after ``alive_since``. A worker's row outlives its process, and one
        series per process ever started would grow without bound; a stopped worker's series
        ends."""
        return metrics.lease_renewals(self._conn, alive_since)


class SlaRows:
    """A transaction's the SLA monitor's reads and writes (``StoreTx.sla``). Every reminder
    and breach recorded, and every escalation marked, is sealed in the same transaction
    (``reseal``: ``StoreTx``'s), as every record an auditor reads is."""

    def __init__(self, conn: Connection, reseal: Callable[..., None]) -> None:
        self._conn = conn
        self._reseal = reseal

    def definition_keys(self) -> list[tuple[str, str, int]]:
        """Every stored definition version, by key (an index-only read)."""
        return sla.definition_keys(self._conn)

    def definition_policies(self, keys: Sequence[tuple[str, str, int]]) -> list[DefinitionPolicies]:
        """The SLA and timeout policy names of these versions, from their stored content."""
        return sla.definition_policies(self._conn, keys)

    def open_runs_due(
        self, *, waiting: bool, now: datetime, sla_groups: SlaGroups, after: tuple[int, str] | None, limit: int
    ) -> list[JobRun]:
        """Open runs that may have a deadline behind them, oldest first, after the page key
        ``after`` (created_at µs, run id). ``waiting``: claimable runs (queue timeout, SLA);
        otherwise leased ones (execution timeout from the first start, which is never later than
        the current attempt's, and SLA). Each arm walks its partial index of open rows only."""
        return sla.open_runs_due(self._conn, waiting=waiting, now=now, sla_groups=sla_groups, after=after, limit=limit)

    def attempt_starts(self, keys: Collection[tuple[str, int]]) -> dict[tuple[str, int], datetime]:
        """When each (run, attempt) started: its transition into RUNNING (the run's index)."""
        return sla.attempt_starts(self._conn, keys)

    def open_workflows_due(
        self, *, sla_groups: SlaGroups, after: tuple[int, str] | None, limit: int
    ) -> list[WorkflowSubject]:
        """Active workflow runs old enough for their policy's earliest reminder or deadline."""
        return sla.open_workflows_due(self._conn, sla_groups=sla_groups, after=after, limit=limit)

    def max_id(self, workflows: bool) -> int:
        return sla.max_id(self._conn, workflows)

    def contiguous_through(self, *, workflows: bool, after: int, upto: int) -> int:
        """The highest id ``h`` in [after, upto] such that every id in (after, h] is visible now."""
        return sla.contiguous_through(self._conn, workflows=workflows, after=after, upto=upto)

    def runs_left(self, *, after: int, upto: int, sla_definitions: Sequence[str]) -> list[tuple[Left, JobRun]]:
        """Transitions in (after, upto] that ended an attempt, a wait or the run itself, of runs
        that can have a deadline at all (a timeout, or a definition with an SLA policy)."""
        return sla.runs_left(self._conn, after=after, upto=upto, sla_definitions=sla_definitions)

    def workflows_left(
        self, *, after: int, upto: int, sla_definitions: Sequence[str]
    ) -> list[tuple[Left, WorkflowSubject]]:
        """Workflow transitions in (after, upto] that ended the workflow itself (not a step)."""
        return sla.workflows_left(self._conn, after=after, upto=upto, sla_definitions=sla_definitions)

    def cursor_get(self, name: str) -> int | None:
        return sla.cursor_get(self._conn, name)

    def mark_get(self, name: str) -> tuple[int, datetime] | None:
        """A value recorded with the instant it was recorded at (an ``outbox_cursors`` row)."""
        return sla.mark_get(self._conn, name)

    def mark_put(self, name: str, value: int, now: datetime) -> None:
        """Record ``value`` as of ``now``, replacing what the row held (moving either way)."""
        return sla.mark_put(self._conn, name, value, now)

    def cursor_put(self, name: str, value: int, now: datetime) -> None:
        """Move the named cursor forward (never back: a slower monitor cannot undo a faster one)."""
        return sla.cursor_put(self._conn, name, value, now)

    def breaches_insert(self, records: Sequence[BreachRecord]) -> set[str]:
        """Record each of ``records`` unless its (tenant, subject, kind, phase) is recorded
        already; the ids this call recorded. Concurrent monitors: PostgreSQL makes the second
        wait for the first's commit and then do nothing; SQLite has one writer at a time."""
        made = sla.breaches_insert(self._conn, records)
        for b in records:
            if b.sla_breach_id in made:
                self._reseal(SLA_BREACH, b.tenant_id, sla_breach_id=b.sla_breach_id)
        return made

    def breach_insert(self, b: BreachRecord) -> bool:
        """``breaches_insert`` of one record: True if this call recorded it."""
        return bool(self.breaches_insert([b]))

    def breaches_of(self, subjects: Collection[tuple[str, str]]) -> dict[tuple[str, str], list[BreachRecord]]:
        """The records of these (tenant, subject) pairs (the unique index's prefix)."""
        return sla.breaches_of(self._conn, subjects)

    def breaches_mark_escalated(self, tenant_id: str, subject_id: str) -> None:
        sla.breaches_mark_escalated(self._conn, tenant_id, subject_id)
        self._reseal(SLA_BREACH, tenant_id, subject_id=subject_id)

    def breaches_list(
        self,
        tenant_id: str,
        *,
        phase: str | None = None,
        kind: str | None = None,
        subject_id: str | None = None,
        job_definition_ids: Sequence[str] | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[BreachRecord]:
        """A tenant's records, newest first; ``before`` (detected_at, id) of the last row seen
        pages on."""
        return sla.breaches_list(
            self._conn,
            tenant_id,
            phase=phase,
            kind=kind,
            subject_id=subject_id,
            job_definition_ids=job_definition_ids,
            before=before,
            limit=limit,
        )

    def workflow_escalate(
        self, w: WorkflowSubject, *, now: datetime, actor: str, error_code: str, detail: dict[str, Any]
    ) -> bool:
        """ESCALATED by compare-and-set on ``version`` (and the status the monitor saw), with the
        workflow's own transition (``step_id`` NULL, the next ``seq``); False: it moved
        meanwhile."""
        return sla.workflow_escalate(self._conn, w, now=now, actor=actor, error_code=error_code, detail=detail)


class EvidenceRows:
    """A transaction's sealed records as an export packs them (``StoreTx.evidence``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def batch_entries(self, tenant_id: str) -> list[BatchEntry]:
        return seals.batch_entries(self._conn, tenant_id)

    def raw_runs(self, job_run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Each run as its seal covers it: the sealed columns of its row, its transitions in order
        and its dead letters (what ``core.seals.run_parts`` takes), in the order asked."""
        return seals.raw_runs(self._conn, job_run_ids)

    def raw_workflow(self, workflow_run_id: str) -> dict[str, Any] | None:
        return seals.raw_workflow(self._conn, workflow_run_id)

    def raw_rows(self, kind: str, tenant_id: str, match: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The sealed columns of the single-row records of ``kind`` that ``match`` names."""
        return seals.raw_rows(self._conn, kind, tenant_id, match)

    def seal_proofs(self, tenant_id: str, records: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """The latest seal of each (kind, record id), with its Merkle proof in its batch (when
        chained): what ties a record in an export to the ``records.sealed`` entry, and so to the
        anchors."""
        return seals.seal_proofs(self._conn, tenant_id, records)
