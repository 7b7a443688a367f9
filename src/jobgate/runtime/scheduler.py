"""The scheduler loop: while it leads, it executes the plans of every stored schedule.

One leader fires. Leadership is the fenced, expiring ``scheduler-leader`` lock; a standby
scheduler keeps trying to take it and does within the lease after the leader dies. Each
schedule's plan is executed in one write transaction that (1) checks the lock is still ours,
(2) moves the schedule's watermark from the value the plan started at (a compare-and-set),
(3) creates the plan's runs and (4) records its misses. A leader that lost its lease, or two
schedulers that planned from the same watermark, therefore write nothing twice; and the runs'
idempotency keys (which name the schedule and the slot) are a second wall behind that.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobgate.core.errors import GovernanceRefusal, JobgateError
from jobgate.core.models import JobRun
from jobgate.core.states import LEASED, PENDING, RunStatus
from jobgate.logs import run_fields
from jobgate.runtime.leadership import Lease
from jobgate.scheduling.model import OverlapPolicy, Schedule, ScheduleKind
from jobgate.scheduling.plan import (
    TRIGGER_PREFIX,
    Miss,
    MissReason,
    Period,
    Plan,
    apply_overlap,
    next_fires,
    parse_slot,
    pause_spans,
    plan,
    plan_periods,
)
from jobgate.scheduling.records import StoredSchedule, pause_switches
from jobgate.service import control
from jobgate.service.cluster import SCHEDULER_LEADER
from jobgate.service.engine import Engine
from jobgate.service.schedules import fire_request
from jobgate.service.snapshots import resolve_snapshot, watched_digest
from jobgate.service.submission import PreparedSubmission
from jobgate.store.base import RunFilter
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.scheduler")

LEADER_LOCK = SCHEDULER_LEADER
SCHEDULER_ACTOR = "scheduler"
MAX_BACKOFF = timedelta(minutes=5)  # the longest a failing schedule waits between tries


FIRES_REFUSED = "its fires are refused"  # in a failing schedule's error when its fires were refused


def _refused(item: StoredSchedule) -> bool:
    """Whether the schedule is failing because its fires were refused (not a plan or a write)."""
    return f"{FIRES_REFUSED}:" in (item.last_error or "")


def _log_refused(schedule: Schedule, count: int, exc: Exception, *, quiet: bool) -> None:
    """A schedule's fires refused (before the write lock or at it): a warning at the first of a
    streak, debug after (``quiet``); every slot is audited and recorded whatever the level."""
    log.log(
        logging.DEBUG if quiet else logging.WARNING,
        "schedule %s: %d fires refused: %s",
        schedule.schedule_id,
        count,
        exc,
        extra={"action": "schedule_fire_refused", "schedule_id": schedule.schedule_id},
    )


class FiresRefused(JobgateError):
    """A schedule's fires were refused (recorded as misses); the schedule is marked failing."""

    code = "schedule_fires_refused"


