"""The ``pubsub`` section of ``jobgate.yaml``: which Redis to subscribe to, on which pattern, and
where the admin's mapping of results to definitions (``pubsub.yaml``) lives.

Checked when the configuration is read: asking for pub/sub triggers without the optional
``redis`` package is a configuration error naming the key, not a surprise at the first message.
The subscriber itself is ``runtime.pubsub``'s; the mapping file is ``service.pubsub_map``'s.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobgate.core.errors import ConfigurationError
from jobgate.documents import Reader

DEFAULT_PATTERN = "tdtp:pipeline:*"
DEFAULT_MAP = "pubsub.yaml"
_KEYS = ("url", "channel_pattern", "map", "tenant", "reconnect_max_seconds", "postgres_channel")
_URL_SCHEMES = ("redis://", "rediss://", "unix://")
# A literal prefix then one trailing ``*``: the prefix also names the polling keys
# (``<prefix><result_name>:state``), so it may hold no glob characters of its own.
_PATTERN = re.compile(r"[^*?\[\]\s]{1,200}\*")
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]{0,62}")
EXTRA_HINT = "needs the optional extra: pip install 'jobgate[pubsub]' (the redis package is missing)"


@dataclass(frozen=True)
class PubSubSettings:
    """``pubsub``: ``url`` None and no ``postgres_channel`` mean no subscriber (``/healthz``
    says ``skip``)."""

    url: str | None = None
    channel_pattern: str = DEFAULT_PATTERN
    map_path: Path | None = None  # the mapping file; None: ``pubsub.yaml`` beside the configuration
    tenant: str | None = None  # whose definitions run; None: ``server.tenant``
    reconnect_max: timedelta = timedelta(seconds=30)  # the cap of the exponential back-off
    postgres_channel: str | None = None  # also LISTEN here on the store's PostgreSQL (runtime.pg_listen)

    @property
    def prefix(self) -> str:
        """The channel pattern without its ``*``: a channel is ``<prefix><result_name>``."""
        return self.channel_pattern[:-1]

    def state_key(self, result_name: str) -> str:
        """The polling key the publisher SETs beside each PUBLISH (seed 004)."""
        return f"{self.prefix}{result_name}:state"


def redis_installed() -> bool:
    """Whether the ``redis`` package can be imported, without importing it."""
    return importlib.util.find_spec("redis") is not None


def safe_url(url: str) -> str:
    """``url`` without its password, for logs and health details."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def parse_pubsub_settings(r: Reader, value: Any, base_dir: Path) -> PubSubSettings:
    """The ``pubsub`` section, checked now (the URL's scheme, the pattern's shape, the extra)."""
    if value is None:
        return PubSubSettings()
    doc = r.mapping(value, "pubsub")
    r.only_keys(doc, "pubsub", _KEYS)
    url = None if doc.get("url") is None else _url(r, doc["url"], "pubsub.url")
    pattern = DEFAULT_PATTERN
    if "channel_pattern" in doc:
        pattern = r.string(
            doc["channel_pattern"],
            "pubsub.channel_pattern",
            pattern=_PATTERN,
            rule="must be a literal prefix ending in one '*' (like tdtp:pipeline:*)",
        )
    map_path = base_dir / r.string(doc["map"], "pubsub.map") if "map" in doc else base_dir / DEFAULT_MAP
    tenant = r.tenant(doc["tenant"], "pubsub.tenant") if "tenant" in doc else None
    cap = timedelta(seconds=30)
    if "reconnect_max_seconds" in doc:
        cap = r.duration(doc["reconnect_max_seconds"], "pubsub.reconnect_max_seconds")
    if url is not None and not redis_installed():
        r.fail("pubsub.url", EXTRA_HINT)
    channel = None
    if doc.get("postgres_channel") is not None:
        channel = r.string(
            doc["postgres_channel"],
            "pubsub.postgres_channel",
            pattern=_CHANNEL,
            rule="must be a plain lower-case identifier (letters, digits, '_'; at most 63)",
        )
    return PubSubSettings(url, pattern, map_path, tenant, cap, channel)


def with_url(settings: PubSubSettings, url: str, base_dir: Path, *, option: str = "--redis-url") -> PubSubSettings:
    """``settings`` with the URL a command line gave (``--redis-url``), checked as the key is."""
    r = Reader("command line", ConfigurationError)
    checked = _url(r, url, option)
    if not redis_installed():
        r.fail(option, EXTRA_HINT)
    return replace(settings, url=checked, map_path=settings.map_path or base_dir / DEFAULT_MAP)


def _url(r: Reader, value: Any, field: str) -> str:
    url = r.string(value, field)
    if not url.startswith(_URL_SCHEMES):
        r.fail(field, "must be a redis://, rediss:// or unix:// URL")
    return url
