"""The history chains a worker knows, so it seals the runs it ends without reading them back.

A run's seal hashes its history as a chain (``core.seals.history_step``). ``job_runs`` keeps
the chain over its first ``history_extent`` transitions beside ``transition_count``, which
every writer of a transition increments: when the two agree, the chain covers the whole
history and the run has no dead letters (a change that writes one clears the chain, so a run
that was ever dead-lettered is sealed the reading way). A claim returns the row; the claimer
extends the chain with the claim's own transitions and, at each later change it makes under
that lease, with the change's transition: the seal of the run's end is then computed before
the settling transaction, and on PostgreSQL written by the settling statement itself.

Sound because only the lease holder writes a fenced change, a change is applied only by
compare-and-set on the run's status and fencing token, and every transition changes the
status: if the change applies, no transition was written since the claim the chain came from.
Whatever this misses is sealed the reading way, and ``verify_records`` recomputes every seal
from the transitions themselves, so a wrong chain could only ever raise a false alarm, never
hide a change. A chain becomes known only when the transaction that made it commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

from jobgate.core import seals
from jobgate.core.states import LEASED, TERMINAL
from jobgate.core.transitions import RunChange
from jobgate.store import codec

SEALED_COLUMNS = (*seals.RUN_IDENTITY, *seals.RUN_OUTCOME)  # the two share no column
LIMIT = 100_000  # chains kept per store: far above any worker's runs in hand
_IDENTITY = len(seals.RUN_IDENTITY)
_INDEX = {c: i for i, c in enumerate(SEALED_COLUMNS)}
_STATUS, _ATTEMPT = _INDEX["status"], _INDEX["attempt"]


class Chain(NamedTuple):
    """A leased run as its holder knows it: the lease's token, the sealed columns' values as the
    row stands (in ``SEALED_COLUMNS`` order), and the history chain over all ``extent`` of its
    transitions. A named tuple: a worker makes one a run it claims and one a change it makes,
    and a frozen dataclass cost five times as much to build."""

    token: int
    values: tuple[Any, ...]
    history: str
    extent: int


def from_claim(row: Mapping[str, Any], transitions: Sequence[Sequence[Any]]) -> Chain | None:
    """The chain of a run a claim just took: ``row`` is its row after the claim (a mapping),
    ``transitions`` the claim's own (``codec.TRANSITION_COLUMNS`` tuples, in order). None when
    the row's chain does not cover every transition before the claim."""
    return _chain(
        row["lease_token"],
        row["history_hash"],
        row["history_extent"],
        row["transition_count"],
        _sealed_of(row),
        transitions,
    )


_sealed_of = itemgetter(*SEALED_COLUMNS)  # a row's sealed values as a tuple, picked in one call


_getters: dict[tuple[str, ...], tuple[Callable[[Sequence[Any]], Any], Callable[[Sequence[Any]], Any]]] = {}


def from_values(columns: tuple[str, ...], values: Sequence[Any], transitions: Sequence[Sequence[Any]]) -> Chain | None:
    """``from_claim`` for a row as a value list in ``columns`` order (SQLite's claim returns
    every column of every run it took): the values are picked by position, nothing decoded."""
    getters = _getters.get(columns)
    if getters is None:
        chain_columns = ("lease_token", "history_hash", "history_extent", "transition_count")
        getters = _getters[columns] = (
            itemgetter(*(columns.index(c) for c in chain_columns)),
            itemgetter(*(columns.index(c) for c in SEALED_COLUMNS)),
        )
    token, history, extent, count = getters[0](values)
    return _chain(token, history, extent, count, getters[1](values), transitions)


def _chain(
    token: Any, history: Any, extent: Any, count: Any, sealed: tuple[Any, ...], transitions: Sequence[Sequence[Any]]
) -> Chain | None:
    if history is None or extent is None or int(extent) + len(transitions) != int(count):
        return None
    return Chain(int(token), sealed, seals.history_of([t[2:] for t in transitions], history), int(count))


