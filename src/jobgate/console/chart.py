"""The overview's chart of the last 24 hours: runs ended per hour, stacked by outcome.

A pure function of the counts the store returns (``runs_ended_by_bucket``), so the geometry is
tested without a browser; the template draws it as SVG (no chart library, no script) and
repeats the figures in a table for screen readers and for copying.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobgate.core.states import RunStatus

HOURS = 24
HOUR = timedelta(hours=1)
# Stacking order, bottom first: success at the base, then the outcomes a reader looks for.
OUTCOMES = tuple(
    s.value
    for s in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTERED, RunStatus.ESCALATED, RunStatus.CANCELLED)
)

WIDTH, HEIGHT = 720, 200
LEFT, BOTTOM, TOP = 44, 22, 8
SLOT = (WIDTH - LEFT) / HOURS


@dataclass(frozen=True)
class Hour:
    start: datetime
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    outcome: str
    count: int
    start: datetime


@dataclass(frozen=True)
class Chart:
    hours: list[Hour]
    bars: list[Bar]
    peak: int  # the value of the top grid line
    ticks: list[tuple[float, int]]  # (y, value) of each horizontal grid line
    labels: list[tuple[float, str]]  # (x, "HH:00") under every fourth hour
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def total(self) -> int:
        return sum(h.total for h in self.hours)


def window_start(now: datetime) -> datetime:
    """The start of the 24 hours shown: the hour 23 hours before the current one, so the last
    bar is the hour now under way."""
    return now.replace(minute=0, second=0, microsecond=0) - (HOURS - 1) * HOUR


def _nice_peak(largest: int) -> int:
    """The smallest of 1, 2 or 5 times a power of ten at or above ``largest`` (at least 1): round grid lines."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= largest:
                return factor * step
        step *= 10


def throughput_chart(counts: Iterable[tuple[int, str, int]], since: datetime) -> Chart:
    """The chart of ``counts`` — (hour index from ``since``, final status, runs) — over the
    24 hours from ``since``; indexes outside them (a clock step) are left out."""
    hours = [Hour(since + i * HOUR, {}) for i in range(HOURS)]
    for index, outcome, n in counts:
        if 0 <= index < HOURS and n > 0:
            hours[index].counts[outcome] = hours[index].counts.get(outcome, 0) + n
    peak = _nice_peak(max((h.total for h in hours), default=0))
    plot = HEIGHT - BOTTOM - TOP
    bars: list[Bar] = []
    for i, h in enumerate(hours):
        base = float(HEIGHT - BOTTOM)
        for outcome in sorted(h.counts, key=lambda o: OUTCOMES.index(o) if o in OUTCOMES else len(OUTCOMES)):
            height = plot * h.counts[outcome] / peak
            base -= height
            bars.append(Bar(LEFT + i * SLOT + 2, base, SLOT - 4, height, outcome, h.counts[outcome], h.start))
    ticks = [(HEIGHT - BOTTOM - plot * k / 4, peak * k // 4) for k in range(5) if peak * k % 4 == 0]
    labels = [(LEFT + i * SLOT + SLOT / 2, hours[i].start.strftime("%H:00")) for i in range(0, HOURS, 4)]
    return Chart(hours=hours, bars=bars, peak=peak, ticks=ticks, labels=labels)
