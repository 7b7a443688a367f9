"""Stopping a command (seed 004 "Stop"): SIGTERM to the process group, SIGKILL after the grace period.

Each child writes a ``ready`` file once its signal disposition is in place, and the test waits
for that file (with a timeout) before stopping it, so no test depends on how fast Python starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from jobgate.core.decide import OutcomeKind
from jobgate.registry import RunnerSpec
from jobgate.runtime.executors import CommandExecutor, ExecutionContext, ExecutionResult

from .support import make_context, read_log, wait_for

# The children run until a signal ends them: ``signal.pause`` returns only when a handler ran.
# Each publishes ``ready`` whole (written aside, then renamed): the test reads it the moment it
# exists, and a file created by ``write_text`` can be seen before its text is in it.
EXITS_ON_TERM = """
import os, pathlib, signal, sys
def bye(signum, frame):
    print('got SIGTERM, leaving', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
pathlib.Path('ready.part').write_text('ready'); os.replace('ready.part', 'ready')
while True:
    signal.pause()
"""

IGNORES_TERM = """
import os, pathlib, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path('ready.part').write_text(str(os.getpid())); os.replace('ready.part', 'ready')
while True:
    signal.pause()
"""

# A leader that ignores SIGTERM and has a grandchild that ignores it too: only a group kill reaches both.
SPAWNS_GRANDCHILD = f"""
import os, pathlib, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, '-c', {IGNORES_TERM!r}], cwd='grandchild')
while not pathlib.Path('grandchild/ready').exists():
    # real time: the leader waits for another process, whose file is the only signal it has
    time.sleep(0.01)
pathlib.Path('ready.part').write_text(str(os.getpid())); os.replace('ready.part', 'ready')
while True:
    signal.pause()
"""


def runner(code: str, stop_grace: timedelta = timedelta(seconds=10)) -> RunnerSpec:
    return RunnerSpec(name="py", binary=sys.executable, args=("-c", code), stop_grace=stop_grace)


class Launcher:
    """Starts attempts in background threads; at teardown it stops whatever a failed test left running."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=4)
        self.started: list[tuple[CommandExecutor, ExecutionContext]] = []

    def start(self, executor: CommandExecutor, ctx: ExecutionContext) -> Future[ExecutionResult]:
        self.started.append((executor, ctx))
        future = self.pool.submit(executor.execute, ctx)
        wait_for(lambda: (ctx.workdir / "ready").exists() or future.done(), what="the child to be ready")
        assert not future.done(), future.result().outcome
        return future

    def close(self) -> None:
        for executor, ctx in self.started:
            executor.stop(ctx, timedelta(0))
        self.pool.shutdown(wait=True)


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    launcher = Launcher()
    try:
        yield launcher
    finally:
        launcher.close()


def is_gone(pid: int) -> bool:
    """Dead means no such process, or a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_stop_sends_sigterm_and_a_cooperative_child_exits_at_once(tmp_path: Path, launcher: Launcher) -> None:
    ctx = make_context(tmp_path)
    executor = CommandExecutor(runner(EXITS_ON_TERM), None, {})
    future = launcher.start(executor, ctx)
    began = time.monotonic()
    executor.stop(ctx, timedelta(seconds=5))
    stopped_after = time.monotonic() - began
    result = future.result(timeout=5)
    assert result.outcome.kind is OutcomeKind.STOPPED
    assert stopped_after < 2.5, "a child that honours SIGTERM must not wait out the grace period"
    assert "got SIGTERM, leaving" in read_log(ctx)
    assert ctx.is_cancelled()


def test_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path, launcher: Launcher) -> None:
    ctx = make_context(tmp_path)
    executor = CommandExecutor(runner(IGNORES_TERM), None, {})
    grace = 0.5
    future = launcher.start(executor, ctx)
    pid = int((ctx.workdir / "ready").read_text())
    began = time.monotonic()
    executor.stop(ctx, timedelta(seconds=grace))
    stopped_after = time.monotonic() - began
    result = future.result(timeout=5)
    assert grace * 0.9 <= stopped_after < grace + 2.0, stopped_after
    assert result.outcome.kind is OutcomeKind.STOPPED
    assert result.outcome.error_message is not None and "SIGKILL" in result.outcome.error_message
    assert is_gone(pid)


def test_stop_kills_the_whole_process_group(tmp_path: Path, launcher: Launcher) -> None:
    ctx = make_context(tmp_path)
    (ctx.workdir / "grandchild").mkdir()
    executor = CommandExecutor(runner(SPAWNS_GRANDCHILD), None, {})
    future = launcher.start(executor, ctx)
    grandchild = int((ctx.workdir / "grandchild" / "ready").read_text())
    try:
        assert not is_gone(grandchild)
        executor.stop(ctx, timedelta(seconds=0.3))
        result = future.result(timeout=5)
        assert result.outcome.kind is OutcomeKind.STOPPED
        wait_for(lambda: is_gone(grandchild), what="the grandchild to die with its group")
    finally:  # if the group kill failed, do not leak the grandchild into the test session
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


# A leader that leaves on SIGTERM, and a child of it that ignores SIGTERM.
LEAVES_A_STUBBORN_CHILD = f"""
import os, pathlib, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', {IGNORES_TERM!r}], cwd='grandchild')
while not pathlib.Path('grandchild/ready').exists():
    # real time: the leader waits for another process, whose file is the only signal it has
    time.sleep(0.01)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
