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
from jobgate.runtime.event_sources import RECONNECT_BASE, ReconnectingSource
from jobgate.service.engine import Engine
from jobgate.store.listen import ChannelListener, listen_conninfo, listen_errors

log = logging.getLogger("jobgate.pubsub")

POLL = timedelta(seconds=1)


class PgListen(ReconnectingSource):
    """The PostgreSQL ``LISTEN`` ``EventSource`` and the ``Loop`` that runs it."""

    name = "pg_listen"

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
        super().__init__(engine.clock, reconnect_max=settings.reconnect_max, poll=poll, reconnect_base=reconnect_base)
        self.channel = settings.postgres_channel
        self.settings = settings
        self.completions = Completions(
            engine, settings.map_path, settings.tenant or engine.config.server.tenant, self.stats
        )
        self._conninfo = conninfo
        self._listener: ChannelListener | None = None
        self.where = f"listening on {self.channel}"

    @property
    def connected(self) -> bool:
        return self._listener is not None

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
                self._now_connected()
            payloads = self._listener.payloads(self.poll.total_seconds())
        except errors as exc:
            return self._lost(exc)
        for payload in payloads:
            self.stats.add("messages")
            self.completions.heard(payload, channel_result=None, via="notify")
        return timedelta(0)

    def _drop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:  # already broken: nothing more to release
                log.debug("closing a broken listening connection failed", exc_info=True)
