"""The store: connections, transactions and migrations around the SQL modules in ``sql/``.

One implementation serves SQLite and PostgreSQL; dialect differences are named capability
flags (``skip_locked``) and the connection set-up below, not ``if dialect`` branches spread
through the queries.

SQLite: WAL, ``synchronous=FULL`` by default (a committed run survives power loss), a busy
timeout, and every write transaction opened with ``BEGIN IMMEDIATE`` so two writers queue
for the lock at the start instead of failing with "database is locked" half-way through.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from jobgate.clock import Clock, DatabaseClock, SystemClock
from jobgate.core.audit import ACTING, AuditEntry, AuditEvent, attributed
from jobgate.core.errors import ConfigurationError
from jobgate.core.events import Event
from jobgate.core.models import (
    Attempt,
    ConfigSnapshot,
    DeadLetter,
    DefinitionStatus,
    JobRun,
    OutboxEvent,
    Transition,
)
from jobgate.core.records import (
    Approval,
    AuditFilter,
    Batch,
    LockInfo,
    RecordsReport,
    RunRequest,
    SafeModePeriod,
    StepRecord,
    StoredToken,
    WorkflowRecord,
    WorkflowTransition,
    WorkflowUpdate,
)
from jobgate.core.states import RunStatus
from jobgate.core.transitions import RunChange
from jobgate.scheduling.model import Schedule
from jobgate.scheduling.plan import Miss
from jobgate.scheduling.records import RecordedMiss, ScheduleChange, StoredSchedule
from jobgate.store import codec, rows
from jobgate.store.base import (
    ANY_RUN,
    ClaimedRuns,
    DefinitionPut,
    DefinitionPutResult,
    LeaseRenew,
    RetiredRun,
    RetireScope,
    RunCreate,
    RunFilter,
    RunsClaim,
    StoredDefinition,
    WorkerBeat,
    WorkerInfo,
)
from jobgate.store.errors import DatabaseFileReplaced
from jobgate.store.keepalive import keepalives
from jobgate.store.migrate import upgrade
from jobgate.store.notify import CHANNEL, NOTIFY_SQL, PgChangeWatcher
from jobgate.store.sql import chains as run_chains
from jobgate.store.sql import changes as run_changes
from jobgate.store.sql import (
    claims,
    definitions,
    driver,
    governance,
    locks,
    outages,
    outbox,
    retention,
    runs,
    safemode,
    schedules,
    tokens,
    workers,
    workflows,
)
from jobgate.store.sql import leases as run_leases
from jobgate.store.sql import packs as pack_rows
from jobgate.store.sql import seals as record_seals
from jobgate.store.sql.ahead import ReadAhead
from jobgate.store.sql.governance_cache import GovernanceCache, Learned


def prepare_chained(known: run_chains.Chains | None, changes: Sequence[RunChange]) -> run_changes.PreparedChanges:
    """``run_changes.prepare_changes`` with the history chains ``known`` extended: the chained
    changes carry their new chain, and the runs they end come with their seal rows."""
    if known is None:
        return run_changes.prepare_changes(changes)
    extended = run_chains.extend(known.get, changes, record_seals.run_seal_row)
    prepared = run_changes.prepare_changes(changes, values=extended.values, transitions=extended.transitions)
    prepared.seals.update(extended.seals)
    prepared.chains.update(extended.after)
    return prepared


class StoreTx:
    """Operations inside one open transaction. Obtained from ``Store.write()`` / ``Store.read()``."""

    def __init__(
        self,
        conn: Connection,
        *,
        skip_locked: bool,
        ordered_ids: bool,
        notify: bool = False,
        chains: run_chains.Chains | None = None,
        snapshots: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset(),
        governance: GovernanceCache | None = None,
    ) -> None:
        self._conn = conn
        # SQLite: a submission's first reads kept by the process while the rows stand; what
        # this transaction reads is kept once it commits (``store.sql.governance_cache``).
        self._governance = governance
        self.governance_learned = Learned()
        self._chains = chains  # the store's known history chains (``store.sql.chains``), writers only
        self.chains_learned = run_chains.Pending.empty()  # committed into them with the transaction
        # Snapshots this store saw stored by a committed transaction, and those this one stores
        # or finds (``snapshot_put``): known to the store once it commits.
        self._snapshots = snapshots
        self.snapshots_learned: set[tuple[str, str]] = set()
        self._ahead = ReadAhead()  # a submission's first reads, asked together (``read_ahead``)
        self._gates_shared = False
        self._skip_locked = skip_locked
        self._ordered_ids = ordered_ids
        self._notify = notify  # PostgreSQL: announce claimable runs to listening workers

    @contextlib.contextmanager
    def savepoint(self, name: str = "jobgate_part") -> Iterator[None]:
        """A part of the transaction undone alone if the block raises (the error goes on): a
        completion's effects, one escalation among many. What the part taught the store about
        history chains is forgotten with it."""
        if not name.isidentifier():
            raise ValueError(f"not a savepoint name: {name!r}")
        updates, claimed = dict(self.chains_learned.updates), len(self.chains_learned.claimed)
        readings = len(self.governance_learned.readings)
        driver.execute(self._conn, f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            del self.governance_learned.readings[readings:]  # read inside the part undone
            try:
                driver.execute(self._conn, f"ROLLBACK TO SAVEPOINT {name}")
                driver.execute(self._conn, f"RELEASE SAVEPOINT {name}")
            except Exception:  # the connection itself failed: the transaction is lost anyway
                pass
            self.chains_learned.updates = updates
            del self.chains_learned.claimed[claimed:]
            raise
        driver.execute(self._conn, f"RELEASE SAVEPOINT {name}")

    # Domains beyond runs, each bound to this transaction (``store.rows``).
    @functools.cached_property
    def anchors(self) -> rows.AnchorRows:
        return rows.AnchorRows(self._conn)

    @functools.cached_property
    def telemetry(self) -> rows.TelemetryRows:
        return rows.TelemetryRows(self._conn)

    @functools.cached_property
    def metrics(self) -> rows.MetricRows:
        return rows.MetricRows(self._conn)

    @functools.cached_property
    def sla(self) -> rows.SlaRows:
        return rows.SlaRows(self._conn, self._reseal)

    @functools.cached_property
    def evidence(self) -> rows.EvidenceRows:
        return rows.EvidenceRows(self._conn)

    @functools.cached_property
    def packs(self) -> pack_rows.PackRows:
        """The pack registry (``store.sql.packs``)."""
        return pack_rows.PackRows(self._conn)

    def effect_connection(self) -> Connection:
        """The open transaction's connection, for a handler's completion effects only
        (``ExecutionContext.on_complete``: documented to receive a SQLAlchemy connection inside
        the transaction). Nothing else in jobgate reaches the database except through this class."""
        return self._conn

    def _reseal(self, kind: str, tenant_id: str, **match: Any) -> None:
        """Seal the records a write just changed (``core.seals``), in the write's transaction."""
        self._ahead.forget()  # a sealed record changed: what was read ahead may not hold
        record_seals.reseal(self._conn, kind, tenant_id, match)

    def read_ahead(self, tenant_id: str, job_definition_id: str) -> None:
        """Read a definition's current version, its approvals and its tenant's safe mode in one
        round trip (``store.sql.ahead``), for the submission about to ask for them. SQLite's
        reads are of a local file and wait on nothing: there the process keeps them while
        nothing they read changes (``store.sql.governance_cache``)."""
        if self._conn.dialect.name == "postgresql":
            self._ahead.read(self._conn, tenant_id, job_definition_id)
        elif self._governance is not None:
            reading = self._governance.read(self._conn, tenant_id, job_definition_id, self.governance_learned)
            self._ahead.keep_reading(reading)

    # seals (``core.seals``): chained in batches by the leader, verified record by record
    def seals_chain(self, tenant_id: str, at: datetime) -> list[Batch]:
        return record_seals.chain_pending(self._conn, tenant_id, at, self.audit_append)

    def audit_tenants(self) -> list[str]:
        return governance.audit_tenants(self._conn)

    def seals_tenants(self) -> list[str]:
        return record_seals.record_tenants(self._conn)

    def seals_pending_tenants(self) -> list[str]:
        return record_seals.pending_tenants(self._conn)

    def seals_verify(self, tenant_id: str, log_began: int | None = None) -> RecordsReport:
        return record_seals.verify_records(self._conn, tenant_id, log_began)

    def seals_chained_through(self, tenant_id: str, seq: int) -> int:
        return record_seals.seals_chained_through(self._conn, tenant_id, seq)

    def audit_log_began(self) -> int | None:
        """When the deployment's audit log began (µs): read unscoped, it sees every tenant's."""
        return record_seals.audit_log_began(self._conn)

    # the audit chain (PostgreSQL locks each chain's head row; SQLite has one writer)
    def audit_append(self, events: Sequence[AuditEvent]) -> list[AuditEntry]:
        acting = ACTING.get()
        if acting is not None:  # the one door of audit entries: each names the credential used
            events = [attributed(e, acting) for e in events]
        return governance.audit_append(
            self._conn, events, lock_rows=self._skip_locked, head_read=self._ahead.audit_head
        )

    def audit_list(self, f: AuditFilter) -> list[AuditEntry]:
        return governance.audit_list(self._conn, f)

    def audit_head(self, tenant_id: str) -> tuple[int, str]:
        return governance.audit_head(self._conn, tenant_id)

    def oldest_unanchored(self, tenant_id: str | None) -> list[tuple[str, datetime]]:
        return governance.oldest_unanchored(self._conn, tenant_id)

    # approvals
    def approval_put(self, a: Approval) -> Approval:
        stored = governance.approval_put(self._conn, a)
        self._reseal("approval", a.tenant_id, approval_id=stored.approval_id)
        return stored

    def approval_by_id(self, approval_id: int) -> Approval | None:
        return governance.approval_by_id(self._conn, approval_id)

    def approval_get(self, tenant_id: str, job_definition_id: str, digest: str) -> Approval | None:
        return governance.approval_get(self._conn, tenant_id, job_definition_id, digest)

    def approvals_active(self, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], str | None]:
        ahead = self._ahead.approval_rows({(k[0], k[1]) for k in keys})
        if ahead is not None:
            return governance.active_of(ahead, keys)
        return governance.approvals_active(self._conn, keys)

    def approvals_list(self, tenant_id: str, job_definition_id: str) -> list[Approval]:
        return governance.approvals_list(self._conn, tenant_id, job_definition_id)

    def approval_revoke(self, tenant_id: str, job_definition_id: str, digest: str, by: str, now: datetime) -> bool:
        revoked = governance.approval_revoke(self._conn, tenant_id, job_definition_id, digest, by, now)
        self._reseal("approval", tenant_id, job_definition_id=job_definition_id, digest=digest)
        return revoked

    # licensed slots (trust gates)
    def licence_slots_taken(self, now: datetime) -> int:
        return governance.licence_slots_taken(self._conn, lock_rows=self._skip_locked, now_us=codec.to_us(now))

    def licence_slots_take(self, runs: Sequence[tuple[str, str]], now: datetime) -> None:
        governance.licence_slots_take(self._conn, runs, codec.to_us(now))

    # run requests (four eyes)
    def request_put(self, q: RunRequest) -> None:
        governance.request_put(self._conn, q)
        self._reseal("request", q.tenant_id, request_id=q.request_id)

    def request_get(self, tenant_id: str, request_id: str) -> RunRequest | None:
        return governance.request_get(self._conn, tenant_id, request_id)

    def requests_list(
        self,
        tenant_id: str,
        *,
        status: str | None = None,
        requested_by: str | None = None,
        job_definition_ids: Collection[str] | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[RunRequest]:
        return governance.requests_list(
            self._conn,
            tenant_id,
            status=status,
            requested_by=requested_by,
            job_definition_ids=job_definition_ids,
            before=before,
            limit=limit,
        )

    def request_tested(
        self,
        tenant_id: str,
        request_id: str,
        by: str,
        at: datetime,
        verdict: dict[str, Any],
        pinned: tuple[str, int] | None = None,
    ) -> bool:
        tested = governance.request_tested(self._conn, tenant_id, request_id, by, at, verdict, pinned)
        self._reseal("request", tenant_id, request_id=request_id)
        return tested

    def request_decide(
        self,
        tenant_id: str,
        request_id: str,
        *,
        status: str,
        by: str,
        at: datetime,
        note: str | None,
        job_run_id: str | None,
    ) -> bool:
        decided = governance.request_decide(
            self._conn, tenant_id, request_id, status=status, by=by, at=at, note=note, job_run_id=job_run_id
        )
        self._reseal("request", tenant_id, request_id=request_id)
        return decided

    # definitions and snapshots
    def definition_put(self, p: DefinitionPut) -> DefinitionPutResult:
        result = definitions.definition_put(self._conn, p)
        # a new version, or the current one re-signed after a key rotation (its content then
        # differs in its signature): sealed again where it differs from its latest seal
        self._reseal("definition", p.tenant_id, job_definition_id=p.job_definition_id)
        self._reseal("definition_status", p.tenant_id, job_definition_id=p.job_definition_id)
        return result

    def definition_get(
        self, tenant_id: str, job_definition_id: str, version: int | None = None
    ) -> StoredDefinition | None:
        if version is None:
            known, definition = self._ahead.definition(tenant_id, job_definition_id)
            if known:
                return definition
        return definitions.definition_get(self._conn, tenant_id, job_definition_id, version)

    def definitions_list(self, tenant_id: str | None) -> list[StoredDefinition]:
        return definitions.definitions_list(self._conn, tenant_id)

    def definitions_mentioning(self, key: str) -> list[tuple[str, str, dict[str, Any]]]:
        return definitions.definitions_mentioning(self._conn, key)

    def definitions_fingerprint(self) -> tuple[int, int]:
        return definitions.definitions_fingerprint(self._conn)

    def definition_versions(self, tenant_id: str, job_definition_id: str) -> list[StoredDefinition]:
        return definitions.definition_versions(self._conn, tenant_id, job_definition_id)

    def definition_set_status(
        self, tenant_id: str, job_definition_id: str, status: DefinitionStatus, now: datetime
    ) -> bool:
        claims.gates_closing(self._conn)  # suspending or retiring closes a gate for its runs
        changed = definitions.definition_set_status(self._conn, tenant_id, job_definition_id, status, codec.to_us(now))
        self._reseal("definition_status", tenant_id, job_definition_id=job_definition_id)
        return changed

    def snapshot_put(self, snapshot: ConfigSnapshot, now: datetime) -> None:
        """Store (and seal) ``snapshot`` unless it is stored. A snapshot is immutable, keyed by
        its digest and never deleted, so one this store has seen committed is not written (nor
        its content encoded) again: a statement less for every submission binding it."""
        key = (snapshot.tenant_id, snapshot.config_snapshot_id)
        if key in self._snapshots or key in self.snapshots_learned:
            return
        if definitions.snapshot_put(self._conn, snapshot, codec.to_us(now)):  # immutable: sealed once, stored
            self._reseal("snapshot", snapshot.tenant_id, config_snapshot_id=snapshot.config_snapshot_id)
        self.snapshots_learned.add(key)

    # schedules
    def schedule_put(
        self, s: Schedule, *, watermark: datetime, source: str, now: datetime, pause_reason: str | None = None
    ) -> bool:
        changed = schedules.schedule_put(
            self._conn, s, watermark=watermark, source=source, now=now, pause_reason=pause_reason
        )
        self._reseal("schedule", s.tenant_id, schedule_id=s.schedule_id)
        return changed

    def schedules_list(self, tenant_id: str | None = None) -> list[StoredSchedule]:
        return schedules.schedules_list(self._conn, tenant_id)

    def schedule_get(self, tenant_id: str, schedule_id: str, *, lock: bool = False) -> StoredSchedule | None:
        return schedules.schedule_get(self._conn, tenant_id, schedule_id, lock=lock)

    def schedule_set_paused(
        self, tenant_id: str, schedule_id: str, paused: bool, now: datetime, reason: str | None = None
    ) -> bool:
        changed = schedules.schedule_set_paused(self._conn, tenant_id, schedule_id, paused, now, reason)
        self._reseal("schedule", tenant_id, schedule_id=schedule_id)
        return changed

    def schedules_failing_count(self) -> int:
        return schedules.schedules_failing_count(self._conn)

    def schedule_failed(self, tenant_id: str, schedule_id: str, error: str, retry_at: datetime) -> None:
        schedules.schedule_failed(self._conn, tenant_id, schedule_id, error, retry_at)

    def schedule_recovered(self, tenant_id: str, schedule_id: str) -> None:
        schedules.schedule_recovered(self._conn, tenant_id, schedule_id)

    def schedule_delete(self, tenant_id: str, schedule_id: str) -> bool:
        deleted = schedules.schedule_delete(self._conn, tenant_id, schedule_id)
        self._reseal("schedule", tenant_id, schedule_id=schedule_id)
        return deleted

    def schedule_advance(
        self, tenant_id: str, schedule_id: str, expected: datetime, to: datetime, version: datetime | None = None
    ) -> bool:
        return schedules.schedule_advance(self._conn, tenant_id, schedule_id, expected, to, version)

    def misses_record(self, tenant_id: str, misses: Sequence[Miss], now: datetime) -> None:
        schedules.misses_record(self._conn, tenant_id, misses, now)

    def miss_of_event(self, tenant_id: str, schedule_id: str, event_id: str) -> str | None:
        return schedules.miss_of_event(self._conn, tenant_id, schedule_id, event_id)

    def misses_list(self, tenant_id: str, schedule_id: str) -> list[tuple[datetime, str]]:
        return schedules.misses_list(self._conn, tenant_id, schedule_id)

    def misses_page(
        self, tenant_id: str, schedule_id: str, *, reason: str | None, after: datetime | None, limit: int
    ) -> list[RecordedMiss]:
        return schedules.misses_page(self._conn, tenant_id, schedule_id, reason=reason, after=after, limit=limit)

    def schedule_episode(
        self, tenant_id: str, schedule_id: str, expected: tuple[bool, int], to: tuple[bool, int]
    ) -> bool:
        return schedules.schedule_episode(self._conn, tenant_id, schedule_id, expected, to)

    def schedule_retime(
        self, tenant_id: str, schedule_id: str, expected_every: timedelta, every: timedelta, anchor: datetime
    ) -> bool:
        changed = schedules.schedule_retime(self._conn, tenant_id, schedule_id, expected_every, every, anchor)
        self._reseal("schedule", tenant_id, schedule_id=schedule_id)
        return changed

    def schedule_config_seen(self, tenant_id: str, schedule_id: str, expected: str | None, digest: str) -> bool:
        return schedules.schedule_config_seen(self._conn, tenant_id, schedule_id, expected, digest)

    def change_record(self, tenant_id: str, schedule_id: str, change: ScheduleChange) -> None:
        """A schedule's change, recorded twice in its transaction: in its own history (``schedules
        changes``) and, as ``schedule.<what>``, in the tenant's hash-chained audit log."""
        schedules.change_record(self._conn, tenant_id, schedule_id, change)
        self._reseal("schedule_change", tenant_id, schedule_id=schedule_id)
        event = AuditEvent(
            tenant_id,
            change.source,
            f"schedule.{change.field}",
            "schedule",
            schedule_id,
            change.changed_at,
            reason=change.reason,
            payload={"from": change.old_value, "to": change.new_value, "accepted": change.accepted},
        )
        self.audit_append([event])

    def changes_list(self, tenant_id: str, schedule_id: str, since: datetime | None = None) -> list[ScheduleChange]:
        return schedules.changes_list(self._conn, tenant_id, schedule_id, since)

    def fact_record(self, tenant_id: str, name: str, value: float, now: datetime, source: str) -> None:
        schedules.fact_record(self._conn, tenant_id, name, value, now, source)

    def facts_list(self, tenant_id: str, name: str, limit: int = 100) -> list[tuple[datetime, float, str]]:
        return schedules.facts_list(self._conn, tenant_id, name, limit)

    # api tokens
    def token_put(self, t: StoredToken) -> None:
        tokens.token_put(self._conn, t)
        self._reseal("token", t.tenant_id, token_id=t.token_id)

    def token_get(self, token_id: str, *, lock: bool = False) -> StoredToken | None:
        return tokens.token_get(self._conn, token_id, lock=lock)

    def tokens_list(self, tenant_id: str | None) -> list[StoredToken]:
        return tokens.tokens_list(self._conn, tenant_id)

    def tokens_exist(self) -> bool:
        return tokens.tokens_exist(self._conn)

    def token_revoke(self, tenant_id: str, token_id: str, actor: str, now: datetime) -> bool:
        revoked = tokens.token_revoke(self._conn, tenant_id, token_id, actor, now)
        self._reseal("token", tenant_id, token_id=token_id)
        return revoked

    # console sessions signed out before their expiry
    def session_end(self, tenant_id: str, session_id: str, now: datetime, expires: datetime) -> None:
        tokens.session_end(self._conn, tenant_id, session_id, now, expires)

    def session_ended(self, session_id: str) -> bool:
        return tokens.session_ended(self._conn, session_id)

    # safe mode
    def safe_mode_current(self, tenant_id: str) -> SafeModePeriod | None:
        known, period = self._ahead.safe_mode(tenant_id)
        if known:
            return period
        return safemode.current(self._conn, tenant_id)

    def safe_mode_activate(
        self, tenant_id: str, actor: str, reason: str, now: datetime, actions: dict[str, Any] | None = None
    ) -> SafeModePeriod | None:
        period = safemode.activate(self._conn, tenant_id, actor, reason, now, actions)
        self._reseal("safe_mode", tenant_id)
        return period

    def safe_mode_deactivate(self, tenant_id: str, actor: str, reason: str, now: datetime) -> SafeModePeriod | None:
        period = safemode.deactivate(self._conn, tenant_id, actor, reason, now)
        self._reseal("safe_mode", tenant_id)
        return period

    def safe_mode_periods(
        self, tenant_id: str, *, ending_after: datetime | None = None, limit: int = 1000
    ) -> list[SafeModePeriod]:
        return safemode.periods(self._conn, tenant_id, ending_after=ending_after, limit=limit)

    def snapshot_get(self, config_snapshot_id: str) -> ConfigSnapshot | None:
        return definitions.snapshot_get(self._conn, config_snapshot_id)

    # workflows (one compare-and-set per advance; see store/sql/workflows.py)
    def workflow_insert(
        self,
        w: WorkflowRecord,
        steps: Sequence[StepRecord],
        transitions: Sequence[WorkflowTransition],
    ) -> bool:
        return workflows.workflow_insert(self._conn, w, steps, transitions)

    def workflow_get(self, workflow_run_id: str, tenant_id: str | None = None) -> WorkflowRecord | None:
        return workflows.workflow_get(self._conn, workflow_run_id, tenant_id)

    def workflow_lock(self, workflow_run_id: str) -> WorkflowRecord | None:
        return workflows.workflow_lock(self._conn, workflow_run_id, lock_rows=self._skip_locked)

    def workflow_by_key(self, idempotency_key: str) -> WorkflowRecord | None:
        return workflows.workflow_by_key(self._conn, idempotency_key)

    def workflow_steps(self, workflow_run_id: str) -> list[StepRecord]:
        return workflows.workflow_steps_of(self._conn, workflow_run_id)

    def workflow_transitions(self, workflow_run_id: str) -> list[WorkflowTransition]:
        return workflows.workflow_transitions_of(self._conn, workflow_run_id)

    def workflows_list(
        self,
        tenant_id: str,
        *,
        status: str | None = None,
        job_definition_id: str | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[WorkflowRecord]:
        return workflows.workflows_list(
            self._conn, tenant_id, status=status, job_definition_id=job_definition_id, before=before, limit=limit
        )

    def workflows_due(self, limit: int) -> list[str]:
        return workflows.workflows_due(self._conn, limit)

    def workflow_apply(self, update: WorkflowUpdate) -> bool:
        return workflows.workflow_apply(self._conn, update)

    def workflow_request_cancel(self, workflow_run_id: str, tenant_id: str | None = None) -> bool:
        return workflows.workflow_request_cancel(self._conn, workflow_run_id, tenant_id)

    def workflows_active_exist(self) -> bool:
        return workflows.workflows_active_exist(self._conn)

    def workflow_bump(self, workflow_run_id: str) -> bool:
        return workflows.workflow_bump(self._conn, workflow_run_id)

    def workflow_next_seq(self, workflow_run_id: str) -> int:
        return workflows.workflow_next_seq(self._conn, workflow_run_id)

    # runs
    def runs_create(self, creates: Sequence[RunCreate], *, audited: str | None = None) -> list[tuple[JobRun, bool]]:
        """``audited``: the tenant whose audit chain the caller appends to next (a manual
        submission's entry). On PostgreSQL its head is locked and read in the insert's round
        trip, after the runs' keys, and the append uses it (``ReadAhead.audit_head``)."""
        notify = CHANNEL if self._notify else None
        if audited is None or self._conn.dialect.name != "postgresql":
            return runs.runs_create(self._conn, creates, notify_channel=notify)
        answers: list[list[dict[str, Any]]] = []
        made = runs.runs_create(
            self._conn, creates, notify_channel=notify, then=governance.head_queries(audited), answers=answers
        )
        self._ahead.keep_audit_head(audited, governance.head_from(*answers))
        return made

    def run_get(self, job_run_id: str, tenant_id: str | None = None) -> JobRun | None:
        return runs.run_get(self._conn, job_run_id, tenant_id)

    def run_lock(self, job_run_id: str) -> JobRun | None:
        return runs.run_lock(self._conn, job_run_id, lock_rows=self._skip_locked)

    def runs_lock_free(self, job_run_ids: Sequence[str]) -> set[str]:
        return runs.runs_lock_free(self._conn, job_run_ids, lock_rows=self._skip_locked)

    def runs_get(self, job_run_ids: Sequence[str]) -> list[JobRun]:
        return runs.runs_by_ids(self._conn, job_run_ids)

    def run_retries(self, tenant_id: str, source_job_run_id: str, limit: int = 100) -> list[JobRun]:
        """The runs that retry ``source_job_run_id`` in ``tenant_id``, oldest first."""
        return runs.run_retries(self._conn, tenant_id, source_job_run_id, limit)

    def runs_by_keys(self, idempotency_keys: Sequence[str]) -> list[JobRun]:
        return runs.runs_by_keys(self._conn, idempotency_keys)

    def runs_holding_slots(self, tenant_id: str, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], JobRun]:
        """The run of ``tenant_id`` holding each (job definition, slot) pair that one holds."""
        return runs.runs_holding_slots(self._conn, tenant_id, pairs)

    def runs_retired_in_slots(
        self, tenant_id: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], RetiredRun]:
        """The retired run of ``tenant_id`` that held each (job definition, slot) pair, where
        retention deleted one (``retired_runs`` remembers it)."""
        if not pairs:
            return {}
        found = retention.retired_holders(self._conn, [], [(tenant_id, job, slot) for job, slot in pairs])
        return {(r.job_definition_id, r.slot): r for r in found if r.slot is not None and r.tenant_id == tenant_id}

    def run_holders(self, candidates: Sequence[JobRun]) -> dict[str, JobRun]:
        """The stored runs holding these runs' keys or slots (``runs.holders``). On PostgreSQL a
        single submission's lookup travels with retention's (``runs_retired_holders``, asked
        next) in one round trip."""
        if len(candidates) == 1 and self._conn.dialect.name == "postgresql":
            return self._ahead.holders(self._conn, candidates[0])
        return runs.holders(self._conn, candidates)

    def runs_list(self, f: RunFilter) -> list[JobRun]:
        return runs.runs_list(self._conn, f)

    def run_transitions(self, job_run_id: str) -> list[Transition]:
        return runs.run_transitions_list(self._conn, job_run_id)

    def run_attempts(self, job_run_id: str) -> list[Attempt]:
        return runs.run_attempts_list(self._conn, job_run_id)

    def runs_claim(self, p: RunsClaim) -> ClaimedRuns:
        if p.admit is not None:
            self.gates_shared()  # before the candidate read locks any row
        batch = claims.runs_claim(self._conn, p, skip_locked=self._skip_locked)
        if self._chains is not None and batch.chains is not None:
            self.chains_learned.claimed.append(batch.chains)
        return batch

    def gates_closing(self, *, patient: bool = False) -> None:
        claims.gates_closing(self._conn, patient=patient)

    def gates_shared(self) -> None:
        """Take the gates' lock shared, once per transaction, before any row is locked: a
        transaction that asks the admission rule is serialised with the writes that close a
        gate (``claims.gates_closing``), and never waits for that lock while it holds row locks
        a revocation needs (which would deadlock)."""
        if not self._gates_shared:
            claims.gates_shared(self._conn)
            self._gates_shared = True

    def admission_facts(self, candidates: Sequence[Any]) -> claims.AdmissionFacts:
        self.gates_shared()
        return claims.admission_facts(self._conn, candidates)

    def runs_held(self, limit: int) -> list[JobRun]:
        return run_leases.runs_held(self._conn, limit)

    def runs_apply(self, changes: Sequence[RunChange] | run_changes.PreparedChanges) -> list[RunChange]:
        if not isinstance(changes, run_changes.PreparedChanges):
            changes = prepare_chained(self._chains, changes)
        done = run_changes.runs_apply(self._conn, changes)
        if changes.chains:
            applied = {ch.job_run_id for ch in done}
            for rid, chain in changes.chains.items():
                self.chains_learned.updates[rid] = chain if rid in applied else None
        if self._notify and any(ch.to_status is RunStatus.SCHEDULED for ch in done):
            driver.execute(self._conn, NOTIFY_SQL)  # released to the queue: claimable again now
        return done

    def leases_renew(self, p: LeaseRenew) -> set[str]:
        return run_leases.leases_renew(self._conn, p)

    def runs_claimable_exists(self, queues: Sequence[str], now: datetime, exclude_digests: Sequence[str] = ()) -> bool:
        return run_leases.runs_claimable_exists(self._conn, queues, now, exclude_digests)

    def runs_waiting_on(self, digests: Sequence[str], due_before: datetime, limit: int) -> list[JobRun]:
        return run_leases.runs_waiting_on(self._conn, digests, due_before, limit)

    def runs_lease_expired(self, now: datetime, limit: int) -> list[JobRun]:
        return run_leases.runs_lease_expired(self._conn, now, limit)

    def runs_over_age(self, created_before: datetime, limit: int) -> list[JobRun]:
        return run_leases.runs_over_age(self._conn, created_before, limit)

    def runs_queue_expired(self, now: datetime, limit: int) -> list[JobRun]:
        return run_leases.runs_queue_expired(self._conn, now, limit)

    def runs_stop_requested(self, job_run_ids: Sequence[str]) -> set[str]:
        return run_leases.runs_stop_requested(self._conn, job_run_ids)

    def runs_stop_check(self, leases: Sequence[tuple[str, int]]) -> tuple[set[str], set[str]]:
        return run_leases.runs_stop_check(self._conn, leases)

    def run_request_stop(self, job_run_id: str) -> bool:
        from sqlalchemy import update

        from jobgate.store.tables import job_runs

        stmt = (
            update(job_runs)
            .where(job_runs.c.job_run_id == job_run_id, job_runs.c.status == "RUNNING")
            .values(stop_requested=True)
        )
        return self._conn.execute(stmt).rowcount == 1

    def run_progress(self, job_run_id: str, token: int, fraction: float | None, message: str | None) -> bool:
        return run_leases.run_progress(self._conn, job_run_id, token, fraction, message)

    def dead_letters_list(
        self,
        tenant_id: str | None,
        *,
        open_only: bool = True,
        limit: int = 100,
        before: tuple[datetime, str] | None = None,
    ) -> list[DeadLetter]:
        return runs.dead_letters_list(self._conn, tenant_id, open_only=open_only, limit=limit, before=before)

    def runs_created_count(self, tenant_id: str, start: datetime, end: datetime) -> int:
        return runs.runs_created_count(self._conn, tenant_id, start, end)

    def run_trigger(self, job_run_id: str) -> dict[str, Any] | None:
        return runs.run_trigger(self._conn, job_run_id)

    def run_progress_get(self, job_run_id: str) -> tuple[float | None, str | None]:
        return runs.run_progress_get(self._conn, job_run_id)

    def dead_letter_open_for(self, job_run_id: str) -> DeadLetter | None:
        return runs.dead_letter_open_for(self._conn, job_run_id)

    def dead_letter_resolve(self, dead_letter_id: str, resolution: str, now: datetime) -> None:
        from sqlalchemy import select, update

        from jobgate.store.tables import dead_letters

        self._conn.execute(
            update(dead_letters)
            .where(dead_letters.c.dead_letter_id == dead_letter_id)
            .values(resolved_at=codec.to_us(now), resolution=resolution)
        )
        run_id = self._conn.execute(
            select(dead_letters.c.job_run_id).where(dead_letters.c.dead_letter_id == dead_letter_id)
        ).scalar()
        if run_id is not None:  # a dead-lettered run resolved in place is sealed again
            record_seals.reseal_run(self._conn, str(run_id), codec.to_us(now))

    # outbox and workers
    def outbox_append(self, items: Sequence[tuple[str | None, str, Event]], now: datetime) -> None:
        outbox.outbox_append(self._conn, items, codec.to_us(now))

    def outbox_pending(self, limit: int) -> list[OutboxEvent]:
        return outbox.outbox_pending(self._conn, limit, ordered_ids=self._ordered_ids)

    def outbox_mark_delivered(self, ids: Sequence[int], now: datetime) -> None:
        outbox.outbox_mark_delivered(self._conn, ids, codec.to_us(now), ordered_ids=self._ordered_ids)

    def outbox_backlog(self) -> int:
        return outbox.outbox_backlog(self._conn, ordered_ids=self._ordered_ids)

    def runs_retire(
        self, tenant_id: str, ended_before: datetime, limit: int, scope: RetireScope = ANY_RUN, *, now: datetime
    ) -> list[str]:
        """Delete up to ``limit`` finished runs ended before ``ended_before``; ``now`` (the
        caller's clock) is when ``retired_runs`` says they were retired."""
        retired = retention.runs_retire(
            self._conn, tenant_id, ended_before, limit, scope, ordered_ids=self._ordered_ids, now=now
        )
        if retired:  # each retired run leaves a tombstone closing its seal
            record_seals.retire_runs(self._conn, tenant_id, retired, codec.to_us(ended_before))
        return retired

    def runs_retired_holders(self, candidates: Sequence[JobRun]) -> dict[str, RetiredRun]:
        """For each of these (unstored) runs whose trigger's run retention deleted, that run (as
        ``retired_runs`` remembers it), found by idempotency key or slot; keyed by the given
        run's key."""
        if not candidates:
            return {}
        known, found = self._ahead.retired(candidates)
        if not known:
            found = retention.retired_holders(
                self._conn,
                [c.idempotency_key for c in candidates],
                [(c.tenant_id, c.job_definition_id, c.slot) for c in candidates if c.slot is not None],
            )
        return retention.match_retired(candidates, found)

    def runs_retired_of(self, tenant_id: str | None, job_run_ids: Sequence[str]) -> list[RetiredRun]:
        """What ``retired_runs`` remembers of these runs of ``tenant_id`` (None: of any tenant,
        the operator on the host), those it has."""
        return retention.retired_of(self._conn, tenant_id, job_run_ids)

    def runs_retired_between(
        self, tenant_id: str, start: datetime, end: datetime, job_definition_id: str | None = None
    ) -> list[RetiredRun]:
        return retention.retired_between(self._conn, tenant_id, start, end, job_definition_id)

    def runs_retirable_count(self, tenant_id: str, ended_before: datetime, scope: RetireScope = ANY_RUN) -> int:
        return retention.runs_retirable_count(self._conn, tenant_id, ended_before, scope, ordered_ids=self._ordered_ids)

    def outbox_summary(self, tenant_id: str | None = None) -> tuple[int, datetime | None]:
        return outbox.outbox_summary(self._conn, tenant_id, ordered_ids=self._ordered_ids)

    def runs_open_counts(
        self, tenant_id: str | None, job_definition_ids: Sequence[str] | None = None
    ) -> dict[tuple[str, str], int]:
        return runs.runs_open_counts(self._conn, tenant_id, job_definition_ids)

    def runs_held_counts(
        self, tenant_id: str | None, job_definition_ids: Sequence[str] | None = None
    ) -> dict[tuple[str, str], int]:
        return runs.runs_held_counts(self._conn, tenant_id, job_definition_ids)

    def run_ids_ending(self, suffix: str, tenant_id: str | None = None, limit: int = 2) -> list[str]:
        return runs.run_ids_ending(self._conn, suffix, tenant_id, limit)

    def runs_ended_by_bucket(
        self,
        tenant_id: str,
        since: datetime,
        bucket: timedelta,
        created_since: datetime,
        job_definition_ids: Sequence[str] | None = None,
    ) -> list[tuple[int, str, int]]:
        return runs.runs_ended_by_bucket(
            self._conn, tenant_id, since, bucket // timedelta(microseconds=1), created_since, job_definition_ids
        )

    def runs_due_summary(self, tenant_id: str | None, now: datetime) -> tuple[int, datetime | None]:
        return runs.runs_due_summary(self._conn, tenant_id, now)

    def schema_revision(self) -> str | None:
        from jobgate.store.migrate import current_revision

        return current_revision(self._conn)

    def role_bypassing_rls(self) -> str | None:
        """PostgreSQL: the role this connection acts as, when PostgreSQL never applies row-level
        security to it (a superuser or a BYPASSRLS role): tenants are then separated by jobgate's
        queries alone. None when the policies bind it, and on SQLite (no row security there)."""
        if self._conn.dialect.name != "postgresql":
            return None
        row = self._conn.execute(
            text("SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
        ).first()
        return None if row is None or not row[1] else str(row[0])

    def lock_acquire(self, name: str, owner: str, now: datetime, ttl: timedelta) -> int | None:
        return locks.lock_acquire(self._conn, name, owner, codec.to_us(now), ttl // timedelta(microseconds=1))

    def lock_holds(self, name: str, owner: str, token: int, now: datetime) -> bool:
        return locks.lock_holds(self._conn, name, owner, token, codec.to_us(now))

    def lock_get(self, name: str) -> LockInfo | None:
        return locks.lock_get(self._conn, name)

    def locks_list(self, prefix: str = "") -> list[LockInfo]:
        return locks.locks_list(self._conn, prefix)

    def lock_release(self, name: str, owner: str, token: int) -> None:
        locks.lock_release(self._conn, name, owner, token)

    def outage_down(self, dependency: str, owner: str, now: datetime, ttl: timedelta) -> tuple[bool, datetime]:
        return outages.outage_down(self._conn, dependency, owner, codec.to_us(now), int(ttl.total_seconds() * 1e6))

    def outage_up(self, dependency: str) -> LockInfo | None:
        return outages.outage_up(self._conn, dependency)

    def outages_open(self) -> list[LockInfo]:
        return outages.outages_open(self._conn)

    def worker_heartbeat(self, b: WorkerBeat) -> None:
        workers.worker_heartbeat(self._conn, b)

    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        workers.worker_stopped(self._conn, worker_id, codec.to_us(now))

    def runs_waiting_by_digest(self, tenant_id: str | None) -> dict[str, tuple[str, str, int]]:
        return workers.runs_waiting_by_digest(self._conn, tenant_id)

    def workers_list(self) -> list[WorkerInfo]:
        return workers.workers_list(self._conn)


WRITE_LOCK_TIMEOUT_S = 30.0
DISPOSE_WAIT_S = 5.0  # SQLite: how long disposing waits for a write in progress to end
CONNECT_TIMEOUT_S = 10  # PostgreSQL: seconds to open a connection (the URL's connect_timeout wins)
# PostgreSQL ends a session whose transaction has sent nothing for this long, rolling it back:
# a process paused (SIGSTOP, a debugger, a VM frozen) inside a transaction otherwise held its row
# locks for as long as it stayed paused, and the tenant's audit chain head among them stopped
# every other worker and submission of the cluster (found by a review: 47 s, then released only
# by SIGCONT). Above the longest wait jobgate makes inside a transaction (an anchor's
# timestamping authority, then its HTTP sink: 10 s each by default); a completion effect (user
# code) must not sit longer between its statements. The URL's ``options`` may set another.
IDLE_IN_TRANSACTION_MS = 30_000
NEVER = 2**62  # executions of one statement before psycopg prepares it unasked


def _identity(file: Path | None) -> tuple[int, int] | None:
    """The (device, inode) of a file, or None when there is none at the path."""
    if file is None:
        return None
    try:
        found = file.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _dbapi_in_transaction(conn: Connection) -> bool:
    """Whether the driver's connection under ``conn`` still has a transaction open (its rollback
    failed); a connection that cannot say is taken as still in one."""
    try:
        return bool(conn.connection.dbapi_connection.in_transaction)  # type: ignore[union-attr]
    except Exception:
        return True


def _begin_immediate(dbapi_conn: Any, timeout: float = WRITE_LOCK_TIMEOUT_S) -> None:
    """Take SQLite's write lock, retrying every fraction of a millisecond while another writer has it.

    SQLite's own busy handler sleeps in growing steps (1, 2, 5, 10 ... 100 ms), so a writer that
    finds the lock taken for 3 ms typically waits 8 ms or more. Writers here hold the lock for
    one short batched transaction, so polling finely hands the lock over almost at once.
    """
    delay = 0.0001
    deadline = 0.0
    while True:
        try:
            dbapi_conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            message = str(exc)
            if "locked" not in message and "busy" not in message:
                raise
            now = time.monotonic()
            if not deadline:
                deadline = now + timeout
            elif now > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.002)


# Reading connections a SQLite store keeps open. The pool's default (5, and 10 more opened and
# closed on demand) was smaller than an API server's concurrent readers (its request threads, the
# embedded worker and its loops): past five, each read opened a connection, set its pragmas and
# closed it again. With 16 clients posting runs that churn cost the server a fifth of its CPU
# per request (``benchmarks/api_load.py``: 4.1 against 5.2 ms a POST, 265 against 224 submits/s).
# Writers take turns before taking a connection (``Store._turn``), so they need no more.
SQLITE_READERS = 32


def _sqlite_engine(url: str, *, synchronous: str, writer: bool) -> Engine:
    if ":memory:" in url:
        engine = create_engine(url, poolclass=NullPool, hide_parameters=True)
    elif writer:
        engine = create_engine(url, hide_parameters=True)
    else:
        engine = create_engine(url, pool_size=SQLITE_READERS, max_overflow=SQLITE_READERS, hide_parameters=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        # Writers wait for the lock in _begin_immediate; the busy timeout covers the rest
        # (WAL recovery, checkpoints), which is rare and short.
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        # A page cache large enough for the hot rows and indexes of a busy queue (64 MiB).
        cur.execute("PRAGMA cache_size=-65536")
        # Checkpoints copy the WAL into the database file and fsync it, which can take 100 ms on a
        # slow disk; done by whichever connection commits past the threshold, they stall that
        # worker or submitter. Workers checkpoint in the background instead (Store.checkpoint);
        # this high threshold only bounds the WAL when no worker runs.
        cur.execute("PRAGMA wal_autocheckpoint=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if writer:
            dbapi = conn.connection.dbapi_connection
            dbapi.execute("PRAGMA busy_timeout=0")  # type: ignore[union-attr]
            try:
                _begin_immediate(dbapi)
            finally:
                dbapi.execute("PRAGMA busy_timeout=30000")  # type: ignore[union-attr]
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


class SqliteChangeWatcher:
    """Tells cheaply whether any connection committed since the last look (``PRAGMA data_version``).

    An idle worker asks every couple of milliseconds; the pragma reads a counter in shared
    memory, so a new run is noticed within milliseconds without a query against the runs table.
    """

    cheap = True

    def __init__(self, path: str) -> None:
        import sqlite3

        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._last = -1

    def changed(self) -> bool:
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._last:
            self._last = version
            return True
        return False

    def close(self) -> None:
        self._conn.close()


class PollingChangeWatcher:
    """No cheap change signal: the worker falls back to its poll interval."""

    cheap = False

    def changed(self) -> bool:
        return False

    def close(self) -> None:
        pass


TENANT_SETTING = "jobgate.tenant"  # read by the row-level security policies (migration 0008)


class Store:
    """A database jobgate runs on. Thread-safe: each transaction takes its own pooled connection,
    but a SQLite process's writes, which take turns, share one (``_writing``)."""

    def __init__(self, url: str, *, synchronous: str = "FULL", migrate: bool = True) -> None:
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self._file: Path | None = None  # SQLite: the database file, by its absolute path
        if self.dialect == "sqlite" and parsed.database and parsed.database != ":memory:":
            # The file as it is named now: a relative path read after the process changed its
            # working directory (a handler's chdir) named another file, a new empty database
            # for each connection opened later.
            self._file = Path(parsed.database).absolute()
            parsed = parsed.set(database=str(self._file))
            url = parsed.render_as_string(hide_password=False)
        self.url = url
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
                raise ValueError("sqlite synchronous must be FULL, NORMAL or EXTRA")
            self._writer = _sqlite_engine(url, synchronous=synchronous.upper(), writer=True)
            self._reader = _sqlite_engine(url, synchronous=synchronous.upper(), writer=False)
            self.skip_locked = False
            self.notify = False  # workers watch PRAGMA data_version instead
            self.ordered_ids = True  # one writer at a time: ids become visible in order
            # Python work (validating a submission, building its rows) is done in a read
            # transaction before the one write lock is taken, so it never holds the workers up.
            self.prepares_apart = True
            # Every read is of a file on this host: it never waits on a network.
            self.local = True
        elif self.dialect == "postgresql":
            # The cluster's own processes act for every tenant ('*'); a transaction for one tenant
            # narrows it (``read(tenant_id=...)``), and row-level security holds it to that.
            #
            # Every statement is planned for its tables as they are now, at each execution: none
            # is prepared on the server but those marked ``driver.planned_once``, whose plan
            # cannot go wrong as tables grow (psycopg's threshold, never reached, leaves the rest
            # alone; ``None`` would refuse to prepare even those asked for). psycopg used to
            # prepare every statement on its fifth use, and PostgreSQL then keeps a generic plan
            # chosen for the table of that moment: a queue's tables grow from empty to many
            # thousands of rows in seconds, and an idempotency lookup (``= ANY`` of keys)
            # planned as a scan of a near-empty table took 280 ms per batch on 35,000 runs until
            # autovacuum's next ANALYZE (measured: bulk submit fell from 4,500 to 550 runs/s).
            options = (
                f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
                f" {parsed.query.get('options', '')} -c {TENANT_SETTING}=*"
            )
            parsed = parsed.set(drivername="postgresql+psycopg").update_query_dict({"options": options})
            url = parsed.render_as_string(hide_password=False)
            libpq_url = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
            connect: dict[str, Any] = {"prepare_threshold": NEVER, **keepalives(libpq_url)}
            if "connect_timeout" not in parsed.query:  # a database that never answers fails in time
                connect["connect_timeout"] = CONNECT_TIMEOUT_S
            pool = {"pool_size": 10, "max_overflow": 10, "connect_args": connect}
            # A dead pooled connection (a killed session, a restarted server) is found by a ping
            # at checkout. A look at its socket instead (a round trip less) handed out
            # connections whose session had been ended a moment before, its farewell not yet
            # written: 56 of 100 transactions failed just after pg_terminate_backend.
            self._writer = create_engine(url, pool_pre_ping=True, hide_parameters=True, **pool)
            driver.owing(self._writer)
            self._reader = self._writer
            self.skip_locked = True
            self.notify = True
            self.ordered_ids = False  # concurrent writers may commit a lower id after a higher one
            self.prepares_apart = False  # row locks only: a separate read transaction only adds round trips
            self.local = False  # a server, perhaps on another host: every read is a round trip
        else:
            raise ConfigurationError(
                f"unsupported scheme {parsed.drivername!r}: use sqlite:///PATH or postgresql://…", field="database"
            )
        # SQLite: the writers of this process take turns here before asking for the file's write
        # lock, so at most one of them polls for it (``_begin_immediate``) while the others sleep
        # on a mutex. Sixteen API threads and a worker polling the file lock every fraction of a
        # millisecond spent more CPU asking than writing (py-spy: 84 % of a request thread's time).
        self._write_turn = threading.Lock() if self.dialect == "sqlite" else None
        self._kept_writer: Connection | None = None  # SQLite: the connection the turns share
        self._turns: dict[str, threading.Lock] = {}  # ``turn``'s locks, by name
        self._turns_lock = threading.Lock()
        self._governance = GovernanceCache() if self.dialect == "sqlite" else None
        self._chains = run_chains.Chains()
        self._snapshots: set[tuple[str, str]] = set()  # (tenant, snapshot id) seen stored, committed
        if migrate:
            self.migrate()
        self._file_identity = _identity(self._file)  # (device, inode) of the file opened

    def check_file(self) -> None:
        """Refuse to go on (``DatabaseFileReplaced``) when the SQLite file opened is no longer
        at its path: a server whose file was deleted kept acknowledging runs written only to
        the deleted file, and ``/readyz`` said ready. A stat a transaction (about a microsecond)."""
        if self._file is None:
            return
        now = _identity(self._file)
        if self._file_identity is None:
            self._file_identity = now  # opened before the file was made (a new database)
        elif now != self._file_identity:
            raise DatabaseFileReplaced(
                "the database file was removed or replaced while this process had it open: what it"
                " writes now would be lost; restart the process"
            )

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for logs and terminals."""
        return make_url(self.url).render_as_string(hide_password=True)

    def migrate(self) -> None:
        with self._writer.connect() as conn:
            upgrade(conn)

    def database_now(self) -> datetime:
        """The database server's current time (PostgreSQL's ``clock_timestamp()``); for SQLite,
        a file on this host, the host's time."""
        if self.dialect != "postgresql":
            return datetime.now(UTC)
        with self._reader.connect() as conn:
            value: datetime = conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
        return value.astimezone(UTC)

    def clock(self) -> Clock:
        """The clock every process on this database measures leases and expiries with."""
        if self.dialect == "postgresql":
            return DatabaseClock(self.database_now)
        return SystemClock()  # one host: the database clock is this host's clock

    @contextlib.contextmanager
    def write(self, tenant_id: str | None = None) -> Iterator[StoreTx]:
        """One write transaction; committed on normal exit, rolled back on an exception.

        With ``tenant_id`` the transaction acts for that tenant alone: on PostgreSQL row-level
        security then hides and refuses every other tenant's rows, whatever the queries say.
        """
        with self._writing() as conn:
            self._scope(conn, tenant_id)
            tx = self._tx(conn, chains=self._chains, snapshots=self._snapshots)
            yield tx
        self._chains.commit(tx.chains_learned)  # committed: what it learned holds
        if self._governance is not None:
            self._governance.keep(tx.governance_learned)
        if tx.snapshots_learned:
            self._snapshots |= tx.snapshots_learned

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction's connection. PostgreSQL: one from the pool. SQLite: this process's
        turn to write, waited for as long as the file's lock would be, on the one writing
        connection the turns share.

        SQLite writes one transaction at a time, so a pool of writers only added a checkout, a
        reset (a ``ROLLBACK``) and a check-in to every write: about a tenth of a sequential
        submission's CPU. The kept connection is dropped, and the next turn opens another, when
        a transaction leaves it unusable (invalidated, or still in a transaction after a failed
        rollback).
        """
        if self._write_turn is None:
            with self._writer.begin() as conn:
                yield conn
            return
        self.check_file()
        if not self._write_turn.acquire(timeout=WRITE_LOCK_TIMEOUT_S):
            raise sqlite3.OperationalError("database is locked")
        try:
            kept = self._kept_writer
            if kept is None or kept.closed or kept.invalidated:
                kept = self._kept_writer = self._writer.connect()
            try:
                with kept.begin():
                    yield kept
                    self.check_file()  # again before the commit (removed meanwhile: rolled back)
            except BaseException:
                if kept.invalidated or _dbapi_in_transaction(kept):
                    self._drop_kept_writer()
                raise
        finally:
            self._write_turn.release()

    def _drop_kept_writer(self, *, broken: bool = True) -> None:
        conn, self._kept_writer = self._kept_writer, None
        if conn is None:
            return
        if not broken:
            conn.close()
            return
        with contextlib.suppress(Exception):  # already broken: closing is best effort
            conn.invalidate()
            conn.close()

    @contextlib.contextmanager
    def read(self, tenant_id: str | None = None) -> Iterator[StoreTx]:
        self.check_file()
        with self._reader.begin() as conn:
            self._scope(conn, tenant_id)
            tx = self._tx(conn)
            yield tx
        if self._governance is not None:  # what a committed state showed
            self._governance.keep(tx.governance_learned)

    def _tx(
        self,
        conn: Connection,
        *,
        chains: run_chains.Chains | None = None,
        snapshots: set[tuple[str, str]] | None = None,
    ) -> StoreTx:
        """A transaction's operations on this store (``chains``, ``snapshots``: a writer's)."""
        return StoreTx(
            conn,
            skip_locked=self.skip_locked,
            ordered_ids=self.ordered_ids,
            notify=self.notify,
            chains=chains,
            snapshots=frozenset() if snapshots is None else snapshots,
            governance=self._governance,
        )

    def _scope(self, conn: Connection, tenant_id: str | None) -> None:
        if tenant_id is None or self.dialect != "postgresql":
            return
        if not tenant_id or tenant_id == "*":
            raise ValueError(f"not a tenant id: {tenant_id!r}")
        # With the transaction's first statement, in its round trip (``driver.owe``).
        driver.owe(conn, "SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant_id))

    def prepare_changes(self, changes: Sequence[RunChange]) -> run_changes.PreparedChanges:
        """Build a batch's statements and rows before taking the write lock, and, on SQLite, the
        seals of the runs it ends (read and hashed while another writer holds the one write lock).
        PostgreSQL has no such lock: there a separate read transaction only adds round trips, and
        the seals are computed inside the write transaction from the rows it wrote."""
        prepared = prepare_chained(self._chains, changes)
        unsealed = [ch for ch in prepared.changes if ch.to_status.is_terminal and ch.job_run_id not in prepared.seals]
        if self.dialect == "sqlite":
            if unsealed:
                with self.read() as tx:
                    prepared.seals.update(record_seals.presealed(tx._conn, unsealed, prepared.transitions))
            if prepared.seals:  # packed here, outside the one write lock
                prepared.packed.update(record_seals.pack(prepared.seals.values()))
        return prepared

    def change_watcher(
        self, on_change: Callable[[], None] | None = None
    ) -> SqliteChangeWatcher | PgChangeWatcher | PollingChangeWatcher:
        """What tells an idle worker that a run may have become claimable: SQLite's commit
        counter, PostgreSQL's notifications (``on_change`` is called when one arrives)."""
        parsed = make_url(self.url)
        if self.dialect == "sqlite" and parsed.database and parsed.database != ":memory:":
            return SqliteChangeWatcher(parsed.database)
        if self.dialect == "postgresql":
            conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
            return PgChangeWatcher(conninfo, on_change)
        return PollingChangeWatcher()

    @contextlib.contextmanager
    def turn(self, name: str) -> Iterator[None]:
        """One holder at a time of the lock ``name``: among this process's threads, and on
        PostgreSQL among every process of the database (a session advisory lock on a connection
        of its own, outside any transaction, so the server's idle-transaction bound never ends
        it). For a decision a later write depends on (a tenant's daily quota: counted, then the
        runs stored, and only then the next caller counts)."""
        with self._turns_lock:
            local = self._turns.setdefault(name, threading.Lock())
        with local:
            if self.dialect != "postgresql":
                yield
                return
            with self._writer.connect() as conn:
                conn.exec_driver_sql("SELECT pg_advisory_lock(hashtext(%(n)s))", {"n": name})
                conn.commit()
                try:
                    yield
                finally:
                    conn.exec_driver_sql("SELECT pg_advisory_unlock(hashtext(%(n)s))", {"n": name})
                    conn.commit()

    def checkpoint(self) -> None:
        """Copy committed WAL pages into the database file without blocking readers or writers."""
        if self.dialect != "sqlite":
            return
        with self._reader.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def dispose(self) -> None:
        if self._write_turn is not None and self._write_turn.acquire(timeout=DISPOSE_WAIT_S):
            try:  # the kept writer is checked out: the pool's dispose would leave it open
                self._drop_kept_writer(broken=False)
            finally:
                self._write_turn.release()
        self._writer.dispose()
        self._reader.dispose()
