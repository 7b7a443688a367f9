"""Redis pub/sub triggers (seed 004): one PSUBSCRIBE connection, a completion in, a trigger out.

The subscriber is a ``Loop`` run by a ``LoopThread``: each pass connects if it must, then
waits up to ``poll`` for one message and hands it to ``service.pubsub_map.judge`` (which
subscriptions it fires; the message never picks) and ``service.pubsub_triggers.fire`` (the
one trigger path: approval, gates, audit). One connection covers every pipeline: a new
``result_name`` needs only an entry in the mapping file, which is re-read when it changes.

Delivery is **at most once**: Redis pub/sub keeps nothing for a subscriber that is not
connected. Two things narrow the gap. On every (re)connection, after subscribing, the
polling keys ``<prefix><result_name>:state`` of the mapped results are read, so the last
completion of each published while jobgate was away is noticed. And the trigger's identity
is the result name plus the completion's timestamp, so hearing it again (the state key at the
next start, the message and the key both) is the same run, never a second one.

A lost connection is retried with exponential back-off capped at
``pubsub.reconnect_max_seconds``; ``health()`` says ``disconnected`` meanwhile.
``redis`` is an optional extra, imported only when a subscriber is built.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from jobgate.config.pubsub import EXTRA_HINT, PubSubSettings, safe_url, with_url
from jobgate.core.errors import ConfigurationError
from jobgate.runtime.completions import Completions
from jobgate.runtime.event_sources import RECONNECT_BASE, EventSource, ReconnectingSource, Sources
from jobgate.runtime.pg_listen import PgListen
from jobgate.service.engine import Engine

log = logging.getLogger("jobgate.pubsub")

POLL = timedelta(seconds=1)  # the longest a pass waits for a message (and a stop waits for it)
HEALTH_CHECK_SECONDS = 15  # a PING on an idle subscription finds a half-open connection


def _redis() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigurationError(EXTRA_HINT, field="pubsub.url") from None
    return redis


class RedisPubSub(ReconnectingSource):
    """The Redis pub/sub ``EventSource`` and the ``Loop`` that runs it."""

    name = "pubsub"
    leader_only = False  # every node may listen: the run's identity makes a completion one run

    def __init__(
        self,
        engine: Engine,
        settings: PubSubSettings,
        *,
        poll: timedelta = POLL,
        reconnect_base: timedelta = RECONNECT_BASE,
    ) -> None:
        if settings.url is None or settings.map_path is None:
            raise ConfigurationError("no Redis URL to subscribe to", field="pubsub.url")
        self._redis = _redis()  # a missing extra fails the start, naming the key
        super().__init__(engine.clock, reconnect_max=settings.reconnect_max, poll=poll, reconnect_base=reconnect_base)
        self.engine = engine
        self.settings = settings
        self.tenant_id = settings.tenant or engine.config.server.tenant
        self.completions = Completions(engine, settings.map_path, self.tenant_id, self.stats)
        self._client: Any = None
        self._pubsub: Any = None
        # A name of its own on the broker (CLIENT LIST): operators and tests find this connection.
        self.client_name = f"jobgate-pubsub-{uuid.uuid4().hex[:12]}"
        self.where = f"pub/sub {settings.channel_pattern} on {safe_url(settings.url or '')}"

    @property
    def connected(self) -> bool:
        return self._pubsub is not None

    # --- Loop ----------------------------------------------------------------------------

    def step(self, now: datetime) -> timedelta:
        # Any error of the broker's, not only a dropped connection: a refused command (a database
        # number out of range, an ACL's NOPERM) is a connection that cannot serve, and backs off
        # with the same log line (found by a review: a traceback a second instead).
        errors = (self._redis.RedisError, OSError)
        if self._pubsub is None:
            try:
                self._connect()
            except errors as exc:
                return self._lost(exc)
        try:
            message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=self.poll.total_seconds())
        except errors as exc:
            return self._lost(exc)
        if message is not None and message.get("type") == "pmessage":
            self._heard(message["channel"], message["data"])
        return timedelta(0)

    # --- the connection ------------------------------------------------------------------

    def _connect(self) -> None:
        redis = self._redis
        client = redis.Redis.from_url(
            self.settings.url,
            client_name=self.client_name,
            socket_connect_timeout=5,
            health_check_interval=HEALTH_CHECK_SECONDS,
            retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),  # we reconnect, and say so
        )
        pubsub = client.pubsub()
        try:
            pubsub.psubscribe(self.settings.channel_pattern)
            self._confirmed(pubsub)
            # Subscribed first, then the polling keys: a completion between the two is heard
            # twice at worst (one run), never missed by both.
            names = self.completions.current().result_names
            states = client.mget([self.settings.state_key(n) for n in names]) if names else []
        except BaseException:
            pubsub.close()
            client.close()
            raise
        self._client, self._pubsub = client, pubsub
        self._now_connected()
        for name, value in zip(names, states, strict=True):
            if value is not None:
                self.completions.heard(value, channel_result=name, via="state")
        self.stats.add("state_reads")

    def _confirmed(self, pubsub: Any) -> None:
        """Wait for the server's PSUBSCRIBE confirmation: only then is a completion published
        from now on sure to reach us, so only then do we say ``connected`` and read the keys."""
        for _ in range(16):
            reply = pubsub.get_message(timeout=5)
            if reply is not None and reply.get("type") == "psubscribe":
                return
        raise self._redis.ConnectionError("no PSUBSCRIBE confirmation")

    def _drop(self) -> None:
        pubsub, client, self._pubsub, self._client = self._pubsub, self._client, None, None
        for closable in (pubsub, client):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # already broken: nothing more to release
                    log.debug("pub/sub: closing a broken connection failed", exc_info=True)

    # --- messages ------------------------------------------------------------------------

    def _heard(self, channel: bytes | str, data: bytes | str) -> None:
        self.stats.add("messages")
        name = channel.decode("utf-8", "replace") if isinstance(channel, bytes) else channel
        suffix = name[len(self.settings.prefix) :] if name.startswith(self.settings.prefix) else None
        self.completions.heard(data, channel_result=suffix, via="message")


def pubsub_source(engine: Engine, redis_url: str | None = None) -> EventSource | None:
    """The completion sources the configuration asks for (``pubsub.url``, or ``--redis-url``
    over it, and ``pubsub.postgres_channel``), as one, or None. Built before anything starts,
    so a bad mapping, a missing extra or a channel without PostgreSQL fails the start."""
    settings = engine.config.pubsub
    if redis_url:
        settings = with_url(settings, redis_url, engine.config.base_dir)
    sources: list[EventSource] = []
    if settings.url is not None:
        sources.append(RedisPubSub(engine, settings))
    if settings.postgres_channel is not None:
        sources.append(PgListen(engine, settings))
    if not sources:
        return None
    return sources[0] if len(sources) == 1 else Sources(sources)
