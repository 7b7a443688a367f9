"""PostgreSQL ``LISTEN`` triggers: the second completion source, through the same protocol.

A publisher that shares jobgate's PostgreSQL sends ``NOTIFY <pubsub.postgres_channel>,
'<json>'`` (or ``SELECT pg_notify(...)``) with the same completion message as on Redis;
``Completions`` judges it against the same ``pubsub.yaml`` and fires through the one trigger
path. Like Redis pub/sub it is **at most once** (a notification sent while nobody listens is
gone), and like it the run's key makes a repeated completion one run. There is no polling key:
a publisher that needs more keeps its own table.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from jobgate.config.pubsub import PubSubSettings
from jobgate.core.errors import ConfigurationError
from jobgate.runtime.completions import Completions
from jobgate.runtime.event_sources import RECONNECT_BASE, Health, SourceStats, reconnect_delay
from jobgate.runtime.loops import LoopThread
from jobgate.service.engine import Engine
from jobgate.store.listen import ChannelListener, listen_conninfo, listen_errors

log = logging.getLogger("jobgate.pubsub")

POLL = timedelta(seconds=1)


class PgListen:
    """The PostgreSQL ``LISTEN`` ``EventSource`` and the ``Loop`` that runs it."""

    name = "pg_listen"
    leader_only = False

    def __init__(
        self,
        engine: Engine,
        settings: PubSubSettings,
        *,
        poll: timedelta = POLL,
        reconnect_base: timedelta = RECONNECT_BASE,
    ) -> None:
        conninfo = listen_conninfo(engine.store.url)
        if settings.postgres_channel is None or settings.map_path is None:
            raise ConfigurationError("no channel to listen on", field="pubsub.postgres_channel")
        if conninfo is None:
            raise ConfigurationError("needs jobgate's database to be PostgreSQL", field="pubsub.postgres_channel")
        self.channel = settings.postgres_channel
        self.settings = settings
        self.poll = poll
        self.reconnect_base = reconnect_base
        self.stats = SourceStats()
        self.completions = Completions(
            engine, settings.map_path, settings.tenant or engine.config.server.tenant, self.stats
        )
        self._conninfo = conninfo
        self._listener: ChannelListener | None = None
        self._failures = 0
        self._thread = LoopThread(self, engine.clock)

    # --- EventSource ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
        self._thread.join(timeout=self.poll.total_seconds() + 10)

    def health(self) -> Health:
        return "connected" if self._listener is not None else "disconnected"

    @property
    def running(self) -> bool:
        return self._thread.running

    @property
    def backend_pid(self) -> int | None:
        """The listening session's server process (``pg_stat_activity``), while connected."""
        return None if self._listener is None else self._listener.backend_pid

    # --- Loop ----------------------------------------------------------------------------

    def step(self, now: datetime) -> timedelta:
        errors = listen_errors()
        try:
            if self._listener is None:
                self._listener = ChannelListener(self._conninfo, self.channel)
                self._failures = 0
                self.stats.add("connects")
                log.info("listening on %s", self.channel, extra={"action": "pubsub_connected"})
            payloads = self._listener.payloads(self.poll.total_seconds())
        except errors as exc:
            return self._lost(exc)
        for payload in payloads:
            self.stats.add("messages")
            self.completions.heard(payload, channel_result=None, via="notify")
        return timedelta(0)

    def close(self) -> None:
        self._drop()

    def _lost(self, exc: BaseException) -> timedelta:
        was_connected = self._listener is not None
        self._drop()
        self._failures += 1
        delay = reconnect_delay(self._failures, self.settings.reconnect_max, self.reconnect_base)
        self.stats.add("disconnects" if was_connected else "connect_failures")
        log.warning(
            "listening on %s: %s; reconnecting in %.1fs",
            self.channel,
            type(exc).__name__,
            delay.total_seconds(),
            extra={"action": "pubsub_disconnected", "failures": self._failures},
        )
        return delay

    def _drop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:  # already broken: nothing more to release
                log.debug("closing a broken listening connection failed", exc_info=True)
