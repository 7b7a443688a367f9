"""Job handlers used by the engine tests (importable by worker subprocesses via PYTHONPATH).

A ``time.sleep`` here is the job's work (what is being scheduled: a job that takes time, that
ignores cancellation, that is meant to be killed), never a test waiting for something; each one
says so. Tests wait on signals: the marker file's lines, the run's status, or ``open_gate``.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext, NonRetryableError, RetryableError
from jobgate.governance.code import host_job
from jobgate.service.host import Host


def succeed(ctx: ExecutionContext) -> dict[str, Any]:
    return {"attempt": ctx.attempt, "params": dict(ctx.params)}


def fail_retryable(ctx: ExecutionContext) -> None:
    raise RetryableError("target unavailable", error_code="TARGET_UNAVAILABLE")


def fail_final(ctx: ExecutionContext) -> None:
    raise NonRetryableError("bad input", error_code="BAD_INPUT")


def fail_until(ctx: ExecutionContext) -> dict[str, Any]:
    """Fails until attempt ``params.ok_on`` (default 2)."""
    if ctx.attempt < int(ctx.params.get("ok_on", "2")):
        raise RetryableError(f"attempt {ctx.attempt} fails", error_code="FLAKY")
    return {"attempt": ctx.attempt}


def sleep(ctx: ExecutionContext) -> dict[str, Any]:
    """Takes ``params.seconds`` unless cancelled (then it returns at once, interrupted)."""
    seconds = float(ctx.params.get("seconds", "1"))
    if ctx.cancelled.wait(seconds):  # the job's work: ``seconds`` long, cut short by a stop
        return {"interrupted": True}
    return {"slept": seconds}


def marker(ctx: ExecutionContext) -> dict[str, Any]:
    """Writes one line per execution to ``$JOBGATE_TEST_MARKER`` (counts real executions)."""
    path = Path(os.environ["JOBGATE_TEST_MARKER"])
    with path.open("a") as fh:
        fh.write(f"{ctx.job_run_id} {ctx.attempt} {os.getpid()}\n")
    return {}


def slow_marker(ctx: ExecutionContext) -> dict[str, Any]:
    """Marks its start, then sleeps ``params.seconds`` ignoring cancellation (to be killed)."""
    path = Path(os.environ["JOBGATE_TEST_MARKER"])
    with path.open("a") as fh:
        fh.write(f"start {ctx.job_run_id} {ctx.attempt} {os.getpid()}\n")
    time.sleep(float(ctx.params.get("seconds", "5")))  # the job's work: long, deaf to cancellation
    with path.open("a") as fh:
        fh.write(f"done {ctx.job_run_id} {ctx.attempt} {os.getpid()}\n")
    return {}


def _marker_path() -> Path:
    return Path(os.environ["JOBGATE_TEST_MARKER"])


def _append(line: str) -> None:
    with _marker_path().open("a") as fh:
        fh.write(line + "\n")


# Gates a test opens while a handler waits at one, keyed by the test's marker file (each test
# has its own). In this process a handler blocks on the event; a handler in a worker
# subprocess can only see the gate file.
_GATES: dict[str, threading.Event] = {}
_GATES_LOCK = threading.Lock()


def _gate(marker: Path) -> threading.Event:
    with _GATES_LOCK:
        return _GATES.setdefault(str(marker), threading.Event())


def open_gate(marker: Path) -> None:
    """Let the handlers waiting at the gate of ``marker`` go on: in this process (the event) and
    in worker subprocesses (the file ``<marker>.gate``)."""
    Path(str(marker) + ".gate").write_text("go")
    _gate(marker).set()


def slow_first_attempt(ctx: ExecutionContext) -> dict[str, Any]:
    """Crash-recovery handler. Attempt 1 marks its start and sleeps ``params.seconds`` ignoring
    cancellation (its process is meant to be killed). Later attempts mark their start, then wait
    (at most 10 s) for the gate file ``$JOBGATE_TEST_MARKER.gate`` so a test can act while they run."""
    _append(f"start {ctx.job_run_id} {ctx.attempt} {os.getpid()}")
    if ctx.attempt == 1:
        time.sleep(float(ctx.params.get("seconds", "30")))  # the job's work, until its process is killed
    else:
        gate = Path(str(_marker_path()) + ".gate")
        deadline = time.monotonic() + 10
        while not gate.exists() and time.monotonic() < deadline:
            # the job's work: it runs in a worker subprocess, where the gate file is the only signal
            time.sleep(0.01)
    _append(f"done {ctx.job_run_id} {ctx.attempt} {os.getpid()}")
    return {"attempt": ctx.attempt}


def overlap(ctx: ExecutionContext) -> dict[str, Any]:
    """Records its execution interval (monotonic clock) so a test can check runs never overlapped."""
    _append(f"start {ctx.job_run_id} {time.monotonic():.6f}")
    time.sleep(float(ctx.params.get("seconds", "0.2")))  # the job's work: an interval others must not overlap
    _append(f"end {ctx.job_run_id} {time.monotonic():.6f}")
    return {}


def slow_fail_until(ctx: ExecutionContext) -> dict[str, Any]:
    """Like ``fail_until``, but each failing attempt first takes ``params.delay`` seconds."""
    if ctx.attempt < int(ctx.params.get("ok_on", "2")):
        time.sleep(float(ctx.params.get("delay", "0.5")))  # the job's work before it fails
        raise RetryableError(f"attempt {ctx.attempt} fails", error_code="FLAKY")
    return {"attempt": ctx.attempt}


def gated_fail_once(ctx: ExecutionContext) -> dict[str, Any]:
    """Marks ``waiting``, waits (at most 10 s) for the test's ``open_gate``, then fails
    retryably on attempt 1 and succeeds on later attempts. Ignores cancellation on purpose.
    In-process only (the worker is a thread of the test): it blocks on the gate's event."""
    _append(f"waiting {ctx.job_run_id} {ctx.attempt}")
    _gate(_marker_path()).wait(10)
    if ctx.attempt == 1:
        raise RetryableError("failed after the gate", error_code="FLAKY")
    return {"attempt": ctx.attempt}


