"""PostgreSQL: every connection jobgate opens asks a silent peer whether it is still there (TCP
keepalives), so a wait on a server whose host vanished fails in about a minute instead of
never; a URL's own keepalive values win. Read from the operating system's socket options."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from jobgate.store.keepalive import PG_KEEPALIVES
from jobgate.store.listen import ChannelListener, listen_conninfo
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    if not database_url.startswith("postgresql"):
        pytest.skip("TCP keepalives are for PostgreSQL's connections; SQLite is a local file")
    yield database_url


def _socket_options(fd: int) -> dict[str, int]:
    sock = socket.socket(fileno=os.dup(fd))
    try:
        return {
            "keepalives": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "keepalives_idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "keepalives_interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "keepalives_count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
        }
    finally:
        sock.close()


def _store_socket(url: str) -> dict[str, int]:
    store = Store(url)
    try:
        with store.read() as tx:
            raw: Any = connection(tx).connection.dbapi_connection
            return _socket_options(raw.pgconn.socket)
    finally:
        store.dispose()


def test_a_stores_connections_keep_alive(pg_url: str) -> None:
    assert _store_socket(pg_url) == PG_KEEPALIVES


def test_the_urls_own_keepalive_values_win(pg_url: str) -> None:
    joiner = "&" if "?" in pg_url else "?"
    options = _store_socket(f"{pg_url}{joiner}keepalives_idle=7&keepalives_count=5")
    assert options == {**PG_KEEPALIVES, "keepalives_idle": 7, "keepalives_count": 5}


def test_a_listening_connection_keeps_alive(pg_url: str) -> None:
    conninfo = listen_conninfo(pg_url)
    assert conninfo is not None
    listener = ChannelListener(conninfo, "jobgate_keepalive_test")
    try:
        assert _socket_options(listener._conn.pgconn.socket) == PG_KEEPALIVES
    finally:
        listener.close()
