"""SQLite: a submission's first reads kept by the process, valid while nothing they read changed.

Every submission reads its definition's current version, its active approvals and its
tenant's safe mode (``store.sql.ahead``): on SQLite three statements and the definition's
content parsed again, a tenth of a single submission's time, for rows that change a few times
a day. The triggers of migration 0033 give one value, ``governance_epoch``, a new random number
in the same transaction as any change to those rows, made by any process or by hand. A reading
is kept with the value it was made under, and handed out again only to a transaction that reads
the same value: the rows that admit a run are then those that transaction would have read. A
random value, not a count: a database file restored from a copy brings back an older state with
the value it had then, where a count could meet again a number it reached by other changes.

Only what committed is kept: a transaction's readings are offered when it ends and kept after
its commit (``Learned`` / ``keep``), so a reading of rows a transaction itself changed and then
rolled back is never handed to another.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from jobgate.core.records import SafeModePeriod
from jobgate.store.base import StoredDefinition
from jobgate.store.sql import definitions, driver, governance, safemode

# The epoch, and the schema's version: a trigger dropped or created again (by hand, or with a
# table a tool rebuilt) changes the schema, and the triggers are read again before anything more
# is kept.
_EPOCH = "SELECT epoch, (SELECT schema_version FROM pragma_schema_version) FROM governance_epoch WHERE id = 1"
_WATCHED = ("definitions", "definition_heads", "definition_approvals", "safe_mode_periods")


def _trigger_sql(table: str, event: str) -> str:
    """The text migration 0033 created a trigger with, as SQLite keeps it in ``sqlite_master``."""
    return (
        f"CREATE TRIGGER governance_epoch_{table}_{event} AFTER {event.upper()} ON {table} "
        "BEGIN UPDATE governance_epoch SET epoch = random() WHERE id = 1; END"
    )


# Each trigger by name with its whole text: one of the same name that does something else (a
# body that no longer moves the epoch, or moves it only sometimes) is as good as none, and so is
# any other trigger that names the epoch (one that sets it back to a value it had pins it).
TRIGGERS = {f"governance_epoch_{t}_{e}": _trigger_sql(t, e) for t in _WATCHED for e in ("insert", "update", "delete")}
_TRIGGERS = (
    f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND (name IN ({', '.join('?' for _ in TRIGGERS)})"
    " OR lower(tbl_name) = 'governance_epoch' OR lower(sql) LIKE '%governance_epoch%')"
)
log = logging.getLogger("jobgate.store")

_LIMIT = 4096  # definitions kept; past it the cache starts again (a deployment has far fewer)


@dataclass(frozen=True)
class Reading:
    """A definition's current version, its active approvals and its tenant's safe mode, read
    together under one value of the epoch."""

    epoch: tuple[int, int] | None  # (the epoch, the schema's version), None: not to be kept
    tenant_id: str
    job_definition_id: str
    definition: StoredDefinition | None
    approvals: tuple[tuple[Any, ...], ...]
    safe_mode: SafeModePeriod | None


@dataclass
class Learned:
    """What one transaction read: kept once it has committed."""

    readings: list[Reading] = field(default_factory=list)


class GovernanceCache:
    """A process's readings, by (tenant, definition), all under one value of the epoch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch: tuple[int, int] | None = None
        self._readings: dict[tuple[str, str], Reading] = {}
        self._schema: int | None = None  # the schema version whose triggers were counted
        self._triggers_whole = False

    def read(self, conn: Connection, tenant_id: str, job_definition_id: str, learned: Learned) -> Reading:
        """The reading ``conn``'s transaction would make now: the kept one when the epoch it
        reads is the one it was made under, else made here (and offered to ``learned``)."""
        found = driver.rows_sql(conn, _EPOCH, ())
        epoch: tuple[int, int] | None = None  # its row deleted by hand: nothing is kept
        if found and self._triggers_in_place(conn, int(found[0][1])):
            epoch = (int(found[0][0]), int(found[0][1]))
        with self._lock:
            kept = self._readings.get((tenant_id, job_definition_id)) if self._epoch == epoch else None
        if kept is not None:
            return kept
        found_definition, found_approvals, found_period = driver.returning_each(
            conn,
            [
                definitions.current_query(tenant_id, job_definition_id),
                governance.active_query(tenant_id, job_definition_id),
                safemode.current_query(tenant_id),
            ],
        )
        reading = Reading(
            epoch,
            tenant_id,
            job_definition_id,
            definitions.current_of(found_definition),
            tuple(tuple(r.values()) for r in found_approvals),
            safemode.current_of(found_period),
        )
        if epoch is not None:
            learned.readings.append(reading)
        return reading

    def _triggers_in_place(self, conn: Connection, schema: int) -> bool:
        """Whether every trigger that moves the epoch exists as the migration made it, and no
        other names it, read once a schema version."""
        if schema != self._schema:
            found = dict(driver.rows_sql(conn, _TRIGGERS, tuple(TRIGGERS)))
            whole = found == TRIGGERS
            if not whole and (self._triggers_whole or self._schema is None):
                log.warning(
                    "a trigger of governance_epoch is missing or not as migration 0033 made it, or another"
                    " trigger names it (dropped, changed or added by hand, or with a table a tool rebuilt):"
                    " governance rows are read for every submission until the triggers are as they were"
                )
            self._schema, self._triggers_whole = schema, whole
        return self._triggers_whole

    def keep(self, learned: Learned) -> None:
        """Keep a committed transaction's readings. Readings under another epoch than those kept
        replace them all: the epoch has no order, and the latest committed reading is the best
        guess of what the next transaction reads."""
        if not learned.readings:
            return
        with self._lock:
            for reading in learned.readings:
                if reading.epoch != self._epoch or len(self._readings) >= _LIMIT:
                    self._readings.clear()
                    self._epoch = reading.epoch
                self._readings[(reading.tenant_id, reading.job_definition_id)] = reading