def stubborn_first_attempt(ctx: ExecutionContext) -> dict[str, Any]:
    """Attempt 1 ignores cancellation and returns late; later attempts take 0.8 s, politely."""
    if ctx.attempt == 1:
        time.sleep(2.5)  # the job's work: it does not hear the stop, and returns late
        return {"late_result_of_attempt": 1}
    ctx.cancelled.wait(0.8)  # the job's work: 0.8 s, cut short by a stop
    return {"attempt": ctx.attempt}


def deaf_first_attempt(ctx: ExecutionContext) -> dict[str, Any]:
    """Attempt 1 ignores its stop for ``seconds``; each attempt appends ``start N`` and ``end N``
    to the file ``marker``: an independent record of when each attempt's code ran."""
    marker = Path(ctx.params["marker"])

    def mark(what: str) -> None:
        with marker.open("a") as out:
            out.write(f"{what} {ctx.attempt}\n")

    mark("start")
    if ctx.attempt == 1:
        time.sleep(float(ctx.params["seconds"]))  # the job's work: it does not hear the stop
    mark("end")
    return {"attempt": ctx.attempt}


def ledger(ctx: ExecutionContext) -> dict[str, Any]:
    """Records its run in ``test_effects`` through the completing transaction (exactly once).

    ``seconds``: sleep first; ``fail_effect_on``: the attempt whose effect raises."""
    from sqlalchemy import text

    time.sleep(float(ctx.params.get("seconds", "0")))  # the job's work before its effect
    attempt, run_id = ctx.attempt, ctx.job_run_id

    def effect(conn: Any) -> None:
        if ctx.params.get("fail_effect_on") == str(attempt):
            if ctx.params.get("fail_with") == "interrupt":  # what is not an Exception, from handler code
                raise KeyboardInterrupt("the effect interrupted itself")
            if ctx.params.get("fail_with") == "owndatabase":  # the handler's own SQLite file is not there
                import sqlite3

                sqlite3.connect("file:/nonexistent-jobgate-dir/side.db?mode=rw", uri=True).execute("SELECT 1")
            raise ValueError("the ledger refused the entry")
        insert = text("INSERT INTO test_effects (job_run_id, attempt) VALUES (:r, :a)")
        conn.execute(insert, {"r": run_id, "a": attempt})

    ctx.on_complete(effect)
    return {"attempt": attempt}


