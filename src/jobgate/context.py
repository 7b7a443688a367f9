"""The context a handler's attempt runs in: what a job is given (seed 000 §56).

A handler receives one ``ExecutionContext``: its run's payload (ids, params, the configuration
snapshot, the scope), a cancellation flag, a progress reporter, a work folder and a log, named
locks, and ``on_complete`` for writes made exactly once with the run's completion. Nothing
broader: jobgate's own jobs get the host (store, clock, configuration) as a parameter of their
own (``service.host``), never through the context.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobgate.run_log import Interleaving, append_line

if TYPE_CHECKING:
    from jobgate.store.sqlstore import StoreTx

ProgressReporter = Callable[[float | None, str | None], None]
# A write a handler wants made in the transaction that completes its run (exactly once).
Effect = Callable[[Any], None]
StoreEffect = Callable[["StoreTx"], None]  # a ``jobgate.store.sqlstore.StoreTx``
# (acquire(run id, kind, key, ttl) -> held lock, release(held)): named locks, from the worker.
LockProvider = tuple[Callable[[str, int, str, str, timedelta], Any], Callable[[Any], None]]
_CANCELLED_LOCK = threading.Lock()


class StopSignal(threading.Event):
    """``ctx.cancelled``: an event that remembers whether the handler saw it set. A handler that
    returns after seeing a stop (``is_cancelled()``, ``cancelled.is_set()`` or ``wait()`` saying
    yes) bailed out, and its attempt is STOPPED; one that returns without having seen it finished
    its work anyway, and its run records that (the worker keeps a success that arrives after a
    stop or a timeout: work that was done is not recorded as not done, nor done again)."""

    seen = False

    def is_set(self) -> bool:
        found = super().is_set()
        self.seen = self.seen or found
        return found

    def wait(self, timeout: float | None = None) -> bool:
        found = super().wait(timeout)
        self.seen = self.seen or found
        return found


@dataclass(frozen=True)
class DispatchPayload:
    """The seed 000 §56 dispatch payload: everything a worker may know about a run."""

    job_run_id: str
    idempotency_key: str
    attempt: int
    job_definition_id: str
    job_class: str
    config_snapshot_id: str
    config_digest: str
    config: dict[str, Any]
    params: dict[str, str]
    scope: dict[str, Any]
    target_engine_meid: str | None
    target_engine_cmi: str | None
    authorization_context: dict[str, Any]
    trace_context: dict[str, str]
    execution_timeout: timedelta | None
    max_attempts: int

    def as_json(self) -> dict[str, Any]:
        return {
            "job_run_id": self.job_run_id,
            "idempotency_key": self.idempotency_key,
            "attempt": self.attempt,
            "job_definition_id": self.job_definition_id,
            "job_class": self.job_class,
            "config_snapshot_id": self.config_snapshot_id,
            "config_digest": self.config_digest,
            "config": self.config,
            "params": self.params,
            "scoped_input_references": self.scope,
            "target_engine_meid": self.target_engine_meid,
            "target_engine_cmi": self.target_engine_cmi,
            "authorization_context": self.authorization_context,
            "trace_context": self.trace_context,
            "timeout_seconds": None if self.execution_timeout is None else self.execution_timeout.total_seconds(),
            "max_attempts": self.max_attempts,
        }


class ExecutionContext:
    """What one attempt gets: its payload, a cancellation flag, a progress reporter, a work dir.

    ``cancelled`` is set when the run is stopped or its execution timeout passes; a handler
    that runs long should check ``is_cancelled()`` and return early. The work directory and
    the log's folder are created on first use, so a job that never touches the filesystem
    costs no directory operations.
    """

    def __init__(
        self,
        payload: DispatchPayload,
        workdir: Path | str,
        log_path: Path | str,
        report_progress: ProgressReporter | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.payload = payload
        self._workdir = workdir
        self._log_path = log_path
        self._workdir_ready = False
        self._log_ready = False
        self.report_progress: ProgressReporter = report_progress or (lambda fraction, message: None)
        self._cancelled = cancelled
        self.effects: list[Effect] = []
        self._log_sink: Any = None  # the attempt's captured output (``runtime.executors.capture``)
        self._run_log: Interleaving | None = None
        self._store_effects: list[StoreEffect] = []  # jobgate's own jobs' (``service.host.Host``)
        self.lock_provider: LockProvider | None = None  # set by the worker

    @contextlib.contextmanager
    def lock(self, kind: str, key: str, ttl: timedelta = timedelta(seconds=60)) -> Iterator[Any]:
        """Hold the named lock ``kind:key`` (seed 000 §25: job, workflow, signal, quarantine,
        batch, federation, config-rollout) for the block; released at its end.

        Held by another: raises ``LockBusy`` (retryable, ``LOCK_BUSY``): the attempt ends and
        its retry policy tries again later. The lock expires after ``ttl`` unless renewed
        (``held.renew()``), which is how it is recovered when its holder dies. ``held.token``
        is its fencing token.
        """
        if self.lock_provider is None:
            raise RuntimeError("named locks are available to handlers run by a worker")
        acquire, release = self.lock_provider
        held = acquire(self.job_run_id, self.attempt, kind, key, ttl)
        try:
            yield held
        finally:
            release(held)

    def on_complete(self, effect: Effect) -> None:
        """Make ``effect(connection)`` part of the transaction that completes this run.

        The effect runs only if the attempt succeeds and its fenced completion is accepted
        (this worker still holds the lease), in the same transaction, so a write it makes to
        the jobgate database happens exactly once: never for an attempt whose worker lost the
        run, never twice when the run is retried after a crash. If the effect raises, nothing
        of it is kept and the attempt counts as a retryable failure (``EFFECT_FAILED``).
        ``connection`` is a SQLAlchemy ``Connection`` inside the open transaction; do not
        commit or roll back on it.
        """
        self.effects.append(effect)

    @property
    def cancelled(self) -> threading.Event:
        """Created on first use: most attempts are never stopped, and an ``Event`` (a lock and a
        condition) per attempt was a visible cost at thousands of attempts a second."""
        if self._cancelled is None:
            with _CANCELLED_LOCK:
                if self._cancelled is None:
                    self._cancelled = StopSignal()
        return self._cancelled

    @property
    def workdir(self) -> Path:
        if not self._workdir_ready:
            self._workdir = Path(self._workdir)
            self._workdir.mkdir(parents=True, exist_ok=True)
            self._workdir_ready = True
        return Path(self._workdir)

    @property
    def log_path(self) -> Path:
        if not self._log_ready:
            self._log_path = Path(self._log_path)
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_ready = True
        return Path(self._log_path)

    # Conveniences for handlers, named as in the seed.
    @property
    def job_run_id(self) -> str:
        return self.payload.job_run_id

    @property
    def idempotency_key(self) -> str:
        return self.payload.idempotency_key

    @property
    def attempt(self) -> int:
        return self.payload.attempt

    @property
    def config(self) -> dict[str, Any]:
        return self.payload.config

    @property
    def params(self) -> dict[str, str]:
        return self.payload.params

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of this attempt (``00-<trace id>-<span id>-<flags>``): pass it
        on to what the job calls so its work joins the run's trace (``jobgate.core.trace``)."""
        return self.payload.trace_context.get("traceparent")

    @property
    def trace_id(self) -> str | None:
        return self.payload.trace_context.get("trace_id")

    def is_cancelled(self) -> bool:
        return self._cancelled is not None and self._cancelled.is_set()

    def stop_unseen(self) -> bool:
        """Whether a stop was asked that the handler never saw (``StopSignal``). Asked by the
        executor after the handler returned; asking does not count as seeing. A plain event
        given by the caller cannot tell: the stop then counts as seen."""
        signal = self._cancelled
        return isinstance(signal, StopSignal) and threading.Event.is_set(signal) and not signal.seen

    def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        self.report_progress(fraction, message)

    def log(self, line: str) -> None:
        """One line in the run's log (``jobgate runs log``, the API, the console), as print() and
        ``logging`` in the handler's thread also are."""
        text = line.rstrip("\n") + "\n"
        # A run log that cannot be written does not turn into another outcome of the attempt.
        with contextlib.suppress(OSError):
            if self._log_sink is not None:
                self._log_sink.line(text)
                return
            append_line(self.log_path, text, self.run_log)  # a lone surrogate is written as its escape

    @property
    def run_log(self) -> Interleaving:
        """This attempt's place in the run's log, shared by its writers (``jobgate.run_log``)."""
        if self._run_log is None:
            self._run_log = Interleaving(self.payload.attempt)
        return self._run_log


def add_store_effect(ctx: ExecutionContext, effect: StoreEffect) -> None:
    """``on_complete`` for jobgate's own jobs (``service.host.Host.on_complete``): the effect gets
    the open transaction (``StoreTx``) rather than its connection, so what it writes goes through
    the store like every other write, exactly once with the completion."""
    ctx._store_effects.append(effect)


def store_effects(ctx: ExecutionContext) -> list[StoreEffect]:
    return ctx._store_effects
