"""PythonExecutor: handler resolution, result and exception mapping, cooperative stop."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from jobgate.core.decide import OutcomeKind
from jobgate.core.errors import ValidationError
from jobgate.runtime.executors import ExecutionContext, PythonExecutor
from jobgate.runtime.executors.python import MAX_ERROR_MESSAGE

from . import handlers
from .support import make_context, read_log

H = handlers.__name__


def test_dict_result_succeeds_and_sees_its_context(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, params={"period": "2026-06"}, attempt=2)
    result = PythonExecutor(f"{H}:succeed").execute(ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.result == {"run": "run-1", "attempt": 2, "params": {"period": "2026-06"}, "count": 3}
    assert result.artifact is None


def test_none_result_succeeds_without_result(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    result = PythonExecutor(f"{H}:return_nothing").execute(ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.result is None
    assert "did nothing, successfully" in read_log(ctx)


def test_result_is_recorded_as_json_would_store_it(tmp_path: Path) -> None:
    result = PythonExecutor(f"{H}:succeed_with_int_keys").execute(make_context(tmp_path))
    assert result.result == {"1": "one"}


def test_dotted_attribute_handler(tmp_path: Path) -> None:
    result = PythonExecutor(f"{H}:Nested.handle").execute(make_context(tmp_path))
    assert result.result == {"nested": True}


@pytest.mark.parametrize(
    "name", ["return_list", "return_unserialisable", "return_nan", "return_huge", "return_surrogate", "return_deep"]
)
def test_result_that_is_not_a_json_object_is_invalid(tmp_path: Path, name: str) -> None:
    outcome = PythonExecutor(f"{H}:{name}").execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "INVALID_RESULT"


def test_non_retryable_error_keeps_its_code(tmp_path: Path) -> None:
    outcome = PythonExecutor(f"{H}:refuse").execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "BAD_PERIOD"
    assert outcome.error_message == "period 2026-13 does not exist"


@pytest.mark.parametrize(("name", "code"), [("refuse_with_a_number", "12345"), ("refuse_with_none", "ERROR")])
def test_a_non_retryable_error_with_a_code_that_is_no_string_stays_non_retryable(
    tmp_path: Path, name: str, code: str
) -> None:
    """Found by a review: ``error_code=12345`` failed the recording of the failure, which the
    worker then took for a retryable executor error (three attempts, then a dead letter)."""
    outcome = PythonExecutor(f"{H}:{name}").execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == code and outcome.error_message == "period 2026-13 does not exist"


def test_retryable_error_keeps_its_code(tmp_path: Path) -> None:
    outcome = PythonExecutor(f"{H}:busy").execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.RETRYABLE_FAILURE
    assert outcome.error_code == "TARGET_BUSY"


def test_unexpected_exception_is_retryable_truncated_and_traceback_only_in_log(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    outcome = PythonExecutor(f"{H}:crash").execute(ctx).outcome
    assert outcome.kind is OutcomeKind.RETRYABLE_FAILURE
    assert outcome.error_code == "ValueError"
    assert outcome.error_message is not None
    assert outcome.error_message.startswith("boom boom")
    assert len(outcome.error_message) <= MAX_ERROR_MESSAGE
    assert "Traceback" not in outcome.error_message
    log = read_log(ctx)
    assert "Traceback (most recent call last)" in log
    assert "in crash" in log


def test_each_attempts_failure_is_under_its_own_header_on_a_line_of_its_own(tmp_path: Path) -> None:
    """Found by a review: a silent handler that raised had its tracebacks in the log with no
    ``[jobgate] attempt N`` header (which attempt was which?), and a failure after output that
    did not end a line ran on from it."""
    base = make_context(tmp_path)
    for attempt in (1, 2):
        payload = replace(base.payload, attempt=attempt)
        ctx = ExecutionContext(payload=payload, workdir=base.workdir, log_path=base.log_path)
        PythonExecutor(f"{H}:crash").execute(ctx)
        PythonExecutor(f"{H}:print_then_fail").execute(ctx)
    log = read_log(base)
    assert log.count("[jobgate] attempt 1\n") == 2 and log.count("[jobgate] attempt 2\n") == 2
    assert "no newline\n[jobgate] handler" in log  # the failure starts its own line


def test_traceback_reaches_a_log_whose_directory_does_not_exist_yet(tmp_path: Path) -> None:
    base = make_context(tmp_path)
    ctx = ExecutionContext(payload=base.payload, workdir=base.workdir, log_path=tmp_path / "not-yet" / "run.log")
    assert PythonExecutor(f"{H}:crash").execute(ctx).outcome.error_code == "ValueError"
    assert "Traceback (most recent call last)" in read_log(ctx)


def test_sys_exit_in_a_handler_does_not_escape(tmp_path: Path) -> None:
    outcome = PythonExecutor(f"{H}:call_exit").execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.RETRYABLE_FAILURE
    assert outcome.error_code == "SystemExit"


@pytest.mark.parametrize(
    "handler",
    [
        "no_colon_here",
        "json:",
        ":loads",
        "json:loads-x",
        "jobgate_no_such_module_xyz:run",
        "json:no_such_function",
        f"{H}:NOT_CALLABLE",
        f"{H}:coroutine",
    ],
)
def test_bad_handler_is_refused_when_built(handler: str) -> None:
    with pytest.raises(ValidationError) as info:
        PythonExecutor(handler)
    assert info.value.field == "handler"


@pytest.mark.parametrize("name", ["wait_for_stop", "fail_after_stop", "poll_until_stopped"])
def test_stop_is_cooperative_and_wins_over_what_the_handler_does_next(tmp_path: Path, name: str) -> None:
    started = threading.Event()
    ctx = make_context(tmp_path, report_progress=lambda fraction, message: started.set())
    executor = PythonExecutor(f"{H}:{name}")
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(executor.execute, ctx)
        assert started.wait(timeout=5), "handler never started"
        assert not future.done()
        executor.stop(ctx, timedelta(seconds=1))
        result = future.result(timeout=5)
    assert ctx.is_cancelled()
    assert result.outcome.kind is OutcomeKind.STOPPED


def test_a_handler_that_never_looked_at_the_stop_and_finished_succeeded(tmp_path: Path) -> None:
    # Its work is done: recording it stopped would hide that (a workflow would not compensate
    # it), and a timeout's retry would do it again.
    started = threading.Event()
    ctx = make_context(tmp_path, report_progress=lambda fraction, message: started.set())
    executor = PythonExecutor(f"{H}:finish_despite_stop")
    handlers.RELEASE.clear()
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(executor.execute, ctx)
        assert started.wait(timeout=5), "handler never started"
        executor.stop(ctx, timedelta(seconds=1))
        handlers.RELEASE.set()
        result = future.result(timeout=5)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED and result.result == {"done": True}
    assert ctx.is_cancelled()  # the stop was asked; asking now does not change the outcome


def test_already_cancelled_context_does_not_call_the_handler(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    ctx.cancelled.set()
    result = PythonExecutor(f"{H}:return_nothing").execute(ctx)
    assert result.outcome.kind is OutcomeKind.STOPPED
    assert "did nothing" not in read_log(ctx)
