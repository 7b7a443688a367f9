"""TCP keepalives on every PostgreSQL connection jobgate opens.

A connection whose peer vanished without a word — its host powered off, a network cut, a
firewall that forgot the flow — gets no reset: a process waiting for an answer (a worker's
claim, a listener waiting for notifications) would wait on its socket for ever, holding its
leases' renewals up with it. With keepalives the operating system asks the silent peer after
``keepalives_idle`` seconds, then every ``keepalives_interval``, and gives the connection up
after ``keepalives_count`` unanswered asks (about a minute here): the wait fails, the loop logs
the outage and reconnects. A live server answers the asks itself, so a long statement is never
cut short. A URL's own values win.
"""

from __future__ import annotations

from typing import Any

PG_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


def keepalives(conninfo: str) -> dict[str, Any]:
    """``PG_KEEPALIVES`` less the ones ``conninfo`` (a URL or ``key=value`` string) sets itself."""
    from psycopg.conninfo import conninfo_to_dict  # PostgreSQL deployments only

    given = conninfo_to_dict(conninfo)
    return {key: value for key, value in PG_KEEPALIVES.items() if key not in given}