def locked(ctx: ExecutionContext) -> dict[str, Any]:
    """Holds ``batch:<key>`` for ``seconds``; appends ``start``/``end`` lines to the marker file."""
    with ctx.lock(ctx.params.get("kind", "batch"), ctx.params.get("key", "K"), ttl=timedelta(seconds=30)) as held:
        _append(f"start {ctx.job_run_id} {held.token}")
        time.sleep(float(ctx.params.get("seconds", "0.3")))  # the job's work, holding the lock
        _append(f"end {ctx.job_run_id}")
    return {"token": held.token}


def context_surface(ctx: ExecutionContext) -> dict[str, Any]:
    """What a plain handler can reach through its context: its public attributes."""
    return {"attributes": sorted(name for name in dir(ctx) if not name.startswith("_"))}


@host_job
def host_reader(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    """A handler that asks for jobgate's host (store, clock, configuration): it counts the token
    table. Given the host only where its module is trusted."""
    _append(f"host_reader {ctx.job_run_id}")
    with host.store.read() as tx:
        return {"tokens": len(tx.tokens_list(None)), "now": host.clock.now().isoformat()}


def chatty(ctx: ExecutionContext) -> dict[str, Any]:
    """Says something every way a handler can: its output is the run's log."""
    import logging
    import sys

    tag = ctx.params.get("n", "0")
    print(f"stdout line {tag}")
    print(f"stderr line {tag}", file=sys.stderr)
    logging.getLogger("acme.reports").warning("logged line %s", tag)
    ctx.log(f"ctx line {tag}")
    return {}


_PAIR = threading.Barrier(2, timeout=30)


def chatty_pair(ctx: ExecutionContext) -> dict[str, Any]:
    """Two at once: each prints, waits until the other is running too, prints again."""
    tag = ctx.params.get("n", "0")
    print(f"before {tag}")
    _PAIR.wait()
    print(f"after {tag}")
    return {}


def flood(ctx: ExecutionContext) -> dict[str, Any]:
    """Prints far more than a run log keeps."""
    for i in range(2000):
        print(f"line {i:05d} " + "x" * 80)
    return {}


def patient_first_attempt(ctx: ExecutionContext) -> dict[str, Any]:
    """Attempt 1 works until it is asked to stop (at most 30 s); later attempts finish at once."""
    if ctx.attempt == 1:
        ctx.cancelled.wait(30)  # the job's work, until the stop
    return {"attempt": ctx.attempt}


def leaky(ctx: ExecutionContext) -> dict[str, Any]:
    """Logs URLs with credentials in them, as HTTP clients and careless handlers do."""
    import logging

    logging.getLogger("httpx").info('HTTP Request: POST http://u:s3cret@127.0.0.1:9/x?token=T0KEN "HTTP/1.1 200 OK"')
    logging.getLogger("acme.sync").warning("calling https://svc:pa55@api.example/v1/sync?key=K3Y failed")
    return {}


def interrupted(ctx: ExecutionContext) -> None:
    """Handler code raising what is not an ``Exception`` (signals never reach a pool thread)."""
    kind = ctx.params.get("kind", "KeyboardInterrupt")
    raise {"KeyboardInterrupt": KeyboardInterrupt, "GeneratorExit": GeneratorExit, "BaseException": BaseException}[
        kind
    ]("raised by the handler")


def surrogate_result(ctx: ExecutionContext) -> dict[str, Any]:
    """A file name os.listdir decodes with surrogateescape: not Unicode text."""
    return {"name": b"caf\xe9.csv".decode("utf-8", "surrogateescape")}


def unstorable_failure(ctx: ExecutionContext) -> None:
    """A failure whose code and message hold what a store refuses (NUL, a lone surrogate)."""
    raise NonRetryableError("bad byte \x00 in caf" + b"\xe9".decode("utf-8", "surrogateescape"), error_code="CODE\x00X")


def log_and_succeed(ctx: ExecutionContext) -> dict[str, Any]:
    """Writes to its run's log (print and ``ctx.log``), then succeeds."""
    print("printed")
    ctx.log("logged")
    return {"ok": True}