pathlib.Path('ready.part').write_text(str(os.getpid())); os.replace('ready.part', 'ready')
while True:
    signal.pause()
"""


def test_a_member_ignoring_sigterm_is_killed_after_the_grace_though_the_leader_left(
    tmp_path: Path, launcher: Launcher
) -> None:
    """Found by a review: the leader left on SIGTERM, and its child, ignoring it, outlived the
    stop (the reaped leader's group was never sent SIGKILL). The group gets the rest of the
    grace period, then SIGKILL."""
    ctx = make_context(tmp_path)
    (ctx.workdir / "grandchild").mkdir()
    executor = CommandExecutor(runner(LEAVES_A_STUBBORN_CHILD, stop_grace=timedelta(seconds=0.5)), None, {})
    future = launcher.start(executor, ctx)
    child = int((ctx.workdir / "grandchild" / "ready").read_text())
    try:
        ctx.cancelled.set()
        result = future.result(timeout=10)
        assert result.outcome.kind is OutcomeKind.STOPPED
        wait_for(lambda: is_gone(child), what="the stubborn child to be killed with its group")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_cancel_flag_set_by_the_caller_stops_with_the_runner_grace(tmp_path: Path, launcher: Launcher) -> None:
    """The worker's execution timeout sets ``ctx.cancelled`` without calling ``stop``."""
    ctx = make_context(tmp_path)
    executor = CommandExecutor(runner(IGNORES_TERM, stop_grace=timedelta(seconds=0.3)), None, {})
    future = launcher.start(executor, ctx)
    pid = int((ctx.workdir / "ready").read_text())
    began = time.monotonic()
    ctx.cancelled.set()
    result = future.result(timeout=5)
    finished_after = time.monotonic() - began
    assert result.outcome.kind is OutcomeKind.STOPPED
    assert 0.25 <= finished_after < 2.5, finished_after
    assert is_gone(pid)


LOUD_ON_TERM = """
import os, pathlib, signal, sys
def bye(signum, frame):
    for i in range(1000):  # about 256 KiB: more than a pipe holds, so it is read while stopping
        sys.stdout.write('y' * 255 + '\\n')
    print('last words', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
pathlib.Path('ready.part').write_text('ready'); os.replace('ready.part', 'ready')
while True:
    signal.pause()
"""


def test_output_written_while_stopping_is_copied_and_does_not_block_the_stop(
    tmp_path: Path, launcher: Launcher
) -> None:
    ctx = make_context(tmp_path)
    future = launcher.start(CommandExecutor(runner(LOUD_ON_TERM, stop_grace=timedelta(seconds=30)), None, {}), ctx)
    ctx.cancelled.set()  # the caller's stop (an execution timeout): terminated with the runner's grace
    result = future.result(timeout=20)  # well inside the 30 s grace: SIGKILL was not needed
    assert result.outcome.kind is OutcomeKind.STOPPED
    assert "last words" in read_log(ctx)


def test_stop_reaches_only_its_own_context(tmp_path: Path, launcher: Launcher) -> None:
    executor = CommandExecutor(runner(EXITS_ON_TERM), None, {})
    first, second = make_context(tmp_path, name="run-a"), make_context(tmp_path, name="run-b")
    future_a = launcher.start(executor, first)
    future_b = launcher.start(executor, second)
    executor.stop(first, timedelta(seconds=5))
    assert future_a.result(timeout=5).outcome.kind is OutcomeKind.STOPPED
    assert not future_b.done()
    assert not second.is_cancelled()
    executor.stop(second, timedelta(seconds=5))
    assert future_b.result(timeout=5).outcome.kind is OutcomeKind.STOPPED


def test_cancelled_before_start_never_starts_the_process(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    ctx.cancelled.set()
    marker = tmp_path / "marker"
    code = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')"
    spec = RunnerSpec(name="py", binary=sys.executable, args=("-c", code, str(marker)))
    assert CommandExecutor(spec, None, {}).execute(ctx).outcome.kind is OutcomeKind.STOPPED
    assert not marker.exists()


def test_stop_after_the_process_ended_is_harmless(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    executor = CommandExecutor(runner("pass"), None, {})
    assert executor.execute(ctx).outcome.kind is OutcomeKind.SUCCEEDED
    began = time.monotonic()
    executor.stop(ctx, timedelta(seconds=5))
    assert time.monotonic() - began < 1.0, "nothing is running, so there is nothing to wait for"
