"""What every benchmark prints (the machine it ran on, percentiles of its samples, CPU by process)
and the module path of the processes it starts."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
from collections.abc import Callable
from pathlib import Path


def child_pythonpath(*dirs: object) -> str:
    """``PYTHONPATH`` for the processes a benchmark starts: its own folders (the job body, the
    peers' harness), then the caller's ``PYTHONPATH``. Keeping the caller's is what lets a
    comparison run another tree (``PYTHONPATH=/other/checkout/src python benchmarks/...``) in
    the workers and the server too, not only in the benchmark's own process."""
    own = [str(d) for d in dirs]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*own, *inherited])


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


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds one process (all its threads) has used, from ``/proc``; 0 if
    it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()  # from the third field (state) on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes_named(name: str) -> list[int]:
    """Ids of this machine's processes whose command name is ``name`` (the database server's
    backends: ``postgres``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


class CpuByClass:
    """CPU seconds spent between ``start`` and ``stop`` by classes of processes (workers, the
    database server, the submitting process): a phase's cost per job, explained by where it
    went. A process that starts during the phase counts from zero."""

    def __init__(self, classes: dict[str, Callable[[], list[int]]]) -> None:
        self._classes = classes
        self._before: dict[str, dict[int, float]] = {}
        self.spent: dict[str, float] = {}

    def _sample(self) -> dict[str, dict[int, float]]:
        return {name: {pid: process_cpu_seconds(pid) for pid in pids()} for name, pids in self._classes.items()}

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        self.spent = {
            name: sum(cpu - self._before[name].get(pid, 0.0) for pid, cpu in now.items()) for name, now in after.items()
        }
        return self.spent