def row_after(row: Mapping[str, Any], ch: RunChange) -> dict[str, Any]:
    """A run's sealed columns as ``ch`` leaves them, if it applies."""
    after = dict(row)
    after["status"] = ch.to_status.value
    if ch.start_attempt:
        after["attempt"] = int(row["attempt"]) + 1
    for column, value in ch.values.items():
        if column in after:
            after[column] = codec.column(value)
    return after


def values_after(values: tuple[Any, ...], ch: RunChange) -> tuple[Any, ...]:
    """``row_after`` for a chain's values (``SEALED_COLUMNS`` order)."""
    after = list(values)
    after[_STATUS] = ch.to_status.value
    if ch.start_attempt:
        after[_ATTEMPT] = int(values[_ATTEMPT]) + 1
    for column, value in ch.values.items():
        i = _INDEX.get(column)
        if i is not None:
            after[i] = codec.column(value)
    return tuple(after)


@dataclass(frozen=True)
class Extended:
    """Changes with their chains extended: the columns each chained change sets besides its own
    (``history_hash`` and ``history_extent``), the transitions as rows (computed once, for the
    chain and for the insert), the chain each change leaves if it applies (None: the run leaves
    its holder's hands), and the seal rows of the runs they end."""

    values: dict[str, dict[str, Any]]
    transitions: dict[str, tuple[Any, ...]]
    after: dict[str, Chain | None]
    seals: dict[str, Any]


_CLEARED = {"history_hash": None, "history_extent": None}


def extend(known: Callable[[str], Chain | None], changes: Sequence[RunChange], seal_row: Any) -> Extended:
    """Extend the chain of every fenced change whose run's chain is known under its token.
    ``seal_row(tenant, run_id, identity, outcome, history, extent, at_us)`` makes the seal row
    of a run it ends from its parts' value lists (``store.sql.seals.run_seal_row``)."""
    values: dict[str, dict[str, Any]] = {}
    transitions: dict[str, tuple[Any, ...]] = {}
    after: dict[str, Chain | None] = {}
    sealed: dict[str, Any] = {}
    for ch in changes:
        rid = ch.job_run_id
        chain = known(rid) if ch.expected_token is not None else None
        if chain is None or chain.token != ch.expected_token:
            continue
        if ch.dead_letter is not None:  # sealed by reading (its letter may be renumbered); chain cleared
            values[rid] = _CLEARED
            after[rid] = None
            continue
        transition = transitions[rid] = codec.transition_values(ch.transition, ch.tenant_id)
        history = seals.history_step(chain.history, transition[2:])
        extent = chain.extent + 1
        values[rid] = {"history_hash": history, "history_extent": extent}
        now = values_after(chain.values, ch)
        if ch.to_status in TERMINAL:
            outcome = [*now[_IDENTITY:], []]  # no dead letters: a change that writes one is not chained
            sealed[rid] = seal_row(ch.tenant_id, rid, now[:_IDENTITY], outcome, history, extent, transition[7])
        keeps = ch.to_status in LEASED and not ch.revoke_lease
        after[rid] = Chain(chain.token, now, history, extent) if keeps else None
    return Extended(values, transitions, after, sealed)


class Chains:
    """A store's known chains. A transaction collects what it learns (``Pending``); the store
    commits it when the transaction commits, and forgets it when it rolls back."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._known: dict[str, Chain] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, job_run_id: str) -> Chain | None:
        return self._known.get(job_run_id)

    def commit(self, pending: Pending) -> None:
        if not pending.updates and not pending.claimed:
            return
        learned: dict[str, Chain | None] = dict(pending.updates)
        for make in pending.claimed:  # decoded now, after the commit (outside SQLite's write lock)
            learned.update(make())
        with self._lock:
            for rid, chain in learned.items():
                if chain is None:
                    self._known.pop(rid, None)
                else:
                    self._known[rid] = chain
            while len(self._known) > self._limit:  # runs lost to the rescuer: the oldest go
                self._known.pop(next(iter(self._known)))


@dataclass
class Pending:
    """What one transaction learned about chains, applied only if it commits."""

    updates: dict[str, Chain | None]
    claimed: list[Callable[[], Iterable[tuple[str, Chain | None]]]]

    @classmethod
    def empty(cls) -> Pending:
        return cls({}, [])
