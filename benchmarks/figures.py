"""What every benchmark prints: the machine it ran on, and percentiles of its samples."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
from pathlib import Path


def pct(xs: list[float], q: float) -> float:
    """The ``q``-th percentile by the nearest-rank rule (no interpolation)."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}"
    )


def busy_cpu_seconds() -> float:
    """CPU seconds this machine has spent busy (user, nice, system, irq, softirq) since boot,
    over all cores, from ``/proc/stat``; nan where there is none. A phase's difference, per
    job, counts what every process spent on it (workers, database server, submitter) and is
    far steadier than wall-clock rates on a shared machine: other guests show as steal time,
    which is not counted."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
