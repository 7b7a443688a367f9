"""The worker: claim due runs under a lease, execute them, settle them, in batches.

One loop thread owns every database write of the worker; executor threads only execute and
hand back results. Each turn of the loop is one write transaction that, together:
settles finished attempts, renews leases, claims new runs and starts them. Batching the
three steps of the queue cycle is what lets a durable SQLite file (``synchronous=FULL``)
run thousands of jobs a second on two cores.

Invariants:
- every write on a run the worker holds is fenced by the run's lease token, so after the
  rescuer revoked a lease the worker's late write changes nothing (and is logged);
- a claimed run that never started is released on shutdown without using an attempt;
- in-memory state changes only after the transaction that records it has committed.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import secrets
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobgate.context import Effect, ExecutionContext, LockProvider, StoreEffect, store_effects
from jobgate.core import transitions
from jobgate.core.audit import AuditEvent
from jobgate.core.capabilities import HOST_FIELDS
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.errors import JobgateError, NonRetryableError, UnavailableError, ValidationError
from jobgate.core.governance import Verdict
from jobgate.core.models import JobRun
from jobgate.core.policies import RetryPolicy
from jobgate.core.settle import Settlement, settle_attempt
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.core.transitions import RunChange
from jobgate.logs import run_fields
from jobgate.runtime import rescuer
from jobgate.runtime.capabilities import CapabilityProbe
from jobgate.runtime.dependencies import DependencyMonitor
from jobgate.runtime.dispatch import Dispatcher, grace_for
from jobgate.runtime.executors.base import ExecutionResult, Executor
from jobgate.runtime.executors.python import described
from jobgate.runtime.named_locks import HeldLock, NamedLocks, lock_name
from jobgate.runtime.otel import attempt_spans
from jobgate.runtime.threads import TaskThreads
from jobgate.service import audit, safemode
from jobgate.service.engine import Engine
from jobgate.service.gates import AttemptFacts, AttemptGate
from jobgate.service.policies import settling_policy
from jobgate.store.base import ClaimedRuns, LeaseRenew, RunsClaim, WorkerBeat
from jobgate.store.errors import is_transient
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.worker")

# How a settled run is logged: (level, action). Completions are the common case and are
# logged at debug only, so the hot path pays no formatting unless asked to.
_SETTLED_LOG = {
    RunStatus.COMPLETED: (logging.DEBUG, "run_completed"),
    RunStatus.RETRY_WAIT: (logging.INFO, "run_retry_scheduled"),
    RunStatus.SCHEDULED: (logging.INFO, "run_released"),
    RunStatus.CANCELLED: (logging.INFO, "run_cancelled"),
    RunStatus.FAILED: (logging.WARNING, "run_failed"),
    RunStatus.DEAD_LETTERED: (logging.WARNING, "run_dead_lettered"),
    RunStatus.ESCALATED: (logging.WARNING, "run_escalated"),
}


class _EffectFailed(Exception):
    """A completion effect (handler code) raised: its cause is what it raised."""


@dataclass(frozen=True)
class WorkerSettings:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 8
    lease: timedelta = timedelta(seconds=30)
    poll_interval: timedelta = timedelta(milliseconds=50)
    batch_size: int = 100
    prefetch: int = 0  # runs claimed beyond the free threads, started as threads free up
    settle_linger: timedelta = timedelta(milliseconds=3)  # batch settlements of short jobs
    shutdown_grace: timedelta = timedelta(seconds=30)
    stop_grace: timedelta = timedelta(seconds=10)
    rescue_interval: timedelta = timedelta(seconds=1)
    maximum_run_age: timedelta = timedelta(hours=24)  # seed 001: older open runs are closed
    maximum_age_interval: timedelta = timedelta(seconds=60)
    stop_check_interval: timedelta = timedelta(milliseconds=250)
    heartbeat_interval: timedelta = timedelta(seconds=5)
    queue_rates: dict[str, tuple[float, int]] = field(default_factory=dict)


@dataclass
class WorkerStats:
    """Counters for the worker's own log line at shutdown and for benchmarks."""

    cycles: int = 0
    cycle_seconds: float = 0.0
    started: int = 0
    lock_wait: float = 0.0
    body: float = 0.0
    commit: float = 0.0


@dataclass(frozen=True)
class _Effects:
    run: JobRun  # as running: to settle a failed effect as a retryable failure of the attempt
    started_at: datetime
    effects: tuple[Effect, ...]  # a handler's: given the transaction's connection
    store_effects: tuple[StoreEffect, ...] = ()  # jobgate's own jobs': given the transaction


@dataclass
class _InFlight:
    run: JobRun  # as started: RUNNING, attempt incremented, our lease token
    ctx: ExecutionContext
    executor: Executor
    started_at: datetime
    interrupt: OutcomeKind | None = None  # why we stopped it: STOPPED, EXECUTION_TIMEOUT, or shutdown
    interrupted_at: datetime | None = None
    # It ignored its stop past the grace: still running, so the run stays held (its lease renewed,
    # no retry) until the code returns; whatever it returns then, the attempt ends as stopped.
    overdue: bool = False
    abandoned: bool = False
    span: Any = None  # the attempt's OpenTelemetry span, when tracing is on


