"""The rescuer: runs whose worker vanished, and runs that waited in the queue too long.

A RUNNING run whose lease expired had a worker that died or hung: the attempt counts, and
the run's retry policy decides (retry later, dead-letter, escalate), exactly as if the
attempt had failed. A DISPATCHED run whose lease expired was never started: it goes back to
SCHEDULED without using an attempt. Either way the lease is revoked (the fencing token
moves), so the vanished worker's late write is refused. A run that waited past its queue
timeout is dead-lettered with ``queue_timeout_exceeded``, and a run older than the maximum
run age (24 h by default) with ``run_maximum_age_exceeded``.

Sweeps are idempotent compare-and-sets, so two rescuers at once would do no harm; still, one
worker per cluster sweeps at a time (it holds the ``rescuer-leader`` lock), so a hundred
workers do not send a hundred identical sweep queries every second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobgate.core import transitions
from jobgate.core.canonical import isoformat_utc
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.governance import Moment
from jobgate.core.models import JobRun
from jobgate.core.settle import (
    MAXIMUM_AGE_ERROR,
    Settlement,
    queue_timeout_decision,
    settle_attempt,
    settle_overdue,
    settle_without_attempt,
)
from jobgate.core.states import LEASED, RunStatus, TransitionReason
from jobgate.core.transitions import RunChange
from jobgate.logs import run_fields
from jobgate.runtime.leadership import Lease
from jobgate.service import audit, safemode
from jobgate.service.engine import Engine
from jobgate.service.gates import AttemptFacts, AttemptGate, release_verdict
from jobgate.service.policies import settling_policy
from jobgate.store.errors import SealWritersBusy
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.rescuer")
RESCUER = "rescuer"
RESCUER_LOCK = "rescuer-leader"


@dataclass(frozen=True)
class SweepResult:
    lease_expired: int
    released: int
    queue_expired: int


def _spared(run: JobRun, owner: str | None, runs: Collection[str] | None) -> bool:
    return owner is not None and run.lease_owner == owner and (runs is None or run.job_run_id in runs)


def sweep(
    engine: Engine,
    now: datetime,
    *,
    limit: int = 500,
    facts: AttemptFacts | None = None,
    spare_owner: str | None = None,
    spared: Collection[str] | None = None,
) -> SweepResult:
    """One pass; returns how many runs it moved. Cheap when there is nothing to do (three reads
    of small partial indexes). ``facts``: the admission facts cache of the caller (a worker's).
    ``spare_owner`` and ``spared``: the worker running this sweep and the runs it still holds
    (running, or their outcomes not yet written): their expired leases are left to it, as it is
    alive (it is sweeping) and writes those outcomes once the database answers again (a regression
    review's worker, cut from the database past its leases, had its own rescuer dead-letter four
    runs whose handlers had succeeded). A run it gave up (``spared`` None: every run it leased)
    is taken back as any other."""
    with engine.store.read() as tx:
        expired = [r for r in tx.runs_lease_expired(now, limit) if not _spared(r, spare_owner, spared)]
        queued = tx.runs_queue_expired(now, limit)
        held = tx.runs_held(limit)
    if held:
        release_held(engine, held, now, facts or AttemptFacts(engine))
    if not expired and not queued:
        return SweepResult(0, 0, 0)
    changes: list[RunChange] = []
    released = 0
    for run in expired:
        if run.status is RunStatus.DISPATCHED:
            changes.append(
                transitions.released(
                    run, actor=RESCUER, now=now, reason=TransitionReason.LEASE_EXPIRED, lease_expired_before=now
                )
            )
            released += 1
            continue
        policy = settling_policy(engine.config, run)
        # A user who stopped the run meant it: a vanished worker does not turn a stop into a retry.
        outcome = (
            Outcome(OutcomeKind.STOPPED, "LEASE_EXPIRED", "worker lease expired after a stop request")
            if run.stop_requested
            else Outcome(OutcomeKind.LEASE_EXPIRED, "LEASE_EXPIRED", "worker lease expired")
        )
        s = settle_attempt(
            run,
            outcome,
            policy,
            now=now,
            actor=RESCUER,
            started_at=run.started_at or now,
        )
        changes.append(
            transitions.settled(s, run, now=now, fenced_to=run.lease_token, revoke=True, lease_expired_before=now)
        )
    for run in queued:
        changes.append(transitions.settled(_queue_timeout(run, now), run, now=now))
    with engine.store.write() as tx:
        free = tx.runs_lock_free([c.job_run_id for c in changes])  # one still being settled: next pass
        done = tx.runs_apply([c for c in changes if c.job_run_id in free])
        _audit_ends(engine, tx, done, [*expired, *queued], now)
    safemode.after_settled(engine, done, actor=RESCUER)
    moved = {c.job_run_id for c in done}
    for run in expired:
        if run.job_run_id in moved:
            log.warning(
                "run %s: lease of %s expired (attempt %d); recovered",
                run.job_run_id,
                run.lease_owner,
                run.attempt,
                extra=run_fields(
                    run.job_run_id,
                    tenant_id=run.tenant_id,
                    workflow_run_id=run.workflow_run_id,
                    traceparent=run.traceparent,
                    attempt=run.attempt,
                    action="lease_expired",
                ),
            )
    return SweepResult(
        lease_expired=sum(1 for r in expired if r.job_run_id in moved and r.status is RunStatus.RUNNING),
        released=sum(1 for r in expired if r.job_run_id in moved and r.status is RunStatus.DISPATCHED),
        queue_expired=sum(1 for r in queued if r.job_run_id in moved),
    )


def release_held(engine: Engine, held: Sequence[JobRun], now: datetime, facts: AttemptFacts) -> int:
    """Look at held runs again with the admission rule (``core.governance``): release those it
    admits now (safe mode off, the trust gates back, the code re-approved), cancel those whose
    refusal became final (approval revoked), dead-letter those past their queue deadline; the
    others wait. Each move is a recorded transition and an audit entry. Returns how many moved.

    The runs are those read a moment ago; each change is a compare-and-set on HELD, and a release
    on a condition that closed again meanwhile is harmless: the worker that claims the run asks
    the rule again."""
    facts.refresh(now)
    with engine.store.write() as tx:
        tx.gates_shared()
        gate = AttemptGate(facts, tx, now, Moment.RELEASE)
        gate.prefetch(held)
        changes: list[RunChange] = []
        for run in held:
            if run.queue_deadline_at is not None and run.queue_deadline_at <= now:
                changes.append(transitions.settled(_queue_timeout(run, now), run, now=now))
                continue
            verdict = release_verdict(gate, run)
            if verdict is None:
                continue
            if verdict.admitted:
                changes.append(transitions.hold_released(run, actor=RESCUER, now=now))
            else:
                changes.append(transitions.refused(run, verdict, actor=RESCUER, now=now))
        done = tx.runs_apply(changes) if changes else []
        # A queue timeout is an end like any other; a release or a final refusal is a gate's
        # decision, audited as one (the worker's claim audits its holds the same way).
        _audit_ends(engine, tx, [c for c in done if c.to_status is RunStatus.DEAD_LETTERED], held, now)
        gated = [c for c in done if c.to_status is not RunStatus.DEAD_LETTERED]
        if gated:
            tx.audit_append([transitions.gate_audit_event(c, actor=RESCUER, now=now) for c in gated])
    for change in done:
        log.info(
            "run %s: %s (was held for %s)",
            change.job_run_id,
            {RunStatus.SCHEDULED: "released", RunStatus.CANCELLED: "cancelled"}.get(
                change.to_status, change.to_status.value
            ),
            change.transition.detail.get("hold_reason") or change.transition.detail.get("code"),
            extra={"action": "run_released" if change.to_status is RunStatus.SCHEDULED else "run_closed_while_held"},
        )
    return len(done)


def close_overdue(engine: Engine, now: datetime, maximum_age: timedelta, *, limit: int = 50) -> int:
    """Dead-letter runs older than ``maximum_age`` with ``run_maximum_age_exceeded`` (seed 001:
    abandoned runs): the oldest ``limit`` waiting and ``limit`` leased ones per pass. A leased
    run's lease is revoked in the same compare-and-set, so its worker can no longer complete it.
    Returns how many were closed."""
    with engine.store.read() as tx:
        overdue = tx.runs_over_age(now - maximum_age, limit)
    changes: list[RunChange] = []
    for run in overdue:
        leased = run.status in LEASED  # fenced to the token seen, and revoked
        s = settle_overdue(run, now=now, actor=RESCUER)
        changes.append(
            transitions.settled(s, run, now=now, fenced_to=run.lease_token if leased else None, revoke=leased)
        )
    if not changes:
        return 0
    with engine.store.write() as tx:
        done = tx.runs_apply(changes)
        _audit_ends(engine, tx, done, overdue, now)
    runs = {r.job_run_id: r for r in overdue}
    for change in done:
        run = runs[change.job_run_id]
        log.warning(
            "run %s: older than the maximum run age (%s); closed as %s",
            change.job_run_id,
            maximum_age,
            MAXIMUM_AGE_ERROR,
            extra=run_fields(
                run.job_run_id,
                tenant_id=run.tenant_id,
                workflow_run_id=run.workflow_run_id,
                traceparent=run.traceparent,
                action="run_maximum_age_exceeded",
            ),
        )
    return len(done)


def _audit_ends(engine: Engine, tx: StoreTx, done: Sequence[RunChange], runs: Sequence[JobRun], now: datetime) -> None:
    """The audit entries of the material ends among ``done`` (``transitions.material``, the
    worker's rule too), written with the changes."""
    by_id = {r.job_run_id: r for r in runs}
    material = []

    def anchored(job_run_id: str) -> bool:
        run = by_id[job_run_id]
        try:
            definition = engine.definition(tx, run.tenant_id, run.job_definition_id, run.definition_version)
        except Exception:  # not readable: its end is recorded; its window's anchor covers it
            return False
        return definition.dal_anchor_required

    for change in done:
        run = by_id[change.job_run_id]

        def required(run: JobRun = run) -> bool:
            try:
                definition = engine.definition(tx, run.tenant_id, run.job_definition_id, run.definition_version)
            except Exception:  # the definition cannot be read: record rather than guess
                return True
            return definition.audit_required or definition.dal_anchor_required

        if transitions.material(change, audit_required=required):
            material.append(
                transitions.end_audit_event(change, actor=RESCUER, now=now, job_definition_id=run.job_definition_id)
            )
    if material:
        audit.record_run_ends(engine, tx, material, anchored=anchored, now=now)


class Rescuer:
    """The rescuer as a ``Loop`` (``runtime.loops``): leader-only, one sweeper in the cluster.

    Each pass, while it holds the ``rescuer-leader`` lease: recovers runs whose leases expired
    and dead-letters those past their queue deadline (``sweep``), looks at held runs again,
    closes runs older than the maximum run age every ``maximum_age_interval``, and chains the
    seals written since the last batch every ``evidence.seal_interval_seconds``. A worker steps
    it from its own turn (its admission facts are shared with the held runs' release)."""

    name = "rescuer"
    leader_only = True

    def __init__(
        self,
        engine: Engine,
        *,
        owner: str,
        facts: AttemptFacts,
        interval: timedelta,
        maximum_run_age: timedelta,
        maximum_age_interval: timedelta,
        held: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.engine = engine
        self.interval = interval
        self.maximum_run_age = maximum_run_age
        self.maximum_age_interval = maximum_age_interval
        self._facts = facts
        self._owner = owner  # the worker this rescuer runs in
        self._held = held  # the runs it still holds (running, or outcomes not yet written)
        self._lease = Lease(engine.store, RESCUER_LOCK, owner, max(3 * interval, timedelta(seconds=3)))
        self._next_age_check: datetime | None = None
        self._next_seal_batch: datetime | None = None

    def step(self, now: datetime) -> timedelta:
        if self._lease.hold(now) is None:
            return self.interval
        try:
            sweep(self.engine, now, facts=self._facts, spare_owner=self._owner, spared=self._held())
            if self._next_age_check is None or now >= self._next_age_check:
                self._next_age_check = now + self.maximum_age_interval
                close_overdue(self.engine, now, self.maximum_run_age)
        finally:
            # The cluster's one sweeper also chains the seals, whatever became of the sweep.
            if self._next_seal_batch is None or now >= self._next_seal_batch:
                self._next_seal_batch = now + self.engine.config.evidence.seal_interval
                try:
                    audit.seal_pending(self.engine, now)
                except SealWritersBusy as busy:
                    log.info("%s", busy.message, extra={"action": "seal_batch_put_off"})
                except Exception:
                    log.exception("seal batch failed; the seals wait for the next one")
        return self.interval

    def close(self) -> None:
        self._lease.release()


def _queue_timeout(run: JobRun, now: datetime) -> Settlement:
    """A run that waited past its queue deadline without starting, dead-lettered with a message
    that says so (what ``runs show`` and the dead letter list print)."""
    deadline = run.queue_deadline_at or now
    return settle_without_attempt(
        run,
        queue_timeout_decision(),
        now=now,
        actor=RESCUER,
        error_code="QUEUE_TIMEOUT_EXCEEDED",
        error_message=f"did not start before its queue deadline ({isoformat_utc(deadline)})",
    )
