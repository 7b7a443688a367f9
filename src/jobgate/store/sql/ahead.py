"""A submission's first reads, asked together before it needs them.

Preparing a trigger reads the definition's current version, its active approvals and its
tenant's safe mode, one after the other, each waiting for the last one's answer. On
PostgreSQL each is a round trip; asked together (``driver.returning_each``) they are one, a
sixth of a single submission's round trips. Storing it asks whether its trigger has a run
already, stored or retired by retention: one round trip for both too. A manual submission's
run insert carries its tenant's chain head and floors (locked after the run's key, the order
every path that makes a run and appends takes them), kept for its append. What was read ahead is kept in the transaction
(``ReadAhead``) and handed out once to the read it stands for; any write to a sealed record in
the transaction forgets all of it (``StoreTx._reseal``), so nothing read ahead is ever older
than what the transaction itself wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from jobgate.core.models import JobRun
from jobgate.core.records import SafeModePeriod
from jobgate.store import codec
from jobgate.store.base import RetiredRun, StoredDefinition
from jobgate.store.sql import definitions, driver, governance, retention, runs, safemode
from jobgate.store.sql.governance_cache import Reading


@dataclass
class ReadAhead:
    """Reads made ahead in one transaction, each handed out once."""

    definitions: dict[tuple[str, str], StoredDefinition | None] = field(default_factory=dict)
    approvals: dict[tuple[str, str], list[tuple[Any, ...]]] = field(default_factory=dict)
    safe_modes: dict[str, SafeModePeriod | None] = field(default_factory=dict)
    retired_runs: dict[str, list[RetiredRun]] = field(default_factory=dict)  # by the asking run's key
    audit_heads: dict[str, governance.Head] = field(default_factory=dict)  # locked, by tenant

    def read(self, conn: Connection, tenant_id: str, job_definition_id: str) -> None:
        """The definition's current version, its active approvals and the tenant's safe mode,
        in one round trip on PostgreSQL."""
        found_definition, found_approvals, found_period = driver.returning_each(
            conn,
            [
                definitions.current_query(tenant_id, job_definition_id),
                governance.active_query(tenant_id, job_definition_id),
                safemode.current_query(tenant_id),
            ],
        )
        pair = (tenant_id, job_definition_id)
        self.definitions[pair] = definitions.current_of(found_definition)
        self.approvals[pair] = [tuple(r.values()) for r in found_approvals]
        self.safe_modes[tenant_id] = safemode.current_of(found_period)

    def keep_reading(self, reading: Reading) -> None:
        """What ``read`` reads, as kept by the process (SQLite, ``governance_cache``)."""
        pair = (reading.tenant_id, reading.job_definition_id)
        self.definitions[pair] = reading.definition
        self.approvals[pair] = list(reading.approvals)
        self.safe_modes[reading.tenant_id] = reading.safe_mode

    def holders(self, conn: Connection, run: JobRun) -> dict[str, JobRun]:
        """``runs.holders`` of one unstored run, and, in the same round trip, the runs retention
        retired under its key or slot, kept for ``retired`` (a submission asks both in turn)."""
        stored = runs.holder_queries(run)
        answers = driver.returning_each(conn, [*stored, *retention.retired_queries(run)])
        found, gone = answers[: len(stored)], answers[len(stored) :]
        by_key = [codec.run_from_row(r) for r in found[0]]
        by_slot = [codec.run_from_row(r) for r in found[1]] if len(found) > 1 else []
        self.retired_runs[run.idempotency_key] = [r for rows in gone for r in retention.retired_from(rows)]
        return runs.holders_from(conn, [run], by_key, by_slot)

    def keep_audit_head(self, tenant_id: str, read: governance.Head | None) -> None:
        """A tenant's chain head and floors, locked and read along with the statement before
        its append (a manual submission's run insert), for ``audit_head``."""
        if read is not None:  # a tenant's first entry makes its head: read where it is made
            self.audit_heads[tenant_id] = read

    def audit_head(self, tenant_id: str) -> governance.Head | None:
        """The tenant's locked chain head and floors read ahead, once (the append moves it)."""
        return self.audit_heads.pop(tenant_id, None)

    def retired(self, candidates: Sequence[JobRun]) -> tuple[bool, list[RetiredRun]]:
        """(True, the retired runs read ahead for these candidates) once, when every one of them
        was read ahead; (False, []) otherwise."""
        keys = {c.idempotency_key for c in candidates}
        if not keys <= self.retired_runs.keys():
            return False, []
        return True, [r for key in sorted(keys) for r in self.retired_runs.pop(key)]

    def definition(self, tenant_id: str, job_definition_id: str) -> tuple[bool, StoredDefinition | None]:
        """(True, the definition read ahead) once; (False, None) when it was not."""
        pair = (tenant_id, job_definition_id)
        if pair not in self.definitions:
            return False, None
        return True, self.definitions.pop(pair)

    def approval_rows(self, pairs: set[tuple[str, str]]) -> list[tuple[Any, ...]] | None:
        """The approval rows of every one of ``pairs`` read ahead (once), or None unless all were."""
        if not pairs or not pairs <= self.approvals.keys():
            return None
        return [row for pair in sorted(pairs) for row in self.approvals.pop(pair)]

    def safe_mode(self, tenant_id: str) -> tuple[bool, SafeModePeriod | None]:
        """(True, the tenant's latest safe-mode period read ahead) once; (False, None) when it
        was not."""
        if tenant_id not in self.safe_modes:
            return False, None
        return True, self.safe_modes.pop(tenant_id)

    def forget(self) -> None:
        self.definitions.clear()
        self.approvals.clear()
        self.safe_modes.clear()
        self.retired_runs.clear()
        self.audit_heads.clear()  # the lock stays held; the head is read again where needed
