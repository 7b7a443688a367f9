"""A PostgreSQL ``LISTEN`` channel read on a connection of its own (``runtime.pg_listen``).

The store is the only code that speaks SQL, so the ``LISTEN`` statement lives here; the
event source above only asks for the next payloads. A payload is text the publisher chose
(``NOTIFY channel, '<json>'`` or ``pg_notify``): what it may fire is judged elsewhere.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import make_url

from jobgate.store.keepalive import keepalives

APPLICATION_NAME = "jobgate-pubsub-listen"
CHANNEL_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # an unquoted identifier: safe in LISTEN


def listen_conninfo(store_url: str) -> str | None:
    """The libpq connection string of the store's database, or None when it is not PostgreSQL."""
    parsed = make_url(store_url)
    if parsed.get_backend_name() != "postgresql":
        return None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def listen_errors() -> tuple[type[BaseException], ...]:
    """What a lost or refused listening connection raises, for the source to count and retry."""
    import psycopg

    return (psycopg.Error, OSError)


class ChannelListener:
    """One autocommit connection listening on one channel (errors: ``listen_errors``)."""

    def __init__(self, conninfo: str, channel: str) -> None:
        if CHANNEL_PATTERN.fullmatch(channel) is None:
            raise ValueError(f"not a plain channel name: {channel!r}")
        import psycopg  # PostgreSQL deployments only: a SQLite process never loads the driver

        self._conn: Any = psycopg.connect(
            conninfo, autocommit=True, connect_timeout=5, application_name=APPLICATION_NAME, **keepalives(conninfo)
        )
        try:
            self._conn.execute(f"LISTEN {channel}")
        except BaseException:
            self._conn.close()
            raise
        self.backend_pid: int = self._conn.info.backend_pid

    def payloads(self, timeout: float) -> list[str]:
        """The payloads that arrive within ``timeout`` seconds (at most one wait)."""
        return [n.payload for n in self._conn.notifies(timeout=timeout, stop_after=1)]

    def close(self) -> None:
        self._conn.close()
