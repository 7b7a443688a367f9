"""A Python handler's output is its run's log: stdout, stderr, ``logging`` and ``ctx.log`` of the
attempt's thread land in ``runs/<id>/run.log`` (what ``jobgate runs log``, the API and the
console read), each attempt headed, capped, and never mixed with another attempt running at the
same time; nothing of it reaches the worker's own output."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_status

from helpers import define
from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus
from jobgate.run_log import Interleaving, append_line
from jobgate.runtime.executors import capture
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

N = [{"name": "n", "pattern": "[0-9]{1,6}"}]


def _log_of(engine: Engine, run: JobRun) -> str:
    return (Path(engine.config.data_dir) / "runs" / run.job_run_id / "run.log").read_text()


def test_prints_log_records_and_ctx_log_are_the_runs_log_not_the_workers(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger().setLevel(logging.INFO)
    job = define(engine, handler="engine_handlers:chatty", params=N)
    run = engine.submit(SubmitRequest(job, params={"n": "7"})).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    log = _log_of(engine, run)
    assert log.startswith("[jobgate] attempt 1\n")
    for line in ("stdout line 7", "stderr line 7", "WARNING acme.reports: logged line 7", "ctx line 7"):
        assert line in log, (line, log)
    seen = capsys.readouterr()
    assert "line 7" not in seen.out and "line 7" not in seen.err
    print("after the attempt")  # outside an attempt, output goes where it always went
    assert "after the attempt" in capsys.readouterr().out


def test_two_attempts_at_once_keep_their_own_output(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:chatty_pair", params=N)
    runs = [engine.submit(SubmitRequest(job, params={"n": n})).run for n in ("1", "2")]
    with running_worker(engine, concurrency=2):
        for run in runs:
            wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    for run, mine, theirs in ((runs[0], "1", "2"), (runs[1], "2", "1")):
        log = _log_of(engine, run)
        assert f"before {mine}" in log and f"after {mine}" in log
        assert f"before {theirs}" not in log and f"after {theirs}" not in log


def test_an_attempts_output_is_capped(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "MAX_ATTEMPT_LOG_BYTES", 4096)
    job = define(engine, handler="engine_handlers:flood")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)  # the cap does not change the outcome
    log = _log_of(engine, run)
    assert "line 00000" in log and "line 01999" not in log
    assert log.rstrip().endswith("passed 4096 bytes; the rest is not kept")
    assert len(log.encode()) < 4096 + 200


def test_urls_in_log_records_lose_their_credentials_and_query(engine: Engine) -> None:
    """Anyone who may read a run may read its log: what a record's URL carries besides scheme,
    host and path is not kept, and the HTTP clients' request lines are not the run's output."""
    logging.getLogger().setLevel(logging.INFO)
    job = define(engine, handler="engine_handlers:leaky")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    log = _log_of(engine, run)
    assert "calling https://api.example/v1/sync failed" in log
    for secret in ("s3cret", "T0KEN", "pa55", "K3Y", "svc:", "HTTP Request"):
        assert secret not in log


def test_a_silent_handler_costs_no_file_nor_folder(engine: Engine) -> None:
    """Capture opens the log at the first write: a run that says nothing makes no folder (the
    folder and the file were ~75 us of a worker's CPU per run when made eagerly)."""
    job = define(engine)  # engine_handlers:succeed prints nothing
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert not (Path(engine.config.data_dir) / "runs" / run.job_run_id).exists()


def test_an_attempt_writing_after_another_attempts_lines_is_headed_again(tmp_path: Path) -> None:
    """Found by a review: a worker paused past its lease went on writing after the next attempt
    had written (and completed the run); its last line read as the next attempt's output."""
    path = tmp_path / "run.log"
    first, second = capture.AttemptLog(lambda: path, 1), capture.AttemptLog(lambda: path, 2)
    first.line("attempt 1 start")
    second.line("attempt 2 start")
    second.line("attempt 2 end")
    first.line("attempt 1 end")
    first.line("attempt 1 after")
    second.close()
    first.close()
    assert path.read_text().splitlines() == [
        "[jobgate] attempt 1",
        "attempt 1 start",
        "[jobgate] attempt 2",
        "attempt 2 start",
        "attempt 2 end",
        "[jobgate] attempt 1, continued",
        "attempt 1 end",
        "attempt 1 after",  # its own lines follow one another: no header between them
    ]


def test_a_runners_output_after_another_attempts_lines_is_headed_again(tmp_path: Path) -> None:
    import os

    from jobgate.runtime.executors.command import _Output

    path = tmp_path / "run.log"
    path.write_text("[jobgate] starting runner sh (run r, attempt 1)\n")
    read_end, write_end = os.pipe()
    with path.open("ab+", buffering=0) as log, os.fdopen(read_end, "rb", buffering=0) as pipe:
        first = Interleaving(1)
        first.wrote(log.fileno())  # its start line is its own
        output = _Output(pipe, log, capture.MAX_ATTEMPT_LOG_BYTES, first)
        os.write(write_end, b"runner line 1\n")
        output.copy(5)
        later = capture.AttemptLog(lambda: path, 2)
        later.line("attempt 2 line")
        later.close()
        os.write(write_end, b"runner line 2\nrunner progress: ")
        output.copy(5)
        second = capture.AttemptLog(lambda: path, 3)  # another attempt, while a line is unfinished
        second.line("attempt 3 line")
        second.close()
        os.write(write_end, b"done\n")
        output.copy(5)
        os.close(write_end)
        append_line(path, "[jobgate] runner sh exited with code 0\n", first)  # ctx.log's own line: the same
    assert path.read_text().splitlines() == [
        "[jobgate] starting runner sh (run r, attempt 1)",
        "runner line 1",
        "[jobgate] attempt 2",
        "attempt 2 line",
        "[jobgate] attempt 1, continued",
        "runner line 2",
        "runner progress: ",
        "[jobgate] attempt 3",
        "attempt 3 line",
        "[jobgate] attempt 1, continued",
        "done",
        "[jobgate] runner sh exited with code 0",
    ]


def test_an_unfinished_line_interrupted_by_another_attempt_is_headed_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    first, second = capture.AttemptLog(lambda: path, 1), capture.AttemptLog(lambda: path, 2)
    first.line("attempt 1 start")
    first.write("attempt 1 progress: ")  # print(..., end="")
    second.line("attempt 2 start")
    second.line("attempt 2 end")
    second.close()
    first.write("done\n")
    first.close()
    assert path.read_text().splitlines() == [
        "[jobgate] attempt 1",
        "attempt 1 start",
        "[jobgate] attempt 2",
        "attempt 2 start",
        "attempt 2 end",
        "[jobgate] attempt 1, continued",
        "attempt 1 progress: done",
    ]


def test_a_log_that_cannot_be_written_does_not_change_the_outcome(engine: Engine) -> None:
    """Found by a regression review: ``ctx.log`` raised into the handler when the run's log
    could not be opened (the attempt failed with IsADirectoryError)."""
    job = define(engine, handler="engine_handlers:log_and_succeed")
    run = engine.submit(SubmitRequest(job)).run
    (Path(engine.config.data_dir) / "runs" / run.job_run_id / "run.log").mkdir(parents=True)
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert done.status is RunStatus.COMPLETED


def test_a_line_that_never_ends_reaches_the_log_as_it_grows_and_whole(tmp_path: Path) -> None:
    """Found by a regression review: an unfinished line was rebuilt and searched whole at every
    write (a progress bar of 80,000 dots took minutes) and showed nothing until it ended."""
    path = tmp_path / "run.log"
    log = capture.AttemptLog(lambda: path, 1)
    for _ in range(4 * capture.PENDING_LIMIT // 64):
        log.write("." * 64)
    assert path.stat().st_size >= 3 * capture.PENDING_LIMIT  # written as it grows, not at the end
    log.write("done\n")
    log.close()
    assert path.read_text() == "[jobgate] attempt 1\n" + "." * (4 * capture.PENDING_LIMIT) + "done\n"


def test_a_runners_exit_line_starts_a_line_after_its_unfinished_output(tmp_path: Path) -> None:
    import os

    from jobgate.runtime.executors.command import _Output

    path = tmp_path / "run.log"
    mine = Interleaving(1)
    append_line(path, "[jobgate] starting runner py (run r, attempt 1)\n", mine)
    read_end, write_end = os.pipe()
    with path.open("ab+", buffering=0) as log, os.fdopen(read_end, "rb", buffering=0) as pipe:
        output = _Output(pipe, log, capture.MAX_ATTEMPT_LOG_BYTES, mine)
        os.write(write_end, b"progress no newline")
        output.copy(5)
        os.close(write_end)
    append_line(path, "[jobgate] runner py exited with code 3\n", mine)
    assert path.read_text().splitlines() == [
        "[jobgate] starting runner py (run r, attempt 1)",
        "progress no newline",
        "[jobgate] runner py exited with code 3",
    ]


def test_the_cap_counts_what_the_file_holds(tmp_path: Path) -> None:
    """Found by a review: undecodable output was counted one byte a character but written as a
    six-byte escape, so the 10 MiB cap let about 60 MiB through."""
    path = tmp_path / "run.log"
    log = capture.AttemptLog(lambda: path, 1, limit=100)
    log.write("\udcff" * 50 + "\n")  # 300 bytes as the file holds it
    log.close()
    kept = path.read_text(errors="replace")
    assert "\\udcff" not in kept and "passed 100 bytes" in kept
