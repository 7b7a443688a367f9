"""Tests wait on signals, not sleeps.

A test that sleeps and hopes is slow when the sleep is long and flaky when it is short. Tests
wait for what they need: a ``threading.Event`` the code under test or a test handler sets,
``LoopThread.wait_passes``, a ``FakeClock`` moved on (rate limits, windows, TTLs), or, where the
code offers no signal, ``runtime_support.wait_until`` on a real condition with a deadline.

So a sleep under ``tests/`` carries a comment saying why, on its line or the line just before:

- ``# real time: <why>`` anywhere: a process-level test where wall-clock time is the thing
  tested (a subprocess on the host's clock, a leader failing over across processes, a command
  killed after its grace, a receiver slow on the wire);
- in the few files of ``ALLOWED`` only, that file's own marker, for the reason given there.

A fresh event's ``wait`` (``threading.Event().wait(0.5)``) is a sleep by another name and is
held to the same rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

REAL_TIME = "# real time:"

# file (relative to tests/) -> (the marker its sleeps carry, why sleeping is right there)
ALLOWED: dict[str, tuple[str, str]] = {
    "service/engine_handlers.py": (
        "the job's work",
        "job handlers: a sleep is the work being scheduled (a job that takes time, ignores a stop, "
        "is killed), and some run in worker subprocesses where a gate file is the only signal",
    ),
    "workflows/workflow_handlers.py": (
        "the step's work",
        "workflow step handlers: a sleep is the step being scheduled, killed with its worker process",
    ),
    "runtime/runtime_support.py": (
        "the polling itself",
        "wait_until: the one polling helper, for a real condition the code offers no signal for",
    ),
}

# ``time.sleep(``, ``sleep(``, ``asyncio.sleep(`` (not ``def sleep(``: a handler's name), and a
# fresh event's ``wait(``.
SLEEP = re.compile(r"(?<!def )\bsleep\s*\(|Event\(\)\s*\.wait\(")


def unexplained(text: str, marker: str | None = None) -> list[int]:
    """Line numbers (1-based) of the sleeps in ``text`` without a ``# real time:`` comment (or
    ``marker``) on their line or the line just before."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        if not SLEEP.search(line):
            continue
        near = line + "\n" + (lines[number - 2] if number > 1 else "")
        if REAL_TIME in near or (marker is not None and marker in near):
            continue
        found.append(number)
    return found


def test_every_sleep_in_the_tests_says_why() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue  # this file names the patterns it looks for
        relative = path.relative_to(TESTS).as_posix()
        marker = ALLOWED[relative][0] if relative in ALLOWED else None
        text = path.read_text(encoding="utf-8")
        offenders += [f"tests/{relative}:{n}: {text.splitlines()[n - 1].strip()}" for n in unexplained(text, marker)]
    assert not offenders, (
        "a test sleeps without saying why; wait on a signal (an event, wait_passes, a FakeClock, "
        "wait_until on a real condition), or comment '# real time: <why>' if wall-clock time is the "
        "thing tested:\n" + "\n".join(offenders)
    )


def test_the_allowed_files_exist_and_still_sleep() -> None:
    """An allow-list entry that no longer applies is removed, not kept as a loophole."""
    for relative, (marker, _why) in ALLOWED.items():
        text = (TESTS / relative).read_text(encoding="utf-8")
        assert any(SLEEP.search(line) for line in text.splitlines()), f"{relative} no longer sleeps"
        assert marker in text, f"{relative}: no sleep is marked '{marker}'"


@pytest.mark.parametrize(
    ("text", "marker", "found"),
    [
        ("import time\ntime.sleep(1)\n", None, [2]),
        ("from time import sleep\nsleep(0.5)\n", None, [2]),
        ("await asyncio.sleep(1)\n", None, [1]),
        ("threading.Event().wait(0.3)\n", None, [1]),
        ("time.sleep(1)  # real time: a subprocess on the host clock\n", None, []),
        ("# real time: leaders fail over across processes\ntime.sleep(4)\n", None, []),
        ("# real time: too far above\n\ntime.sleep(4)\n", None, [3]),
        ("time.sleep(1)  # the job's work\n", "the job's work", []),
        ("time.sleep(1)  # the job's work\n", None, [1]),
        ("def sleep(ctx):\n    return ctx.cancelled.wait(1)\n", None, []),
        ("done.wait(5)\nworker.wait_passes(2, timeout=10)\n", None, []),
    ],
)
def test_the_scan_finds_what_it_should(text: str, marker: str | None, found: list[int]) -> None:
    assert unexplained(text, marker) == found
