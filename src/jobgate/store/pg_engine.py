"""The pool of PostgreSQL connections a store draws its transactions from.

A pooled connection can die while it sits idle: the server restarted, an operator or a
failover ended its session, ``idle_session_timeout`` closed it. Handing such a connection to a
transaction makes its first statement fail, so it must be found out at checkout. SQLAlchemy's
``pool_pre_ping`` finds it out by asking the server, a round trip before every transaction:
a tenth of a millisecond here, about a tenth of a single submission's time.

An idle connection hears nothing from a healthy server (this pool never ``LISTEN``s): whatever
ended it, the server's farewell (an error naming the termination, or the closed socket) is
waiting on the socket. So checkout looks there first, without a round trip, and asks the server
only when something has arrived; a connection the client knows is closed or broken is discarded
outright. A silent death (a host gone without closing the socket) is found by neither check
before the first statement, as it was not by the ping, which would wait for it as long.
"""

from __future__ import annotations

import select
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError


def postgres_engine(url: str, **pool: Any) -> Engine:
    """An engine on ``url`` whose pool checks each connection as it is handed out."""
    engine = create_engine(url, pool_pre_ping=False, **pool)
    event.listen(engine, "checkout", _check_alive)
    return engine


def _check_alive(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
    """Raise ``DisconnectionError`` for a connection that cannot serve a transaction: the pool
    then discards it and checks out another (a new one once the idle ones are used up)."""
    import psycopg  # PostgreSQL deployments only: a SQLite process never loads the driver

    if dbapi_conn.closed or dbapi_conn.broken:
        raise DisconnectionError("the connection is closed")
    if not _has_news(dbapi_conn):
        return
    try:  # something arrived on an idle connection: only the server can say whether it lives
        dbapi_conn.execute("SELECT 1").fetchall()
        dbapi_conn.rollback()
    except psycopg.Error as exc:
        raise DisconnectionError(f"the connection is gone: {type(exc).__name__}") from None


def _has_news(dbapi_conn: Any) -> bool:
    """Whether the server sent anything to this idle connection (readable socket, or EOF)."""
    import psycopg

    try:
        fd = dbapi_conn.pgconn.socket
    except psycopg.Error:  # libpq has no socket for it: as good as closed
        return True
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)
