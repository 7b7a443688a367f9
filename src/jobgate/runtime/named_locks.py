"""Named locks for handlers (seed 000 §25): one holder at a time per name, across the cluster.

A handler that must not run its critical part concurrently with another (two DAL batches
submitting the same Merkle root, two rollouts of one configuration) takes a lock named by its
kind and key: ``with ctx.lock("batch", window_start):``. The lock lives in the ``locks`` table
with an expiry (recovery: a holder that died loses it when it expires) and a fencing token
that grows with every new holder. A lock held by someone else is not waited for: the attempt
fails with the retryable ``LOCK_BUSY`` and its retry policy decides when to try again, so no
worker thread sits blocked. ``jobgate locks`` shows who holds what.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from jobgate.core.errors import RetryableError, ValidationError
from jobgate.store.sqlstore import Store


class LockKind(StrEnum):
    JOB = "job"  # prevent duplicate job execution
    WORKFLOW = "workflow"  # prevent concurrent workflow mutation
    SIGNAL = "signal"  # prevent conflicting operations on a signal
    QUARANTINE = "quarantine"  # prevent conflicting release/reject transitions
    BATCH = "batch"  # prevent duplicate Merkle root submission
    FEDERATION = "federation"  # prevent duplicate export/import processing
    CONFIG_ROLLOUT = "config-rollout"  # prevent concurrent production rollout conflict


_KEY = re.compile(r"[A-Za-z0-9_.:@/+-]{1,150}")
MAX_TTL = timedelta(hours=24)


class LockBusy(RetryableError):
    """Another holder has the lock: the attempt fails and is retried by its policy."""

    def __init__(self, name: str, holder: str | None) -> None:
        super().__init__(f"lock {name!r} is held by {holder or 'another holder'}", error_code="LOCK_BUSY")
        self.name = name


def lock_name(kind: str, key: str) -> str:
    """``kind:key``, both checked: a key from a run's params never names a system lock."""
    try:
        valid_kind = LockKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in LockKind)
        raise ValidationError(f"unknown lock kind {kind!r} (known: {known})", field="kind") from None
    if not _KEY.fullmatch(key):
        raise ValidationError("1-150 of letters, digits and _ . : @ / + -", field="key")
    return f"{valid_kind.value}:{key}"


@dataclass
class HeldLock:
    """A lock while it is held: ``token`` fences writes made under it."""

    name: str
    owner: str
    token: int
    ttl: timedelta
    _renew: Callable[[HeldLock], bool]

    def renew(self) -> bool:
        """Extend the expiry by ``ttl`` from now; False if the lock was lost (it expired and was taken)."""
        return self._renew(self)


class NamedLocks:
    """Takes, renews and releases named locks in the store, on the store's clock."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    def acquire(self, name: str, owner: str, ttl: timedelta) -> HeldLock:
        if not timedelta(seconds=1) <= ttl <= MAX_TTL:
            raise ValidationError("between one second and 24 hours", field="ttl")
        with self.store.write() as tx:
            token = tx.lock_acquire(name, owner, self.now(), ttl)
            holder = None if token is not None else tx.lock_get(name)
        if token is None:
            raise LockBusy(name, holder.owner if holder is not None else None)
        return HeldLock(name, owner, token, ttl, self._renew)

    def _renew(self, held: HeldLock) -> bool:
        """Extend a lock still held under ``held.token``; never take it again. A renew that came
        after the expiry re-took an unclaimed lock under a new token: it said False, and the
        lock stayed held by nobody's release until its expiry (found by a review)."""
        now = self.now()
        with self.store.write() as tx:
            if not tx.lock_holds(held.name, held.owner, held.token, now):
                return False
            token = tx.lock_acquire(held.name, held.owner, now, held.ttl)
        return token == held.token

    def release(self, held: HeldLock) -> None:
        with self.store.write() as tx:
            tx.lock_release(held.name, held.owner, held.token)