@dataclass
class TickResult:
    leader: bool
    fired: int = 0  # runs created
    missed: int = 0
    warnings: list[str] = field(default_factory=list)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        *,
        owner: str | None = None,
        lease: timedelta = timedelta(seconds=10),
        max_sleep: timedelta = timedelta(seconds=1),
    ) -> None:
        self.engine = engine
        self.owner = owner or f"scheduler-{uuid.uuid4().hex[:12]}"  # opaque, as worker ids
        self.lease = lease
        self.max_sleep = max_sleep
        self._lease = Lease(engine.store, LEADER_LOCK, self.owner, lease)
        self._known: list[StoredSchedule] = []  # the schedules the last tick read

    # ------------------------------------------------------------------ leadership
    def hold_leadership(self, now: datetime) -> int | None:
        """Take or renew the leader lease; the token, or None while another scheduler leads."""
        return self._lease.hold(now)

    @property
    def _token(self) -> int | None:
        return self._lease.token

    # ------------------------------------------------------------------ one pass
    def tick(self, now: datetime | None = None) -> TickResult:
        now = now or self.engine.clock.now()
        token = self.hold_leadership(now)
        if token is None:
            return TickResult(leader=False)
        result = TickResult(leader=True)
        started = time.monotonic()
        with self.engine.store.read() as tx:
            stored = tx.schedules_list()
            safe_mode = _safe_mode_periods(tx, stored)
        self._known = stored
        for item in stored:
            if item.retry_at is not None and now < item.retry_at:
                continue  # failing: backing off
            # A tick of many schedules can outlast a third of the lease: renewed as it goes (a
            # cheap no-op until then), at the tick's instant plus the time it has taken, so a
            # standby never takes over a leader that is busy.
            if self._token is None:
                break  # a commit of this tick found another holder: the tick is over, not retaken
            renewed = self.hold_leadership(now + timedelta(seconds=time.monotonic() - started))
            if renewed is None:
                result.leader = False
                break
            token = renewed
            try:
                admitted = self._one(item, token, now, result, safe_mode.get(item.schedule.tenant_id, []))
            except FiresRefused as exc:
                # Recorded already, slot by slot, and the watermark moved on: no back-off. Waiting
                # one out made the slots due meanwhile late (skipped or coalesced by the misfire
                # policy as if the scheduler had been down, found by a review) and kept a schedule
                # whose definition was just approved from firing for up to five minutes.
                self._failed(item, exc, now, back_off=False)
                continue
            except Exception as exc:
                self._failed(item, exc, now)
                continue
            # A schedule whose fires were refused stays failing until one is admitted (a tick with
            # nothing due says nothing about its next fire); any other failure ends with a tick
            # that plans without one.
            if item.failures and (admitted or not _refused(item)):
                self._recovered(item)
        return result

    def _one(self, item: StoredSchedule, token: int, now: datetime, result: TickResult, periods: list[Period]) -> bool:
        """Plan and fire one schedule; whether a fire was admitted and stored."""
        if item.schedule.kind is ScheduleKind.CONFIGURATION:
            return self._configuration(item, token, now, result)
        if item.schedule.kind is ScheduleKind.SAFE_MODE:
            p = plan_periods(
                item.schedule, watermark=item.watermark, now=now, periods=periods, paused=self._paused_since(item)
            )
        else:
            p = plan(item.schedule, watermark=item.watermark, now=now, paused=self._paused_since(item))
        if not p.fires and not p.misses and p.watermark == item.watermark:
            return False  # nothing owed: keep the watermark, write nothing
        return self._execute(
            item.schedule, item.watermark, p, token, now, result, version=item.updated_at, quiet=_refused(item)
        )

    def _paused_since(self, item: StoredSchedule) -> tuple[Period, ...]:
        """The spans the schedule was paused in since its watermark: a pause and a resume with no
        tick between them left no trace in the watermark, and the slots owed then would run.
        Read only when the schedule changed since the watermark (nothing else can pause it)."""
        if item.updated_at <= item.watermark:
            return ()
        s = item.schedule
        with self.engine.store.read(tenant_id=s.tenant_id) as tx:
            changes = tx.changes_list(s.tenant_id, s.schedule_id, since=item.watermark)
        return pause_spans(pause_switches(changes), after=item.watermark)

    def _failed(self, item: StoredSchedule, exc: Exception, now: datetime, *, back_off: bool = True) -> None:
        """One schedule's plan or fire failed: it is marked failing (its error kept, tried again
        after a back-off that doubles up to ``MAX_BACKOFF``; at its next slot when ``back_off``
        is false) and the tick goes on with the others. When even that cannot be written (the
        database is gone) the tick fails as a whole."""
        s = item.schedule
        error = str(exc) if isinstance(exc, JobgateError) else f"internal error ({type(exc).__name__})"
        # The back-off doubles over failures that backed off: a streak of refusals before this
        # failure did not (found by a regression review: the first real failure waited 5 min).
        streak = 0 if _refused(item) else item.failures
        delay = min(MAX_BACKOFF, timedelta(seconds=2 ** min(streak + 1, 16))) if back_off else timedelta(0)
        try:
            with self.engine.store.write() as tx:
                tx.schedule_failed(s.tenant_id, s.schedule_id, error, now + delay)
        except Exception:
            raise exc from None
        log.log(
            logging.DEBUG if not back_off and _refused(item) else logging.WARNING,  # a refusal streak: said once
            "schedule %s failing (%d in a row): %s; tried again %s",
            s.schedule_id,
            item.failures + 1,
            error,
            f"in {delay.total_seconds():.0f} s" if back_off else "at its next slot",
            extra={"action": "schedule_failing", "schedule_id": s.schedule_id, "tenant_id": s.tenant_id},
        )

    def _recovered(self, item: StoredSchedule) -> None:
        s = item.schedule
        with self.engine.store.write() as tx:
            tx.schedule_recovered(s.tenant_id, s.schedule_id)
        log.info(
            "schedule %s recovered after %d failures",
            s.schedule_id,
            item.failures,
            extra={"action": "schedule_recovered", "schedule_id": s.schedule_id, "tenant_id": s.tenant_id},
        )

    def _execute(
        self,
        schedule: Schedule,
        watermark: datetime,
        p: Plan,
        token: int,
        now: datetime,
        result: TickResult,
        *,
        version: datetime | None = None,
        quiet: bool = False,
    ) -> bool:
        """Store a plan's fires and misses; whether a fire was admitted and stored. ``quiet``: the
        schedule's fires were refused already (a streak): a refusal again is audited and recorded
        slot by slot, and logged at debug level, not one warning a slot for as long as it lasts."""
        fires, misses = list(p.fires), list(p.misses)
        replaced: list[JobRun] = []
        if schedule.overlap is not OverlapPolicy.ALLOW and fires:
            active = self._active_runs(schedule)
            kept, overlapping = apply_overlap(schedule, p.fires, active=bool(active))
            if kept and active and schedule.overlap is OverlapPolicy.REPLACE:
                replaced = active  # cancelled or stopped in the fire's own fenced transaction
            fires, misses = kept, misses + overlapping
        try:
            requests = [
                fire_request(
                    schedule,
                    at=f.fire_at,
                    actor=SCHEDULER_ACTOR,
                    reason=f"schedule {schedule.schedule_id}" + (" (late)" if f.late else ""),
                    trigger_id=f.trigger_id,
                    window=f.window,
                    params=f.params,  # rendered by the plan
                    slot=f.trigger_id,  # one run per slot, ever
                )
                for f in fires
            ]
            prepared = self.engine.pipeline.prepare(requests, now=now, record=False)
            refusal: JobgateError | None = None
        except JobgateError as exc:
            refusal = exc
            if isinstance(exc, GovernanceRefusal):  # each refused slot is audited, not only the first
                self.engine.admission.record_refusals(requests, exc, actor=SCHEDULER_ACTOR, now=now)
            # The definition cannot run now (unknown, not active, params refused): the slots are
            # recorded as refused, never dropped in silence, and the schedule moves on.
            _log_refused(schedule, len(fires), exc, quiet=quiet)
            misses += [Miss(schedule.schedule_id, f.fire_at, MissReason.REFUSED) for f in fires]
            prepared, fires = [], []
        advance = lambda tx: tx.schedule_advance(  # noqa: E731
            schedule.tenant_id, schedule.schedule_id, watermark, p.watermark, version
        )
        try:
            committed = self._commit(
                schedule, advance, prepared, misses, token, now, result, replaced=replaced, quiet=quiet
            )
        except FiresRefused:  # refused under the write lock: recorded; the plan's warnings still said
            self._warn(schedule, p, result)
            raise
        if not committed:
            return False
        self._warn(schedule, p, result)
        if refusal is not None:  # recorded; and the schedule is failing until a fire is admitted
            raise FiresRefused(f"{FIRES_REFUSED}: {refusal}", source=schedule.schedule_id)
        return bool(prepared)

    @staticmethod
    def _warn(schedule: Schedule, p: Plan, result: TickResult) -> None:
        for warning in p.warnings:
            log.warning(warning, extra={"action": "schedule_catchup_limited", "schedule_id": schedule.schedule_id})
        result.warnings += p.warnings

    def _configuration(self, item: StoredSchedule, token: int, now: datetime, result: TickResult) -> bool:
        """Fire once for each snapshot of the watched profile that becomes active (a new digest);
        whether a fire was admitted and stored."""
        s = item.schedule
        assert s.config_profile is not None
        try:
            snapshot = resolve_snapshot(self.engine.config, s.config_profile, s.tenant_id)
        except JobgateError as exc:
            log.warning("schedule %s: profile %s cannot be resolved: %s", s.schedule_id, s.config_profile, exc)
            return False
        seen = watched_digest(snapshot, s.config_watch)
        if seen == item.config_digest_seen or s.paused:
            return False  # a paused schedule answers the snapshot active when it is resumed
        what = f"{', '.join(s.config_watch)} of " if s.config_watch else ""
        trigger_id = f"{TRIGGER_PREFIX}{s.schedule_id}@config-{_config_label(snapshot.config_snapshot_id, s, seen)}"
        request = fire_request(
            s,
            at=now,
            actor=SCHEDULER_ACTOR,
            reason=f"configuration {what}{s.config_profile} activated (schedule {s.schedule_id})",
            trigger_id=trigger_id,
            policy_context={"config_profile": s.config_profile, "config_digest": snapshot.config_digest},
            # One run per snapshot (or watched values), ever: the slot, not the idempotency key,
            # which includes the whole snapshot's digest (an unwatched key changed since the
            # values' first run would make a second).
            slot=trigger_id,
        )
        misses: list[Miss] = []
        try:
            prepared = self.engine.pipeline.prepare([request], now=now)
        except JobgateError as exc:
            log.warning("schedule %s: configuration fire refused: %s", s.schedule_id, exc)
            prepared, misses = [], [Miss(s.schedule_id, now, MissReason.REFUSED)]
        committed = self._commit(
            s,
            lambda tx: tx.schedule_config_seen(s.tenant_id, s.schedule_id, item.config_digest_seen, seen),
            prepared,
            misses,
            token,
            now,
            result,
        )
        return committed and bool(prepared)

    def _commit(
        self,
        schedule: Schedule,
        advance: Callable[[StoreTx], bool],
        prepared: list[PreparedSubmission],
        misses: list[Miss],
        token: int,
        now: datetime,
        result: TickResult,
        *,
        replaced: Sequence[JobRun] = (),
        quiet: bool = False,
    ) -> bool:
        """One transaction: the lease is still ours, ``advance`` (the schedule's compare-and-set)
        matched, then the runs, the runs they replace (overlap ``replace``: only when a fire is
        stored) and the misses. False, with nothing written, otherwise. ``quiet``: as
        ``_execute``'s, for a refusal at the lock."""
        try:
            with self.engine.store.write() as tx:
                if not tx.lock_holds(LEADER_LOCK, self.owner, token, now):
                    self._lease.lost()
                    log.warning(
                        "%s: lost the leader lease; nothing written", self.owner, extra={"action": "leader_lost"}
                    )
                    return False
                if not advance(tx):
                    return False  # changed under us (another scheduler, an edit): decided again next tick
                prepared = self._not_retired(tx, schedule, prepared)
                made = self.engine.pipeline.create(tx, prepared, now)
                if replaced and any(r.created for r in made):
                    self._replace(tx, schedule, replaced, now)
                tx.misses_record(schedule.tenant_id, misses, now)
        except GovernanceRefusal as exc:
            # Refused under the write lock (a revoked approval, the licence's slots): the fires
            # are recorded as refused and audited, the schedule moves on; never a crashed tick.
            if not prepared:
                raise
            self.engine.admission.record_refusal_for(prepared, exc, actor=SCHEDULER_ACTOR, now=now)
            # Each at its slot's own instant (the misses are keyed by it): at the tick's instant,
            # every refused slot but one was dropped as a duplicate.
            refused = [Miss(schedule.schedule_id, _slot_instant(p), MissReason.REFUSED) for p in prepared]
            if not self._commit(schedule, advance, [], [*misses, *refused], token, now, result):
                return False
            # Recorded; and the schedule is failing until a fire is admitted, as when the refusal
            # came before the lock (found by a regression review: it stayed active, unlogged).
            _log_refused(schedule, len(prepared), exc, quiet=quiet)
            raise FiresRefused(f"{FIRES_REFUSED}: {exc}", source=schedule.schedule_id) from None
        result.fired += sum(1 for r in made if r.created)
        result.missed += len(misses)
        for r in made:
            if r.created:
                log.info(
                    "schedule %s fired run %s (due %s)",
                    schedule.schedule_id,
                    r.run.job_run_id,
                    r.run.due_at.isoformat(),
                    extra=run_fields(
                        r.run.job_run_id,
                        tenant_id=r.run.tenant_id,
                        traceparent=r.run.traceparent,
                        schedule_id=schedule.schedule_id,
                        action="schedule_fired",
                    ),
                )
        return True

    @staticmethod
    def _not_retired(tx: StoreTx, schedule: Schedule, prepared: list[PreparedSubmission]) -> list[PreparedSubmission]:
        """The fires whose slot has not had its run. A slot whose run retention has deleted (a
        backfill ran it while the scheduler was down, longer ago than the retention period) had
        its run, as a slot whose run is stored has: nothing is made for it and the schedule
        moves on (refusing it, as a person's request of a retired key is, would fail the tick
        and stop the schedule for good)."""
        gone = tx.runs_retired_holders([p.create.run for p in prepared]) if prepared else {}
        for key, retired in gone.items():
            log.info(
                "schedule %s: slot %s had its run %s, retired by retention; not fired again",
                schedule.schedule_id,
                retired.slot or key,
                retired.job_run_id,
                extra={"action": "schedule_slot_retired", "schedule_id": schedule.schedule_id},
            )
        return [p for p in prepared if p.create.run.idempotency_key not in gone]

    def _active_runs(self, schedule: Schedule) -> list[JobRun]:
        """Pending or running runs this schedule made."""
        with self.engine.store.read() as tx:
            return tx.runs_list(
                RunFilter(
                    tenant_id=schedule.tenant_id,
                    job_definition_id=schedule.job_definition_id,
                    statuses=tuple(PENDING | LEASED),
                    trigger_prefix=f"{TRIGGER_PREFIX}{schedule.schedule_id}@",
                    limit=1000,
                )
            )

    def _replace(self, tx: StoreTx, schedule: Schedule, active: Sequence[JobRun], now: datetime) -> None:
        """``replace``: cancel the schedule's pending runs and ask its running ones to stop, in the
        fire's transaction, once its run is created: a leader that lost its lease, a schedule
        changed under it or a refused fire replaces nothing (the two land together or not at all)."""
        reason = f"replaced by the next fire of schedule {schedule.schedule_id}"
        for run in active:
            replace = control.stop_in if run.status is RunStatus.RUNNING else control.cancel_in
            try:  # each refusal is raised before it writes anything
                replace(tx, run.job_run_id, actor=SCHEDULER_ACTOR, reason=reason, tenant_id=None, now=now)
            except JobgateError as exc:  # it finished meanwhile: nothing to replace
                log.info("schedule %s: run %s not replaced: %s", schedule.schedule_id, run.job_run_id, exc)

    # ------------------------------------------------------------------ the loop (``runtime.loops``)
    name = "scheduler"
    leader_only = True

    def step(self, now: datetime) -> timedelta:
        """A tick, then sleep until the next slot of any schedule (at most ``max_sleep``)."""
        self.tick(now)
        return timedelta(seconds=self._sleep_seconds())

    def close(self) -> None:
        self.release()

    def _sleep_seconds(self) -> float:
        """Until the next slot of any schedule, at most ``max_sleep`` (standbys poll at that rate)."""
        now = self.engine.clock.now()
        wait = self.max_sleep
        if self._token is not None:
            for item in self._known:  # as the last tick read them; watermarks only moved up to now
                if item.schedule.paused:
                    continue
                upcoming = next_fires(item.schedule, max(item.watermark, now), 1)
                if upcoming:
                    wait = min(wait, max(upcoming[0].fire_at - now, timedelta(0)))
        return max(self._lease.within_renewal(wait).total_seconds(), 0.01)

    def release(self) -> None:
        """Give up the leader lease (a standby takes over at once instead of after its expiry)."""
        self._lease.release()


