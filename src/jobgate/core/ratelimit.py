"""Rate limits as a generic cell rate algorithm (GCRA): one timestamp of state per key.

A limit of ``rate`` runs per second with a burst of ``burst`` admits a run when the key's
theoretical arrival time (TAT) is at most ``burst / rate`` ahead of now. Admitting ``n`` runs
advances the TAT by ``n / rate``. The state is one row per key, updated in the claim
transaction, so the limit holds for every worker that shares the database.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

# A rate below one run a day is a configuration mistake (and its interval would overflow dates).
MIN_RATE = 1 / 86_400
MAX_RATE = 1_000_000.0


def check_rate(rate: float) -> str | None:
    """The reason a rate is unusable, or None."""
    if not MIN_RATE <= rate <= MAX_RATE:
        return f"must be between {MIN_RATE:.8f} (one a day) and {MAX_RATE:.0f} runs per second"
    return None


def admit(tat: datetime | None, now: datetime, *, rate: float, burst: int, wanted: int) -> tuple[int, datetime]:
    """How many of ``wanted`` runs may start now, and the key's new TAT."""
    if check_rate(rate) is not None:
        raise ValueError(f"rate {rate} out of range")
    # Round the interval up to whole microseconds: rounding down would admit slightly too much.
    interval = timedelta(microseconds=math.ceil(1_000_000 / rate))
    tat = max(tat or now, now)
    allowance = now + interval * max(burst, 1)
    admitted = 0
    while admitted < wanted and tat + interval <= allowance:
        tat += interval
        admitted += 1
    return admitted, tat
