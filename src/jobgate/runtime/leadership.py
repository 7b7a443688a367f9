"""Holding a named, fenced lock by renewing it: how one process per cluster leads a duty.

The lock (``locks`` table) expires unless renewed; every new holder gets a larger fencing
token, so a holder that stalled past its expiry and lost the lock can be told apart from the
new one in every write it fences. ``hold`` renews at a third of the time to live, and a
process that is not the holder reads the lock first and only tries to take it once it has
expired, so standbys cost a read, not a write, per turn.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from jobgate.store.sqlstore import Store

log = logging.getLogger("jobgate.leadership")


class Lease:
    def __init__(self, store: Store, name: str, owner: str, ttl: timedelta) -> None:
        self.store = store
        self.name = name
        self.owner = owner
        self.ttl = ttl
        self.token: int | None = None
        self._renew_at: datetime | None = None
        self._expires_at: datetime | None = None

    def hold(self, now: datetime, *, min_remaining: timedelta | None = None) -> int | None:
        """Take or renew the lock; the fencing token while held, None while another holds it.
        ``min_remaining``: renew now unless the lock has at least that long left (a caller
        about to do something that must finish while it holds the lock)."""
        if (
            self.token is not None
            and self._renew_at is not None
            and now < self._renew_at
            and (min_remaining is None or (self._expires_at is not None and now + min_remaining <= self._expires_at))
        ):
            return self.token
        if self.token is None:
            with self.store.read() as tx:
                current = tx.lock_get(self.name)
            if current is not None and current.owner != self.owner and current.expires_at > now:
                return None  # led by another: nothing to write
        with self.store.write() as tx:
            token = tx.lock_acquire(self.name, self.owner, now, self.ttl)
        if token != self.token:
            state = "holds" if token is not None else "lost" if self.token is not None else "waits for"
            log.info("%s: %s %s", self.owner, state, self.name, extra={"action": "leadership", "lock": self.name})
        self.token = token
        self._renew_at = now + self.ttl / 3 if token is not None else None
        self._expires_at = now + self.ttl if token is not None else None
        return token

    def within_renewal(self, wait: timedelta) -> timedelta:
        """``wait``, or less: a loop that holds this lock must pass again before its renewal is
        due (a third of the time to live). A review's scheduler with a 1 s lease slept its 1 s
        tick and let the lease lapse every other turn, a standby taking over each time."""
        return min(wait, self.ttl / 3) if self.token is not None else wait

    def lost(self) -> None:
        """Forget the token: a fenced write found the lock taken by another holder."""
        if self.token is not None:
            log.info("%s: lost %s", self.owner, self.name, extra={"action": "leadership", "lock": self.name})
        self.token = None
        self._renew_at = None
        self._expires_at = None

    def release(self) -> None:
        """Hand over at once instead of at expiry (a clean shutdown)."""
        if self.token is None:
            return
        try:
            with self.store.write() as tx:
                tx.lock_release(self.name, self.owner, self.token)
        except Exception:
            log.warning("could not release %s; it expires by itself", self.name, exc_info=True)
        self.token = None
