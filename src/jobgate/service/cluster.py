"""What the cluster looks like: its workers (alive, stale, gone, stopped) and its named locks.

A worker heartbeats every few seconds; one whose last heartbeat is older than ``stale_after``
(three missed beats by default) is shown as stale: its host died, it was SIGKILLed, or it
hangs. Its runs are not touched by this: the rescuer recovers them when their leases expire.
One silent for longer than ``GONE_AFTER`` whose run leases have all expired is gone: it ended
without stopping (nothing but a clean stop marks a worker stopped), and is listed with the
stopped ones, not as a warning forever (a review found a SIGKILLed worker keeping ``doctor``
amber for good); while it still holds a lease (a long one) it stays stale: its runs are not
back in the queue yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobgate.core.records import LockInfo
from jobgate.service.engine import Engine
from jobgate.store.base import WorkerInfo

STALE_AFTER = timedelta(seconds=15)  # three heartbeats of the default 5 s interval
GONE_AFTER = timedelta(minutes=10)  # past every default lease many times: its runs were returned
# The named locks the cluster's leaders hold (``runtime.leadership``): one scheduler fires.
SCHEDULER_LEADER = "scheduler-leader"


@dataclass(frozen=True)
class WorkerRow:
    info: WorkerInfo
    state: str  # alive | stale | gone | stopped
    heartbeat_age: timedelta


@dataclass(frozen=True)
class LockRow:
    info: LockInfo
    state: str  # held | expired (its holder stopped renewing) | released (handed over)


def worker_state(info: WorkerInfo, now: datetime, stale_after: timedelta = STALE_AFTER) -> str:
    if info.stopped_at is not None:
        return "stopped"
    silent = now - info.heartbeat_at
    if silent <= stale_after:
        return "alive"
    holds_runs = info.leases_until is not None and info.leases_until > now  # returned only at expiry
    return "stale" if silent <= max(GONE_AFTER, stale_after) or holds_runs else "gone"


def workers(engine: Engine, *, include_stopped: bool = False, stale_after: timedelta = STALE_AFTER) -> list[WorkerRow]:
    now = engine.clock.now()
    with engine.store.read() as tx:
        found = tx.workers_list()
    rows = [WorkerRow(w, worker_state(w, now, stale_after), now - w.heartbeat_at) for w in found]
    return [r for r in rows if include_stopped or r.state not in ("stopped", "gone")]


def locks(engine: Engine, prefix: str = "") -> list[LockRow]:
    now = engine.clock.now()
    with engine.store.read() as tx:
        found = tx.locks_list(prefix)
    return [LockRow(lock, lock_state(lock, now)) for lock in found]


def lock_state(lock: LockInfo, now: datetime) -> str:
    if lock.expires_at > now:
        return "held"
    return "released" if lock.expires_at.timestamp() == 0 else "expired"
