"""PostgreSQL wake-ups: a committed run is announced on a channel, idle workers listen.

Transactions that make a run claimable now (a new run, a run released back to the queue)
send ``NOTIFY jobgate_runs``; PostgreSQL delivers it at commit, once per transaction, to every
listening session. A worker's watcher listens on a connection of its own, in a thread, and
wakes the worker within milliseconds of the commit. Notifications can be lost (the listening
connection drops, the server restarts): after every (re)connection the watcher reports a
change once, so the worker looks, and the worker's polling stays as the fallback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from jobgate.store.keepalive import keepalives

log = logging.getLogger("jobgate.notify")

CHANNEL = "jobgate_runs"
NOTIFY_SQL = f"NOTIFY {CHANNEL}"
APPLICATION_NAME = "jobgate-listen"


class PgChangeWatcher:
    """Tells whether a run became claimable since the last look; calls ``on_change`` at once."""

    cheap = False  # the worker waits for ``on_change`` instead of asking in a tight loop

    def __init__(
        self,
        conninfo: str,
        on_change: Callable[[], None] | None = None,
        *,
        max_backoff: float = 5.0,
    ) -> None:
        self._conninfo = conninfo
        self._on_change = on_change
        self._max_backoff = max_backoff
        self._changed = threading.Event()
        self._changed.set()  # the first look reads the queue
        self._stop = threading.Event()
        self.listening = threading.Event()  # set while the LISTEN connection is up
        self._thread = threading.Thread(target=self._listen, name="jobgate-listen", daemon=True)
        self._thread.start()

    def changed(self) -> bool:
        if self._changed.is_set():
            self._changed.clear()
            return True
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)

    def _signal(self) -> None:
        self._changed.set()
        if self._on_change is not None:
            self._on_change()

    def _listen(self) -> None:
        import psycopg  # PostgreSQL deployments only: a SQLite process never loads the driver

        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=5,
                    application_name=APPLICATION_NAME,
                    **keepalives(self._conninfo),
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._signal()  # whatever was committed while nobody listened
                    # Only then "listening": whoever waits for it and then looks has seen that
                    # signal (a look made between the two was signalled again a moment later).
                    self.listening.set()
                    backoff = 0.1
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.2):  # short: close() waits at most this
                            self._signal()
            except psycopg.Error as exc:
                self.listening.clear()
                if self._stop.is_set():
                    return
                log.warning("listening for new runs failed (%s); polling meanwhile, reconnecting", type(exc).__name__)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
        self.listening.clear()
