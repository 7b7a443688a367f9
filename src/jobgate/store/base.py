"""The storage seam: what the engine asks of a database, as entity-first operations.

Each write operation takes one params object and is called on a transaction (``StoreTx``)
opened by ``Store.write()``; reads use ``Store.read()``. Operations return core models, never
rows. Every status change is a compare-and-set on the expected status (and, for a worker's
writes, on its fencing token); the operation reports which changes matched so the caller
never assumes a write it did not make.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core.models import (
    Attempt,
    ConfigSnapshot,
    DefinitionStatus,
    JobRun,
    JsonObject,
    Transition,
)
from jobgate.core.states import RunStatus


@dataclass(frozen=True)
class StoredDefinition:
    """One stored definition version and the definition's lifecycle status."""

    tenant_id: str
    job_definition_id: str
    version: int
    digest: str
    content: JsonObject
    job_code: str
    job_class: str
    status: DefinitionStatus
    is_current: bool
    source: str | None
    created_at: datetime
    applied_by: str | None = None  # None: applied before appliers were recorded
    applied_lineage: tuple[str, ...] = ()  # who minted the applier's credential, nearest first
    # The content as stored (JSON text): what a reader may key a cache of parsed versions on.
    content_text: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DefinitionPut:
    tenant_id: str
    job_definition_id: str
    digest: str
    content: JsonObject
    job_code: str
    job_class: str
    status: DefinitionStatus
    source: str | None
    now: datetime
    applied_by: str | None = None
    applied_lineage: tuple[str, ...] = ()
    # An older version's content makes that version current again (a roll back); False keeps
    # the current version and says so (``DefinitionPutResult.older``).
    revert: bool = True


@dataclass(frozen=True)
class DefinitionPutResult:
    definition: StoredDefinition
    created: bool  # False: identical content was already stored (same digest)
    # The head now points at an older version stored before (its content applied again): not
    # a new version, but the current one changed.
    reverted: bool = False
    older: int | None = None  # the older version the content was, kept from current (``revert`` False)


@dataclass(frozen=True)
class RunCreate:
    """A new run, inserted in SCHEDULED with its CREATED and SCHEDULED transitions.

    Insertion is keyed by ``job_run_id`` (derived from the idempotency key) and the unique
    idempotency key: a second create with the same key inserts nothing and returns the
    existing run.
    """

    run: JobRun
    trigger: JsonObject
    transitions: tuple[Transition, ...]
    concurrency_limit: int | None = None
    rate_limit_per_second: float | None = None


@dataclass(frozen=True)
class RunsClaim:
    worker_id: str
    queues: tuple[str, ...]
    limit: int
    now: datetime
    lease_expires_at: datetime
    queue_rates: dict[str, tuple[float, int]] = field(default_factory=dict)
    start_now: int = 0  # how many of the claimed runs to start at once (free executor threads)
    # Definition digests whose runs wait for a dependency that is down: not claimed at all.
    exclude_digests: frozenset[str] = frozenset()
    # The admission rule for the attempts about to start: given the candidates (with their
    # approval, lifecycle and safe-mode facts), the verdicts of those it refuses, by run id.
    # Refused runs are not claimed; ``ClaimedRuns.refused`` hands them back to the caller.
    admit: Callable[[Sequence[Any]], Mapping[str, Any]] | None = None


class ClaimedRuns:
    """The runs a claim took, decoded into ``JobRun`` values on first use.

    A claim's rows come back in one piece; turning them into ``JobRun`` values is pure Python,
    so the worker does it after its transaction has committed, when the database's write lock
    is no longer held.
    """

    def __init__(self, decode: Callable[[], list[JobRun]], count: int, *, more: bool = False) -> None:
        self._decode: Callable[[], list[JobRun]] | None = decode
        self._runs: list[JobRun] = []
        self.count = count
        # The claim found as many candidates as it could take: more runs are likely waiting, and
        # the worker claims again in its next cycle (no notification announces a backlog).
        self.more = more
        # (job_run_id, error) of claimed rows this version cannot read: they stay leased, out of
        # this worker's hands, for the rescuer once their lease expires.
        self.unreadable: list[tuple[str, str]] = []
        # (candidate, verdict) of the runs the admission rule refused: not claimed.
        self.refused: list[tuple[Any, Any]] = []
        # Makes the claimed runs' history chains (``store.sql.chains``), decoded after commit.
        self.chains: Callable[[], list[tuple[str, Any]]] | None = None

    def runs(self) -> list[JobRun]:
        """Claimed runs by priority, then due time: started ones RUNNING, others DISPATCHED."""
        if self._decode is not None:
            self._runs, self._decode = self._decode(), None
        return self._runs


@dataclass(frozen=True)
class RunFilter:
    tenant_id: str | None = None
    statuses: tuple[RunStatus, ...] = ()
    job_definition_id: str | None = None
    job_class: str | None = None
    trigger_type: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    limit: int = 100
    before: tuple[datetime, str] | None = None  # cursor: (created_at, job_run_id) of the last row seen
    trigger_prefix: str | None = None  # runs whose trigger id starts with this (a schedule's runs)
    job_definition_ids: tuple[str, ...] | None = None  # only these definitions (a token's job list)


@dataclass(frozen=True)
class RetireScope:
    """Which finished runs one retention pass may take, beside its cutoff (seed 000 §57 classes):
    ``job_classes`` only these (None: any), never ``except_classes``; a run whose dead letter
    was resolved only when that was before ``letters_resolved_before`` (None: whenever)."""

    job_classes: tuple[str, ...] | None = None
    except_classes: tuple[str, ...] = ()
    letters_resolved_before: datetime | None = None
    # What an anchor covers (its last audit entry, the last seal chained by then): a run with an
    # entry or a seal past it (its letter closed, sealed again, after it ended) waits for the next.
    anchored_through: tuple[int, int] | None = None


ANY_RUN = RetireScope()  # a retention pass over every class


@dataclass(frozen=True)
class RetiredRun:
    """A run retention deleted, as ``retired_runs`` remembers it: what made it its trigger's
    (its idempotency key, its slot), its end, and when it went."""

    job_run_id: str
    tenant_id: str
    job_definition_id: str
    idempotency_key: str
    slot: str | None
    status: str
    created_at: datetime
    ended_at: datetime | None
    retired_at: datetime


@dataclass(frozen=True)
class LeaseRenew:
    worker_id: str
    leases: tuple[tuple[str, int], ...]
    lease_expires_at: datetime


@dataclass(frozen=True)
class WorkerBeat:
    worker_id: str
    host: str
    pid: int
    concurrency: int
    queues: tuple[str, ...]
    now: datetime
    # What it can execute (``runtime.capabilities``), written when it changed; None: unchanged.
    capabilities: Mapping[str, Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: str
    host: str
    pid: int
    concurrency: int
    queues: tuple[str, ...]
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    capabilities: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The latest expiry of the run leases it holds (None: it holds none): a silent worker's
    # runs return to the queue only then.
    leases_until: datetime | None = None


__all__ = [
    "Attempt",
    "ConfigSnapshot",
    "DefinitionPut",
    "DefinitionPutResult",
    "LeaseRenew",
    "RunCreate",
    "RunFilter",
    "RunsClaim",
    "StoredDefinition",
    "WorkerBeat",
    "WorkerInfo",
]