def _config_label(snapshot_id: str, s: Schedule, seen: str) -> str:
    """The snapshot, or (watching keys) the watched values, that a configuration fire answers."""
    return f"watch-{seen.split(':', 1)[1][:24]}" if s.config_watch else snapshot_id


def _safe_mode_periods(tx: StoreTx, stored: list[StoredSchedule]) -> dict[str, list[Period]]:
    """Per tenant with safe-mode schedules, the safe-mode periods that reach past the earliest of
    their watermarks (older ones were planned already)."""
    earliest: dict[str, datetime] = {}
    for item in stored:
        if item.schedule.kind is ScheduleKind.SAFE_MODE:
            tenant = item.schedule.tenant_id
            earliest[tenant] = min(earliest.get(tenant, item.watermark), item.watermark)
    return {
        tenant: [Period(p.activated_at, p.deactivated_at) for p in tx.safe_mode_periods(tenant, ending_after=mark)]
        for tenant, mark in earliest.items()
    }


def _slot_instant(prepared: PreparedSubmission) -> datetime:
    """The instant of the slot a prepared fire is for (a batch window's end), as its slot names
    it; the run's due time for a fire with no slot."""
    run = prepared.create.run
    found = parse_slot(run.slot)
    return run.due_at if found is None else found[1]