class Worker:
    def __init__(self, engine: Engine, settings: WorkerSettings | None = None, *, worker_id: str | None = None) -> None:
        self.engine = engine
        self.settings = settings or WorkerSettings()
        # Opaque: it is recorded in attempts, transitions and leases that API callers read, which
        # must not learn host names or process ids (seed 001 worker visibility); the worker's
        # row keeps its host and pid for the operator (``jobgate workers``).
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        self.dispatcher = Dispatcher(engine)
        self._spans = attempt_spans(engine.config.tracing)  # None unless tracing.otel: nothing imported
        # Results carry their flight, not just the run id: a late result of an abandoned attempt
        # must never settle a later attempt of the same run.
        # A ``SimpleQueue`` (in C, one lock) rather than ``queue.Queue`` (Python conditions):
        # every executor thread hands every result through it.
        self._results: queue.SimpleQueue[tuple[_InFlight, ExecutionResult]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._buffer: list[JobRun] = []  # claimed (DISPATCHED), not started
        self._running: dict[str, _InFlight] = {}
        self._pending: list[tuple[RunChange, str]] = []  # settlements not yet committed, with run id
        self._unrunnable: frozenset[str] = frozenset()  # definition digests this host cannot run
        self._capabilities = CapabilityProbe(engine, self.dispatcher, self.settings.queues)
        self._audit_pending: dict[str, JobRun] = {}  # settled runs whose applied change may be material
        self._effects: dict[str, _Effects] = {}  # pending completions that carry handler effects
        self._busy_threads = 0
        self._pool: TaskThreads[_InFlight] = TaskThreads(self.settings.concurrency, self._execute, name="jobgate-exec")
        self._watcher = engine.store.change_watcher(on_change=self._wake.set)
        # Declared dependencies (runtime.dependencies): checked off this loop; runs of definition
        # versions in ``self.dependencies.blocked`` are not claimed while a dependency is down.
        self.dependencies = DependencyMonitor(engine, observer=self.worker_id, on_change=self._wake.set)
        # The facts the admission rule needs at every attempt's start, cached across cycles;
        # the code this host would run is read off its own disk.
        self._gate_facts = AttemptFacts(engine, code=engine.definitions.code_reader)
        self._named_locks = NamedLocks(engine.store, engine.clock.now)
        self._lock_provider: LockProvider = (self._lock, self._named_locks.release)  # one for every attempt
        self._rescuer = rescuer.Rescuer(
            engine,
            owner=self.worker_id,
            facts=self._gate_facts,
            interval=self.settings.rescue_interval,
            maximum_run_age=self.settings.maximum_run_age,
            maximum_age_interval=self.settings.maximum_age_interval,
            held=self._held_runs,
        )
        self._pending_since: datetime | None = None
        self._abandoned_threads = 0
        self._cycle_failures = 0
        self.idle = threading.Event()  # set when nothing is running, buffered or pending
        self.stale_writes_refused = 0
        self.lease_losses = 0  # runs found taken by another holder at a lease renewal
        self.settled = 0
        self.stats = WorkerStats()

    # ------------------------------------------------------------------ control
    def stop(self) -> None:
        """Graceful stop: no new claims, release unstarted runs, let running ones finish."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        now = self.engine.clock.now()
        self._next_renew = self._next_rescue = self._next_stop_check = now
        self._shutdown_deadline: datetime | None = None
        self._heartbeat(now, first=True)  # registered, and what it can run probed, before its first claim
        self._next_beat = now + self.settings.heartbeat_interval
        self.dependencies.start()
        database_away = False  # a passing database error is said once, not at every turn
        try:
            while True:
                try:
                    if self._turn():
                        break
                except Exception as exc:
                    # A failed read or an executor that cannot be built must not kill the worker:
                    # its running runs would wait for their leases to expire and each lose an attempt.
                    away = is_transient(exc) or isinstance(exc, UnavailableError)
                    if not away:
                        log.exception("worker loop turn failed; continuing", extra={"action": "turn_failed"})
                    elif not database_away:  # once per outage: the cycle's own warning says the rest
                        log.warning(
                            "worker loop turn failed: database unavailable (%s); continuing",
                            exc.message if isinstance(exc, UnavailableError) else type(exc).__name__,
                            extra={"action": "turn_failed"},
                        )
                    database_away = away
                    time.sleep(0.1)
                    continue
                database_away = False
        finally:
            st = self.stats
            n = max(st.cycles, 1)
            log.info(
                "worker %s stopped: %d cycles (%.1f ms each: lock wait %.1f, body %.1f, commit %.1f), %d started, "
                "%d settled, %d stale writes refused",
                self.worker_id,
                st.cycles,
                1000 * st.cycle_seconds / n,
                1000 * st.lock_wait / n,
                1000 * st.body / n,
                1000 * st.commit / n,
                st.started,
                self.settled,
                self.stale_writes_refused,
                extra={"action": "worker_stopped"},
            )
            self._pool.shutdown()
            if self._spans is not None:
                self._spans.flush()  # a batching exporter still holds the last spans
            try:
                with self.engine.store.write() as tx:
                    tx.worker_stopped(self.worker_id, self.engine.clock.now())
            except Exception:
                log.exception("could not record worker stop")
            self._watcher.close()
            self.dependencies.stop()
            self._rescuer.close()
            self._stopped.set()

    def _turn(self) -> bool:
        """One turn of the loop; True when a graceful stop has finished."""
        s = self.settings
        now = self.engine.clock.now()
        if self._stopping.is_set() and self._shutdown_deadline is None:
            self._shutdown_deadline = now + s.shutdown_grace
            self._release_buffer(now)
        self._collect_results(now)
        self._enforce_deadlines(now, self._shutdown_deadline)
        if now >= self._next_stop_check and self._running:
            self._check_stop_requests()
            self._next_stop_check = now + s.stop_check_interval
        if now >= self._next_rescue:
            self._next_rescue = now + self._rescue(now)
        if now >= self._next_beat:
            self._heartbeat(now)
            self._next_beat = now + s.heartbeat_interval
        if self._linger(now):
            return False
        renew = now >= self._next_renew and bool(self._running or self._buffer)
        claim = 0 if self._stopping.is_set() else self._claim_room()
        # A claim that found all the runs it could take says more are waiting: the next cycle
        # claims again without waiting for a notification (none comes for a backlog) or a poll.
        want_claim = bool(claim) and (self._more_waiting or self._watcher.changed() or self._poll_due(now))
        if want_claim and not (self._pending or renew or self._startable()) and not self.engine.store.skip_locked:
            # SQLite: a read first, so as not to take the one write lock for nothing. PostgreSQL
            # claims with SKIP LOCKED and locks nothing to find nothing: the read would only add
            # a round trip between a run's notification and its start.
            want_claim = self._more_waiting = self._claimable(now)
        if self._pending or renew or want_claim or self._startable():
            self._cycle(now, renew=renew, claim=claim if want_claim else 0)
            if renew:
                self._next_renew = now + s.lease / 3
        if self._stopping.is_set() and not self._running and not self._pending:
            return True
        self.idle.set() if not (self._running or self._buffer or self._pending) else self.idle.clear()
        self._wait_for_work(claim)
        return False

    _last_poll: datetime | None = None
    _more_waiting = False  # the last claim found all it could take: the queue likely holds more

    def _poll_due(self, now: datetime) -> bool:
        if self._last_poll is None or now - self._last_poll >= self.settings.poll_interval:
            self._last_poll = now
            return True
        return False

    def _linger(self, now: datetime) -> bool:
        """Wait a moment for more attempts to finish before writing their settlements.

        Short jobs end one after another; settling each trickle in its own transaction pays a
        commit (an fsync) for a handful of runs. Waiting up to ``settle_linger`` while other
        attempts are still running lets one commit settle (and restart) many.
        """
        if not self._pending or self._stopping.is_set():
            self._pending_since = None
            return False
        if self._pending_since is None:
            self._pending_since = now
        running = self._busy_threads - self._abandoned_threads
        waited = now - self._pending_since
        if running > 0 and waited < self.settings.settle_linger:
            if self._wake.wait((self.settings.settle_linger - waited).total_seconds()):
                self._wake.clear()
            return True
        self._pending_since = None
        return False

    @property
    def unrunnable(self) -> frozenset[str]:
        """The definition digests this worker found it cannot run here (and claims no more of)."""
        return self._unrunnable

    def _claimable(self, now: datetime) -> bool:
        with self.engine.store.read() as tx:
            return tx.runs_claimable_exists(
                self.settings.queues, now, tuple(self.dependencies.blocked | self._unrunnable)
            )

    def _claim_room(self) -> int:
        room = self.settings.concurrency + self.settings.prefetch - self._busy_threads - len(self._buffer)
        return max(0, min(room, self.settings.batch_size))

    def _startable(self) -> bool:
        return bool(self._buffer) and self._busy_threads < self.settings.concurrency

    def _wait_for_work(self, claim_room: int) -> None:
        # Not even when the last claim found more: waiting here for the attempts it started to
        # finish is what makes the next cycle's batch big. Returning at once made smaller,
        # costlier cycles that took CPU from the submitting process (PostgreSQL benchmark, one
        # run each: 2,573 jobs/s end to end against 2,922 and 3,328 without it).
        if not self._results.empty() or self._pending:
            return
        # Poll fast for new commits when there is room; the watcher makes that cheap.
        timeout = 0.002 if claim_room and self._watcher.cheap else self.settings.poll_interval.total_seconds()
        if self._wake.wait(timeout):
            self._wake.clear()
            self._last_poll = None

    # ------------------------------------------------------------------ the cycle
    def _cycle(self, now: datetime, *, renew: bool, claim: int) -> None:
        """One transaction: settle, renew, claim, then start what there are threads for.

        Claimed runs are recorded DISPATCHED and, when a thread is free, RUNNING in the same
        transaction (two transitions, same instant); only runs claimed beyond the free
        threads wait in DISPATCHED and are released on shutdown without using an attempt.
        """
        pending = list(self._pending)
        plain, effectful = self._split_effectful(pending)
        free = max(0, self.settings.concurrency - self._busy_threads)
        t0 = time.perf_counter()
        if claim or self._buffer:
            self._gate_facts.refresh(now)  # the policy, the trust gates: read before the write lock
        gated_cycle = bool(claim or self._buffer)
        # Rows are built before the write lock is taken, so the lock is held only to write them.
        prepared = self.engine.store.prepare_changes([c for c, _ in plain]) if plain else None
        try:
            with self.engine.store.write() as tx:
                t_locked = time.perf_counter()
                if gated_cycle:
                    tx.gates_shared()  # first, before this cycle locks any row (see StoreTx.gates_shared)
                done = tx.runs_apply(prepared) if prepared is not None else []
                if effectful:
                    done += self._complete_with_effects(tx, effectful, now)
                # Judged on the change actually applied (a completion whose effect failed was
                # replaced by a retry or a dead letter).
                material = [
                    e
                    for c in done
                    if (r := self._audit_pending.get(c.job_run_id)) is not None
                    and (e := self._material(c, r, now)) is not None
                ]
                if material:
                    audit.record_run_ends(self.engine, tx, material, anchored=self._dal_anchored, now=now)
                held: set[str] | None = None
                if renew:
                    leases = tuple(
                        (r.job_run_id, r.lease_token)
                        for r in [f.run for f in self._running.values() if not f.abandoned] + self._buffer
                    )
                    held = tx.leases_renew(LeaseRenew(self.worker_id, leases, now + self.settings.lease))
                buffered = [r for r in self._buffer if held is None or r.job_run_id in held]
                to_start = buffered[:free]  # claimed earlier: they go first
                gate = AttemptGate(self._gate_facts, tx, now)
                refused = self._refused_from_buffer(tx, gate, to_start)
                if refused:
                    to_start = [r for r in to_start if r.job_run_id not in refused]
                starts = [
                    transitions.started(r, worker_id=self.worker_id, now=now)
                    if r.attempt < r.max_attempts
                    else transitions.exhausted(r, actor=self.worker_id, now=now)
                    for r in to_start
                ]
                started = tx.runs_apply(starts) if starts else []
                batch: ClaimedRuns | None = None
                if claim:
                    batch = tx.runs_claim(
                        RunsClaim(
                            self.worker_id,
                            self.settings.queues,
                            claim,
                            now,
                            now + self.settings.lease,
                            self.settings.queue_rates,
                            start_now=free - len(to_start),
                            exclude_digests=self.dependencies.blocked | self._unrunnable,
                            admit=gate,
                        )
                    )
                    refused.update((c.job_run_id, (c, v)) for c, v in batch.refused)
                gated = self._hold_or_cancel(tx, refused, now) if refused else []
                t_body = time.perf_counter()
            self.stats.lock_wait += t_locked - t0
            self.stats.body += t_body - t_locked
            self.stats.commit += time.perf_counter() - t_body
        except Exception as exc:
            # Nothing of the turn was written. Keep the settlements and try again. A passing
            # error (the database restarting, a killed session, a deadlock) is waited out with
            # backoff, settlements kept: the runs' outcomes are not lost and use no attempt. Only
            # when the same batch keeps failing for another reason is each written alone, so one
            # bad row cannot stall the rest.
            self._cycle_failures += 1
            transient = is_transient(exc)
            if transient:
                log.warning(
                    "worker cycle failed (%d in a row): database unavailable (%s); retrying",
                    self._cycle_failures,
                    type(exc).__name__,
                    extra={"action": "cycle_failed"},
                )
            else:
                log.exception(
                    "worker cycle failed (%d in a row); will retry",
                    self._cycle_failures,
                    extra={"action": "cycle_failed"},
                )
            if self._cycle_failures >= 3 and not transient:
                self._isolate_poison(pending)
            time.sleep(min(0.05 * 2 ** min(self._cycle_failures - 1, 7), 5.0))
            return
        self._cycle_failures = 0
        if claim:
            self._more_waiting = batch is not None and batch.more
        claimed = batch.runs() if batch is not None else []  # decoded now the write lock is released
        for run_id, error in batch.unreadable if batch is not None else []:
            log.error(
                "run %s: claimed but unreadable by this worker (%s); left to the rescuer",
                run_id,
                error,
                extra={"action": "run_unreadable", "job_run_id": run_id},
            )
        started_now = [r for r in claimed if r.status is RunStatus.RUNNING]
        claimed = [r for r in claimed if r.status is not RunStatus.RUNNING]
        self.stats.cycles += 1
        self.stats.cycle_seconds += time.perf_counter() - t0
        self.stats.started += len(started)
        # Committed: now update memory.
        accepted = {c.job_run_id for c in done}
        for _change, run_id in pending:
            if run_id not in accepted:
                self.stale_writes_refused += 1
                log.warning(
                    "run %s: settlement refused: this worker's lease on it had expired and was taken back"
                    " (by a rescuer, perhaps this process's own, or by another holder) before the result was written",
                    run_id,
                    extra=self._run_fields(run_id, action="stale_write_refused"),
                )
        self._log_settled(done)
        safemode.after_settled(self.engine, done, actor=self.worker_id)
        self._log_gated(gated)
        self.settled += len(accepted)
        self._pending = []
        for _change, run_id in pending:
            self._effects.pop(run_id, None)
            self._audit_pending.pop(run_id, None)
        if held is not None:
            for run_id, flight in list(self._running.items()):
                if run_id not in held and not flight.abandoned and flight.interrupt is not OutcomeKind.LEASE_EXPIRED:
                    self.lease_losses += 1
                    log.warning(
                        "run %s: lease lost while running; stopping it",
                        run_id,
                        extra=self._run_fields(run_id, action="lease_lost", attempt=flight.run.attempt),
                    )
                    self._interrupt(flight, OutcomeKind.LEASE_EXPIRED, now)
        started_ids = {c.job_run_id for c in started if c.to_status is RunStatus.RUNNING}
        taken = {r.job_run_id for r in to_start} | set(refused)
        for run in to_start:
            if run.job_run_id in started_ids:
                self._launch(
                    run.evolve(status=RunStatus.RUNNING, attempt=run.attempt + 1, started_at=run.started_at or now),
                    now,
                )
        for run in started_now:
            self._launch(run, now)
        self.stats.started += len(started_now)
        self._buffer = [r for r in buffered + claimed if r.job_run_id not in taken]

    # ------------------------------------------------------------------ governance at every start
    def _refused_from_buffer(
        self, tx: StoreTx, gate: AttemptGate, to_start: list[JobRun]
    ) -> dict[str, tuple[Any, Verdict]]:
        """Runs claimed earlier and about to start now, asked again: the gate that admitted the
        claim may have closed since (a revocation, safe mode). Those refused are not started."""
        startable = [r for r in to_start if r.attempt < r.max_attempts]
        if not startable:
            return {}
        refused = gate.refused(startable)
        return {r.job_run_id: (r, refused[r.job_run_id]) for r in startable if r.job_run_id in refused}

    def _hold_or_cancel(self, tx: StoreTx, refused: dict[str, tuple[Any, Verdict]], now: datetime) -> list[RunChange]:
        """Hold the runs whose attempt a gate refused (or cancel them, when the refusal is final),
        with their transitions, events and audit entries, in the claiming transaction. Claim
        candidates carry only what the rule judges: their runs are read here (rarely needed)."""
        candidates = [rid for rid, (c, _v) in refused.items() if not isinstance(c, JobRun)]
        runs: dict[str, Any] = {r.job_run_id: r for r in tx.runs_get(candidates)} if candidates else {}
        changes = [
            transitions.refused(run, v, actor=self.worker_id, now=now)
            if v.final
            else transitions.held(run, v, actor=self.worker_id, now=now)
            for rid, (c, v) in refused.items()
            if (run := c if isinstance(c, JobRun) else runs.get(rid)) is not None
        ]
        done = tx.runs_apply(changes)
        if done:
            tx.audit_append([transitions.gate_audit_event(ch, actor=self.worker_id, now=now) for ch in done])
        return done

    def _log_gated(self, changes: list[RunChange]) -> None:
        for change in changes:
            held = change.to_status is RunStatus.HELD
            log.warning(
                "run %s: %s before attempt %d: %s",
                change.job_run_id,
                "held" if held else "cancelled",
                change.transition.attempt + 1,
                change.transition.detail.get("message"),
                extra=self._run_fields(
                    change.job_run_id,
                    action="run_held" if held else "run_cancelled_by_gate",
                    reason=change.transition.detail.get("code"),
                ),
            )

    def _log_settled(self, done: list[RunChange]) -> None:
        """One line per settled run, after its settlement committed: completions at debug
        (the hot path), retries, releases and cancellations at info, the rest as warnings."""
        for change in done:
            level, action = _SETTLED_LOG.get(change.to_status, (logging.INFO, "run_settled"))
            if not log.isEnabledFor(level):
                continue
            error = change.values.get("error_code")
            log.log(
                level,
                "run %s: attempt %d -> %s%s",
                change.job_run_id,
                change.transition.attempt,
                change.to_status.value,
                f" ({error})" if error else "",
                extra=self._run_fields(
                    change.job_run_id,
                    action=action,
                    attempt=change.transition.attempt,
                    error_code=error,
                    reason=change.transition.reason,
                ),
            )

    def _run_fields(self, run_id: str, **more: Any) -> dict[str, Any]:
        """The log fields of a run this worker holds or has just settled (ids and trace id)."""
        flight = self._running.get(run_id)
        run = flight.run if flight is not None else self._audit_pending.get(run_id)
        if run is None:
            return {"job_run_id": run_id, **more}
        return run_fields(
            run_id,
            tenant_id=run.tenant_id,
            workflow_run_id=run.workflow_run_id,
            traceparent=run.traceparent,
            **more,
        )

    def _isolate_poison(self, pending: list[tuple[RunChange, str]]) -> None:
        """Apply settlements one by one so a single bad row cannot stall the others forever."""
        if len(pending) <= 1:
            if pending:
                log.error(
                    "run %s: settlement cannot be written; leaving it to the rescuer",
                    pending[0][1],
                    extra=self._run_fields(pending[0][1], action="settlement_unwritable"),
                )
                self._running.pop(pending[0][1], None)
            self._pending = []
            return
        keep: list[tuple[RunChange, str]] = []
        for item in pending:
            try:
                now_ = self.engine.clock.now()
                with self.engine.store.write() as tx:
                    if item[1] in self._effects:
                        done = self._complete_with_effects(tx, [item], now_)
                    else:
                        done = tx.runs_apply([item[0]])
                    run = self._audit_pending.get(item[1])
                    events = [e for c in done if run is not None and (e := self._material(c, run, now_)) is not None]
                    if events:
                        audit.record_run_ends(self.engine, tx, events, anchored=self._dal_anchored, now=now_)
                safemode.after_settled(self.engine, done, actor=self.worker_id)
            except Exception:
                log.exception(
                    "run %s: settlement cannot be written; leaving it to the rescuer",
                    item[1],
                    extra=self._run_fields(item[1], action="settlement_unwritable"),
                )
            self._running.pop(item[1], None)
            self._effects.pop(item[1], None)
            self._audit_pending.pop(item[1], None)
        self._pending = keep

    # ------------------------------------------------------------------ exactly-once effects
    def _split_effectful(
        self, pending: list[tuple[RunChange, str]]
    ) -> tuple[list[tuple[RunChange, str]], list[tuple[RunChange, str]]]:
        if not self._effects:
            return pending, []
        return (
            [p for p in pending if p[1] not in self._effects],
            [p for p in pending if p[1] in self._effects],
        )

    def _complete_with_effects(self, tx: StoreTx, items: list[tuple[RunChange, str]], now: datetime) -> list[RunChange]:
        """Each completion, then its handler's effects, in the open transaction: the effects are
        kept only with an accepted (fenced) completion. An effect that raises undoes its run's
        part alone (a savepoint) and the attempt is settled as a retryable ``EFFECT_FAILED``."""
        out: list[RunChange] = []
        for change, run_id in items:
            record = self._effects[run_id]
            try:
                with tx.savepoint("jobgate_effect"):
                    matched = tx.runs_apply([change])  # jobgate's own write: its errors go on as they are
                    if matched:
                        try:
                            for effect in record.effects:
                                effect(tx.effect_connection())
                            for store_effect in record.store_effects:
                                store_effect(tx)
                        except BaseException as raised:
                            raise _EffectFailed() from raised
                out += matched
            except _EffectFailed as effect:
                # An effect is handler code: whatever it raises fails its attempt, whatever it says
                # (a handler's own database, full or missing, is not jobgate's). Were jobgate's
                # database the one failing, the settlement written next fails too, and the whole
                # turn is retried with its effects (nothing is lost).
                exc = effect.__cause__ or effect
                log.warning(
                    "run %s: its completion effect failed (%s); the attempt is retried",
                    run_id,
                    type(exc).__name__,
                    extra=self._run_fields(run_id, action="effect_failed"),
                )
                message = f"completion effect failed: {type(exc).__name__}: {described(exc)}"[:500]
                failed = settle_attempt(
                    record.run,
                    Outcome(OutcomeKind.RETRYABLE_FAILURE, "EFFECT_FAILED", message),
                    self._policy(record.run),
                    now=now,
                    actor=self.worker_id,
                    started_at=record.started_at,
                )
                out += tx.runs_apply([transitions.settled(failed, record.run, now=now)])
        return out

    # ------------------------------------------------------------------ execution
    def _launch(self, run: JobRun, now: datetime) -> None:
        span = trace = None
        if self._spans is not None:
            span, trace = self._spans.start(run, run.attempt)
        try:
            self.dispatcher.prepare([run])
            executor = self.dispatcher.executor(run)
            ctx = self.dispatcher.context(run, run.attempt, trace)
        except JobgateError as exc:
            if exc.field in HOST_FIELDS:
                # This host cannot run it (its code does not import here, its runner or target is
                # not configured here): the attempt is handed back for a worker that can, and
                # this worker claims no more runs of that definition version.
                self._return_attempt(run, TransitionReason.RELEASED_UNRUNNABLE, f"{self.worker_id}: {exc}", now)
                if run.definition_digest not in self._unrunnable:
                    self._unrunnable = self._unrunnable | {run.definition_digest}
                    self._capabilities.found_unrunnable(
                        run.definition_digest, run.tenant_id, run.job_definition_id, exc.message
                    )
                    log.warning(
                        "run %s: this worker cannot run %s (%s); leaving its runs to other workers",
                        run.job_run_id,
                        run.job_definition_id,
                        exc,
                        extra=self._run_fields(run.job_run_id, action="definition_unrunnable", attempt=run.attempt),
                    )
                if span is not None and self._spans is not None:
                    self._spans.end(span, RunStatus.SCHEDULED.value, "UNRUNNABLE_HERE")
                return
            # The run cannot be executed as defined (definition or runner vanished): that is final.
            flight = _InFlight(run, None, None, now, span=span)  # type: ignore[arg-type]
            self._settle(flight, ExecutionResult(Outcome(OutcomeKind.NON_RETRYABLE_FAILURE, exc.code, str(exc))), now)
            return
        ctx.report_progress = functools.partial(self._progress, run.job_run_id, run.lease_token)
        ctx.lock_provider = self._lock_provider
        flight = _InFlight(run, ctx, executor, now, span=span)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "run %s: attempt %d started (%s)",
                run.job_run_id,
                run.attempt,
                run.job_definition_id,
                extra=run_fields(
                    run.job_run_id,
                    tenant_id=run.tenant_id,
                    workflow_run_id=run.workflow_run_id,
                    trace_id=ctx.trace_id,
                    span_id=ctx.payload.trace_context.get("span_id"),
                    attempt=run.attempt,
                    action="run_started",
                ),
            )
        self._running[run.job_run_id] = flight
        self._busy_threads += 1
        self._pool.submit(flight)

    def _execute(self, flight: _InFlight) -> None:
        try:
            if flight.span is not None and self._spans is not None:
                with self._spans.current(flight.span):  # a handler's own spans nest under the attempt
                    result = flight.executor.execute(flight.ctx)
            else:
                result = flight.executor.execute(flight.ctx)
        except BaseException as exc:  # an executor bug, or what a handler raised past it: never the pool's thread
            log.exception(
                "executor failed for run %s",
                flight.run.job_run_id,
                extra=self._run_fields(flight.run.job_run_id, action="executor_failed", attempt=flight.run.attempt),
            )
            result = ExecutionResult(Outcome(OutcomeKind.RETRYABLE_FAILURE, "EXECUTOR_ERROR", type(exc).__name__))
        self._results.put((flight, result))
        if not self._wake.is_set():  # setting it again takes its lock for nothing
            self._wake.set()

    def _lock(self, run_id: str, attempt: int, kind: str, key: str, ttl: timedelta) -> HeldLock:
        """A handler's named lock, owned by this worker's attempt of the run: the attempt, not
        the run. A worker that lost a run's lease may claim it again while the first attempt's
        thread still runs; owned by the run, the second attempt took the lock the first still
        held (the same fencing token), and the first's release freed it under the second (found
        by a review of the cluster)."""
        try:
            name = lock_name(kind, key)
        except ValidationError as exc:  # a handler's bug: retrying cannot fix it
            raise NonRetryableError(f"{exc.field}: {exc.message}", error_code="BAD_LOCK_NAME") from None
        # Each take its own holder: a handler taking a lock it already holds (nested) is told it
        # is busy; as one holder, the inner release freed the outer hold (found by a review).
        take = secrets.token_hex(3)
        return self._named_locks.acquire(name, f"{self.worker_id}/{run_id}/attempt-{attempt}/{take}", ttl)

    def _progress(self, run_id: str, token: int, fraction: float | None, message: str | None) -> None:
        try:
            with self.engine.store.write() as tx:
                tx.run_progress(run_id, token, fraction, message)
        except Exception:
            log.warning(
                "run %s: progress not recorded",
                run_id,
                exc_info=True,
                extra=self._run_fields(run_id, action="progress_not_recorded"),
            )

    def _collect_results(self, now: datetime) -> None:
        while True:
            try:
                flight, result = self._results.get_nowait()
            except queue.Empty:
                return
            self._busy_threads -= 1
            if flight.abandoned:
                self._abandoned_threads -= 1
                continue
            if self._running.get(flight.run.job_run_id) is not flight:
                continue  # settled already (lease lost, abandoned): this result is void
            self._settle(flight, result, now)

    def _settle(self, flight: _InFlight, result: ExecutionResult, now: datetime) -> None:
        run = flight.run
        outcome = result.outcome
        if flight.overdue:  # a result past the stop's grace is void: the attempt ends as interrupted
            outcome = Outcome(OutcomeKind.STOPPED, outcome.error_code, outcome.error_message)
        if flight.interrupt is OutcomeKind.EXECUTION_TIMEOUT and outcome.kind is not OutcomeKind.SUCCEEDED:
            if self._stop_requested(run):  # a user's stop since, not yet seen: their intent wins
                outcome = Outcome(OutcomeKind.STOPPED, outcome.error_code, outcome.error_message)
            else:
                outcome = Outcome(
                    OutcomeKind.EXECUTION_TIMEOUT,
                    "EXECUTION_TIMEOUT",
                    f"attempt exceeded its execution timeout of {run.execution_timeout}",
                )
        elif flight.interrupt is OutcomeKind.RETRYABLE_FAILURE and outcome.kind is not OutcomeKind.SUCCEEDED:
            # Shut down past the grace period: the attempt did not fail, the worker left. It is
            # handed back, not counted, and the run waits for the next worker.
            self._running.pop(run.job_run_id, None)
            self._end_span(flight, RunStatus.SCHEDULED.value, "WORKER_SHUTDOWN")
            note = f"{self.worker_id} shut down before the attempt ended; the attempt does not count"
            self._return_attempt(run, TransitionReason.RELEASED_ON_SHUTDOWN, note, now)
            return
        elif flight.interrupt is OutcomeKind.LEASE_EXPIRED:
            self._running.pop(run.job_run_id, None)
            self._end_span(flight, "lease_lost", "LEASE_EXPIRED")
            return  # someone else owns the run now; our result is void
        elif flight.interrupt is None and outcome.kind is not OutcomeKind.SUCCEEDED and self._stop_requested(run):
            # Stopped by a user and failed before our next stop check: the user's intent wins,
            # the run is cancelled rather than retried.
            outcome = Outcome(OutcomeKind.STOPPED, outcome.error_code, outcome.error_message)
        artifact = None
        if result.artifact is not None:
            artifact = (result.artifact.path, result.artifact.sha256, result.artifact.size)
        settlement = settle_attempt(
            run,
            outcome,
            self._policy(run),
            now=now,
            actor=self.worker_id,
            started_at=flight.started_at,
            result=result.result,
            artifact=artifact,
        )
        ctx = flight.ctx
        if (
            settlement.decision.to_status is RunStatus.COMPLETED
            and ctx is not None
            and (ctx.effects or store_effects(ctx))
        ):
            self._effects[run.job_run_id] = _Effects(
                run, flight.started_at, tuple(ctx.effects), tuple(store_effects(ctx))
            )
        if flight.span is not None:
            error = None if outcome.kind is OutcomeKind.SUCCEEDED else (outcome.error_code or outcome.kind.value)
            self._end_span(flight, settlement.decision.to_status.value, error)
        self._queue_settlement(settlement, run, now)

    def _end_span(self, flight: _InFlight, outcome: str, error: str | None) -> None:
        if flight.span is not None and self._spans is not None:
            self._spans.end(flight.span, outcome, error)
            flight.span = None

    def _return_attempt(self, run: JobRun, reason: TransitionReason, note: str, now: datetime) -> None:
        """Hand a started attempt back (``transitions.returned``), committed with the next turn."""
        self._pending.append(
            (transitions.returned(run, actor=self.worker_id, now=now, reason=reason, note=note), run.job_run_id)
        )
        self._running.pop(run.job_run_id, None)

    def _queue_settlement(self, settlement: Settlement, run: JobRun, now: datetime) -> None:
        change = transitions.settled(settlement, run, now=now)
        self._pending.append((change, run.job_run_id))
        self._running.pop(run.job_run_id, None)
        self._audit_pending[run.job_run_id] = run

    def _material(self, change: RunChange, run: JobRun, now: datetime) -> AuditEvent | None:
        """The audit entry of a material end (``transitions.material``), recorded in the same
        transaction as the settlement: if the audit log cannot be written, the settlement is
        not either (fail closed, seed §58), and the worker tries again."""

        def required() -> bool:
            try:
                definition = self.dispatcher.definition(run)
            except Exception:  # the definition cannot be read: record rather than guess
                return True
            return definition.audit_required or definition.dal_anchor_required

        if not transitions.material(change, audit_required=required):
            return None
        return transitions.end_audit_event(
            change, actor=self.worker_id, now=now, job_definition_id=run.job_definition_id
        )

    def _dal_anchored(self, job_run_id: str) -> bool:
        """Whether a settled run's definition asks its end to be anchored at once."""
        run = self._audit_pending.get(job_run_id)
        if run is None:
            return False
        try:
            return self.dispatcher.definition(run).dal_anchor_required
        except Exception:  # not readable: its end is recorded; its window's anchor covers it
            return False

    def _stop_requested(self, run: JobRun) -> bool:
        with self.engine.store.read() as tx:
            return bool(tx.runs_stop_requested([run.job_run_id]))

    def _policy(self, run: JobRun) -> RetryPolicy:
        return settling_policy(self.engine.config, run)

    # ------------------------------------------------------------------ stops, timeouts, shutdown
    def _interrupt(self, flight: _InFlight, why: OutcomeKind, now: datetime, *, overriding: bool = False) -> None:
        """Stop the attempt for ``why``. ``overriding``: a user's stop, or the run taken away,
        says how an attempt already stopped for its timeout ends (its stop was sent already)."""
        if flight.interrupt is not None:
            if overriding and flight.interrupt is OutcomeKind.EXECUTION_TIMEOUT:
                flight.interrupt = why
            return
        flight.interrupt = why
        flight.interrupted_at = now
        grace = grace_for(flight.executor, self.settings.stop_grace)
        threading.Thread(
            target=flight.executor.stop,
            args=(flight.ctx, grace),
            daemon=True,
            name=f"jobgate-stop-{flight.run.job_run_id}",
        ).start()

    def _enforce_deadlines(self, now: datetime, shutdown_deadline: datetime | None) -> None:
        shutting_down = shutdown_deadline is not None and now >= shutdown_deadline
        for flight in list(self._running.values()):
            if flight.abandoned or (flight.overdue and not shutting_down):
                continue
            timeout = flight.run.execution_timeout
            if timeout is not None and now - flight.started_at >= timeout:
                self._interrupt(flight, OutcomeKind.EXECUTION_TIMEOUT, now)
            if shutting_down:
                self._interrupt(flight, OutcomeKind.RETRYABLE_FAILURE, now)
            if flight.interrupted_at is None:
                continue
            grace = grace_for(flight.executor, self.settings.stop_grace)
            if now - flight.interrupted_at <= grace + timedelta(seconds=1) and not (flight.overdue and shutting_down):
                continue
            if flight.interrupt is OutcomeKind.LEASE_EXPIRED or shutting_down:
                # Not ours to hold any more (another worker owns the run), or this process is
                # leaving (its threads end with it): the attempt is settled now unless its lease
                # was lost, the thread keeps its slot until it returns, its result is discarded.
                log.error(
                    "run %s: executor ignored stop for %s; abandoning its thread",
                    flight.run.job_run_id,
                    grace,
                    extra=self._run_fields(
                        flight.run.job_run_id, action="executor_abandoned", attempt=flight.run.attempt
                    ),
                )
                if flight.interrupt is OutcomeKind.LEASE_EXPIRED:
                    self._running.pop(flight.run.job_run_id, None)
                    self._end_span(flight, "lease_lost", "LEASE_EXPIRED")
                else:
                    flight.overdue = True
                    self._settle(flight, ExecutionResult(Outcome(OutcomeKind.STOPPED)), now)
                flight.abandoned = True
                self._abandoned_threads += 1
            else:
                # Its code still runs: a retry now (here or on another worker) would run the run
                # twice at once. The run stays held, its lease renewed, until the code returns;
                # the attempt then ends as the interrupt says, whatever the code returned.
                log.error(
                    "run %s: executor ignored stop for %s; the run is held until its code returns",
                    flight.run.job_run_id,
                    grace,
                    extra=self._run_fields(
                        flight.run.job_run_id, action="executor_overdue", attempt=flight.run.attempt
                    ),
                )
                flight.overdue = True

    def _check_stop_requests(self) -> None:
        """Stop the attempts a user asked to stop, and stop as lost those whose run is no longer
        this worker's (escalated by the SLA monitor, closed by the rescuer): their result is void
        and their fenced settlement would be refused; noticing here rather than at the next lease
        renewal stops the work within ``stop_check_interval``."""
        # A timed-out attempt is still looked at: its code may run on past the stop's grace (the
        # run held meanwhile), and a user's stop, or the run taken away, says how it ends.
        flights = {
            rid: f
            for rid, f in self._running.items()
            if not f.abandoned and f.interrupt in (None, OutcomeKind.EXECUTION_TIMEOUT)
        }
        if not flights:
            return
        with self.engine.store.read() as tx:
            wanted, taken = tx.runs_stop_check([(rid, f.run.lease_token) for rid, f in flights.items()])
        now = self.engine.clock.now()
        for rid in taken:
            self.lease_losses += 1
            log.warning(
                "run %s: no longer held by this worker; stopping it",
                rid,
                extra=self._run_fields(rid, action="lease_lost", attempt=flights[rid].run.attempt),
            )
            self._interrupt(flights[rid], OutcomeKind.LEASE_EXPIRED, now, overriding=True)
        for rid in wanted - taken:
            self._interrupt(flights[rid], OutcomeKind.STOPPED, now, overriding=True)

    def _release_buffer(self, now: datetime) -> None:
        if not self._buffer:
            return
        changes = [
            transitions.released(r, actor=self.worker_id, now=now, reason=TransitionReason.RELEASED_ON_SHUTDOWN)
            for r in self._buffer
        ]
        with self.engine.store.write() as tx:
            tx.runs_apply(changes)
        log.info("released %d claimed runs on shutdown", len(changes), extra={"action": "released_on_shutdown"})
        self._buffer = []

    def _held_runs(self) -> set[str]:
        """The runs this worker still answers for: running (or their outcomes not yet written)
        and claimed; its own rescuer leaves their expired leases to it."""
        held = {run_id for run_id, flight in self._running.items() if not flight.abandoned}
        return held | {r.job_run_id for r in self._buffer}

    def _rescue(self, now: datetime) -> timedelta:
        """A pass of the cluster's rescuer, if this worker leads it (``rescuer.Rescuer``)."""
        try:
            return self._rescuer.step(now)
        except Exception as exc:  # a database away is one line; anything else keeps its traceback
            log.warning("rescuer sweep failed (%s)", type(exc).__name__, exc_info=not is_transient(exc))
            return self.settings.rescue_interval

    def _heartbeat(self, now: datetime, *, first: bool = False) -> None:
        """Say this worker is alive, and what it can execute when that changed (a version was
        stored since): probed off the claim path, so claims skip it from the start. The first
        probe is made here, before the first claim; later ones on a thread of their own (a
        handler module slow to import must not hold up the loop that renews the leases), their
        findings written with the next heartbeat."""
        s = self.settings
        advertisement = None
        try:
            if first:
                advertisement = self._capabilities.refresh()
            else:
                advertisement = self._capabilities.take_ready()
                self._capabilities.start_refresh()
            self._unrunnable = self._unrunnable | self._capabilities.unrunnable
        except Exception as exc:  # a database away is one line; anything else keeps its traceback
            log.warning("capability probe failed (%s)", type(exc).__name__, exc_info=not is_transient(exc))
        try:
            with self.engine.store.write() as tx:
                tx.worker_heartbeat(
                    WorkerBeat(
                        self.worker_id, socket.gethostname(), os.getpid(), s.concurrency, s.queues, now, advertisement
                    )
                )
        except Exception as exc:
            if advertisement is not None:
                self._capabilities.unwritten()
            log.warning("heartbeat not recorded (%s)", type(exc).__name__, exc_info=not is_transient(exc))
