"""A worker process: the worker and its loops, signals, clean shutdown."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import FrameType

from jobgate.core.errors import ConfigurationError
from jobgate.core.models import JobRun
from jobgate.core.states import LEASED, PENDING, RunStatus
from jobgate.runtime.alert_sink import alert_sink
from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.runtime.loops import Loop, LoopThread
from jobgate.runtime.outbox import EventSink, JsonLinesSink, LogSink, OutboxPublisher
from jobgate.runtime.sla import SlaMonitor
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine
from jobgate.store.base import RunFilter
from jobgate.store.sqlstore import Store, StoreTx

log = logging.getLogger("jobgate.process")
SWITCH_INTERVAL = float(os.environ.get("JOBGATE_SWITCH_INTERVAL", "0.0005"))
# Allocations between two young-generation collections of the cyclic garbage collector (Python's
# default is 700). A worker allocates a few hundred objects per run it claims, starts and settles,
# nearly all freed at once by reference counting: at 700 the collector ran many times a second,
# and every tenth young collection every hundredth walked the whole heap. At 20,000 the worker
# processes of the PostgreSQL end-to-end benchmark spent about 8 % less CPU per job (CPU of the
# worker processes over that of the submitting process, alternating runs: 2.72-3.01 against
# 3.05-3.15). Cyclic garbage then waits a little longer to be freed: a few megabytes at most.
GC_THRESHOLD_DEFAULT = 20000


def gc_threshold() -> int:
    """``JOBGATE_GC_THRESHOLD``, or the default. Zero would turn the cyclic collector off for the
    whole process (and an API server that embeds a worker), so it is refused like any value that
    is not a positive whole number."""
    raw = os.environ.get("JOBGATE_GC_THRESHOLD", str(GC_THRESHOLD_DEFAULT))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(
            f"must be a whole number of allocations, at least 1 (got {raw!r})", field="JOBGATE_GC_THRESHOLD"
        )
    return value


def worker_settings(engine: Engine, **overrides: object) -> WorkerSettings:
    """Worker settings from configuration, with command-line overrides (None means "not given")."""
    w = engine.config.worker
    base: dict[str, object] = {
        "concurrency": w.concurrency,
        "lease": w.lease,
        "poll_interval": w.poll_interval,
        "shutdown_grace": w.shutdown_grace,
        "batch_size": w.batch_size,
        "maximum_run_age": w.maximum_run_age,
        "queue_rates": {
            name: (q.rate_per_second, q.burst) for name, q in engine.config.queues.items() if q.rate_per_second
        },
    }
    base.update({k: v for k, v in overrides.items() if v is not None})
    return WorkerSettings(**base)  # type: ignore[arg-type]


def default_sinks(engine: Engine) -> list[EventSink]:
    sinks: list[EventSink] = []
    if engine.config.events.jsonl_path is not None:
        sinks.append(JsonLinesSink(engine.config.events.jsonl_path))
    if engine.config.events.log:
        sinks.append(LogSink())
    # Last, so the sinks above have the batch before a slow webhook is retried (runtime.alert_sink).
    alerts = alert_sink(engine.config.alerts, engine.config.data_dir)
    if alerts is not None:
        sinks.append(alerts)
    return sinks


class Checkpoints:
    """SQLite: move WAL pages into the database file off the hot path, once a second (a ``Loop``,
    ``runtime.loops``; nothing to do on PostgreSQL)."""

    name = "checkpoint"
    leader_only = False

    def __init__(self, store: Store, interval: timedelta = timedelta(seconds=1)) -> None:
        self.store = store
        self.interval = interval

    def step(self, now: datetime) -> timedelta:
        self.store.checkpoint()
        return self.interval

    def close(self) -> None:
        """Nothing held."""


class WorkerProcess:
    """A worker and the loops every worker process runs beside it (``runtime.loops``): the
    outbox publisher (unless another process publishes), the workflow coordinator, the SLA
    monitor (one leads the cluster) and SQLite's checkpoints. SIGTERM/SIGINT stop them
    gracefully: the worker first, then the loops (the publisher drains what is left)."""

    def __init__(
        self,
        engine: Engine,
        settings: WorkerSettings,
        *,
        publish: bool = True,
        sinks: Sequence[EventSink] | None = None,
    ) -> None:
        self.worker = Worker(engine, settings)
        loops: list[Loop] = []
        if publish:
            loops.append(
                OutboxPublisher(engine.store, sinks if sinks is not None else default_sinks(engine), engine.clock)
            )
        loops += [WorkflowCoordinator(engine), SlaMonitor(engine), Checkpoints(engine.store)]
        self.loops = {loop.name: LoopThread(loop, engine.clock) for loop in loops}
        self._worker_thread: threading.Thread | None = None

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping gracefully", signal.Signals(signum).name, extra={"action": "shutdown"})
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def start(self) -> None:
        # The loop thread releases the GIL around every SQLite call; with the default 5 ms switch
        # interval each re-acquisition can wait behind busy executor threads (the convoy effect),
        # which stretched one batched transaction from a few ms to ~100 ms. A short interval
        # hands the GIL back quickly.
        threshold = gc_threshold()  # refused before anything starts
        sys.setswitchinterval(SWITCH_INTERVAL)
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
        for loop in self.loops.values():
            loop.start()
        self._worker_thread = threading.Thread(target=self.worker.run, name="jobgate-worker", daemon=True)
        self._worker_thread.start()

    def stop(self) -> None:
        self.worker.stop()

    def stop_when_idle(self, poll: float = 0.2) -> None:
        """Stop gracefully once this worker is idle and no run is pending or running anywhere."""
        store = self.worker.engine.store

        def watch() -> None:
            while not self.worker.wait_stopped(poll):
                if self.worker.idle.is_set():
                    beyond = self._beyond()
                    with store.read() as tx:
                        waiting = self._waiting(tx, limit=1 if not beyond else 1000)
                        busy = any(r.definition_digest not in beyond for r in waiting)
                        # A workflow with something to decide is about to make its next step; one
                        # whose steps wait on held runs (a gate) waits on nobody here.
                        busy = busy or bool(tx.workflows_due(1))
                    if not busy:
                        self.stop()
                        return

        threading.Thread(target=watch, name="jobgate-idle-watch", daemon=True).start()

    @staticmethod
    def _waiting(tx: StoreTx, *, limit: int) -> list[JobRun]:
        """Runs that wait for a worker: pending or leased, not held (a held run waits for a
        gate, not for a worker: it keeps nobody busy)."""
        return tx.runs_list(RunFilter(statuses=tuple((PENDING - {RunStatus.HELD}) | LEASED), limit=limit))

    def _beyond(self) -> frozenset[str]:
        """The definition digests whose runs this worker will not claim now: code it cannot run
        here, or a dependency that is down. A run of them waiting kept ``--exit-when-idle``
        running for ever (found by a review: a dependency down, the worker never stopped)."""
        return self.worker.unrunnable | self.worker.dependencies.held_back()

    def left_behind(self) -> list[JobRun]:
        """The waiting runs of the definitions this worker cannot run here (another host may) or
        whose dependency is down: what an idle worker leaves queued as it stops."""
        beyond = self._beyond()
        if not beyond:
            return []
        with self.worker.engine.store.read() as tx:
            return [r for r in self._waiting(tx, limit=1000) if r.definition_digest in beyond]

    def join(self) -> None:
        """Wait for the worker to finish, then stop the loops (the publisher drains) and wait."""
        while not self.worker.wait_stopped(0.2):
            pass
        for loop in self.loops.values():
            loop.stop()
        for loop in self.loops.values():
            loop.join(timeout=30)
        if self._worker_thread is not None:
            self._worker_thread.join(timeout=30)
