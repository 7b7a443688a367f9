"""The loop runner: steps a loop at the wake it asks for, wakes early when told, keeps going past a
failing pass, closes the loop once when stopped, and counts passes so tests wait on signals."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.exc import OperationalError

from jobgate.runtime.loops import LoopThread
from jobgate.testing import FakeClock, run_loop

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class Recording:
    """A loop that records each pass's instant; fails the passes named in ``fail``."""

    name = "recording"
    leader_only = False

    def __init__(self, wait: timedelta, fail: frozenset[int] = frozenset()) -> None:
        self.wait = wait
        self.fail = fail
        self.seen: list[datetime] = []
        self.closed = 0
        self.closing_thread: str | None = None

    def step(self, now: datetime) -> timedelta:
        self.seen.append(now)
        if len(self.seen) in self.fail:
            raise RuntimeError(f"pass {len(self.seen)} fails")
        return self.wait

    def close(self) -> None:
        self.closed += 1
        self.closing_thread = threading.current_thread().name


def test_a_loop_that_asks_for_no_wait_is_stepped_again_at_once_and_closed_once() -> None:
    loop = Recording(timedelta(0))
    clock = FakeClock(T0)
    with run_loop(loop, clock) as thread:
        assert thread.wait_passes(5, timeout=10)
        assert thread.running
    assert loop.closed == 1 and loop.closing_thread == "jobgate-recording"
    assert set(loop.seen) == {T0}  # the loop's clock, not the wall clock


def test_a_waiting_loop_is_woken_early_and_stopped_at_once() -> None:
    loop = Recording(timedelta(hours=1))
    with run_loop(loop, FakeClock(T0)) as thread:
        assert thread.wait_passes(1, timeout=10)
        assert not thread.wait_passes(2, timeout=0.2)  # it waits its hour
        thread.wake()
        assert thread.wait_passes(2, timeout=10)
    assert loop.closed == 1  # stop interrupted the hour's wait


def _passes_without_back_off(loop: Recording, passes: int) -> None:
    """Run ``loop`` with no back-off after a failed pass until it has made ``passes``, then stop it."""
    thread = LoopThread(loop, FakeClock(T0), error_backoff=timedelta(0)).start()
    try:
        assert thread.wait_passes(passes, timeout=10)
    finally:
        thread.stop()
        assert thread.join(10)


def test_a_failing_pass_is_counted_and_the_loop_goes_on_after_its_back_off() -> None:
    loop = Recording(timedelta(0), fail=frozenset({1, 2}))
    _passes_without_back_off(loop, 4)
    assert len(loop.seen) >= 4 and loop.closed == 1


class Disconnected(Recording):
    """A loop whose first pass finds its database session dropped (a killed backend)."""

    def step(self, now: datetime) -> timedelta:
        self.seen.append(now)
        if len(self.seen) == 1:
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
        if len(self.seen) == 2:
            raise RuntimeError("a bug")
        return self.wait


def test_a_dropped_session_is_one_warning_line_and_a_bug_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a review: killed database sessions filled the outbox and workflow loops' logs with
    ERROR entries of sixty-line tracebacks, where the guide calls them passing errors and the
    worker's cycle logs one warning line for them."""
    _passes_without_back_off(Disconnected(timedelta(0)), 3)
    failed = [r for r in caplog.records if getattr(r, "action", None) == "loop_failed"]
    assert [(r.levelname, r.exc_info is not None) for r in failed] == [("WARNING", False), ("ERROR", True)]
    assert "database unavailable (OperationalError)" in failed[0].getMessage()


def test_the_fake_clock_moves_only_forward_and_when_told() -> None:
    clock = FakeClock(T0)
    assert clock.now() == T0
    assert clock.advance(timedelta(minutes=5)) == clock.now() == T0 + timedelta(minutes=5)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="naive"):
        FakeClock(datetime(2026, 1, 1))
