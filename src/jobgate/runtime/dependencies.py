"""Dependency health for a worker: runs whose definition declares a dependency that is down
wait in the queue, without using an attempt, until it is back or they waited too long.

Design (seed 000 §58 "DAL unavailable: queue DAL-dependent jobs"):

* A background thread (never the worker's loop) keeps, per declared dependency, the result
  of its last check, trusted for the check's ``ttl`` (re-checked every second while down).
  It learns which definition versions declare what from the stored definitions, re-reading
  them when a version is added.
* From that it keeps ``blocked``: the digests of definition versions that need a dependency
  not known to be up (down, or not checked yet). The worker passes the set to its claim, and
  runs of those versions are simply not claimed: they stay SCHEDULED (or RETRY_WAIT) with
  their attempt count unchanged, write nothing while they wait, and are claimed as usual once
  the set no longer holds them. A run of a definition without dependencies pays nothing: the
  set is empty and the claim is the ordinary statement. (Claiming such runs and handing them
  back, DISPATCHED -> SCHEDULED, would write two transitions per run per retry of the check
  for as long as the outage lasts; not claiming them writes none.)
* A run that has waited ``max_wait`` for the outage (counted from when it was due or when the
  outage began, whichever is later) is dead-lettered with ``missing_dependency``.
* An outage is reported once for the cluster: a ``dependency_unavailable`` event when it
  begins and ``dependency_recovered`` when it ends, per tenant whose definitions declare the
  dependency, decided by a marker row (``store.sql.outages``), plus a log line. ``jobgate
  doctor`` lists open outages. This process's view of a dependency moves only after the
  marker write it implies has committed, so a write that fails is made again at the next pass
  (a recovery is never lost, and the next outage never inherits an unclosed marker).
* A dependency a stored definition declares but this host has no check for is not an outage:
  this host only leaves those runs to the workers that have it (no marker, no event, no dead
  letter from here).

What the cache cannot see: a dependency that fails between two checks fails the attempts
that use it (their retry policy applies, as for any failure); and a definition version
stored less than a second ago is not yet known to declare anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from jobgate.core import events, transitions
from jobgate.core.audit import AuditEvent
from jobgate.core.decide import Decision
from jobgate.core.models import DeadLetterReason
from jobgate.core.settle import settle_without_attempt
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.health import probes, rules
from jobgate.health.rules import Change, Check, State
from jobgate.runtime.loops import LoopThread
from jobgate.service.engine import Engine
from jobgate.store.errors import is_transient

log = logging.getLogger("jobgate.dependencies")

ERROR_CODE = "DEPENDENCY_UNAVAILABLE"
SCAN_INTERVAL = timedelta(seconds=1)  # how often stored definitions are looked at for new versions
MARKER_TTL = timedelta(seconds=30)  # an outage marker outlives its observer by this much
SWEEP_LIMIT = 200

Probe = Callable[[Check], str | None]
MIN_WAIT = timedelta(milliseconds=50)


class DependencyMonitor:
    def __init__(
        self,
        engine: Engine,
        *,
        observer: str,
        on_change: Callable[[], None] | None = None,
        probe: Probe = probes.probe,
    ) -> None:
        self.engine = engine
        self.observer = observer
        self.blocked: frozenset[str] = frozenset()  # read by the worker's loop, replaced whole
        self._on_change = on_change
        self._probe = probe
        self._checks = rules.checks(engine.config)
        self._needs: dict[str, tuple[str, ...]] = {}  # definition digest -> dependency names
        self._tenants: dict[str, frozenset[str]] = {}  # dependency name -> tenants declaring it
        self._states: dict[str, State] = {}
        self._unconfigured: set[str] = set()  # declared but without a check here (logged once)
        self._fingerprint: tuple[int, int] | None = None
        self._next_scan: datetime | None = None
        self._loop: LoopThread | None = None

    # ------------------------------------------------------------------ control
    name = "dependencies"
    leader_only = False  # every worker checks for itself: what it claims depends on what it sees

    def start(self) -> None:
        """Read the definitions now (so runs needing an unchecked dependency are held from the
        worker's first claim), then check in the background (``runtime.loops``)."""
        try:
            self._scan(self.engine.clock.now())
        except Exception as exc:  # a database away is one line; anything else keeps its traceback
            log.warning(
                "dependency monitor: definitions not read (%s); retrying",
                type(exc).__name__,
                exc_info=not is_transient(exc),
            )
        self._loop = LoopThread(self, self.engine.clock).start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop.join(timeout=10)

    def states(self) -> dict[str, State]:
        return dict(self._states)

    def held_back(self) -> frozenset[str]:
        """The definition digests this host will not run until something changes: a dependency
        they need was seen down, or has no check here. Not those whose dependency is merely not
        checked yet (its first check is on its way): ``--exit-when-idle`` stops on this."""
        states, unconfigured = dict(self._states), set(self._unconfigured)

        def held(name: str) -> bool:
            state = states.get(name)
            return name in unconfigured or (state is not None and state.up is False)

        return frozenset(key for key, names in self._needs.items() if any(held(n) for n in names))

    def wait_passes(self, n: int, timeout: float) -> bool:
        """Wait until the background thread has made ``n`` more passes (a signal for tests and
        tools, instead of sleeping); False if it did not within ``timeout`` seconds."""
        if self._loop is None:
            return False
        return self._loop.wait_passes(self._loop.passes + n, timeout)

    def step(self, now: datetime) -> timedelta:
        return max(MIN_WAIT, self.tick(now))

    def close(self) -> None:
        """Nothing held: outage markers stay for the next observer."""

    # ------------------------------------------------------------------ one pass
    def tick(self, now: datetime) -> timedelta:
        """Re-read definitions if needed, check what is due, report changes, dead-letter runs
        that waited too long, and publish the new ``blocked``; returns when to come back."""
        if self._next_scan is None or now >= self._next_scan:
            self._scan(now)
        wanted = {name for names in self._needs.values() for name in names}
        for name in sorted(wanted):
            state = self._states.get(name) or State(name)
            check = self._checks.get(name)
            if check is None:
                self._not_configured(name)
                continue
            if now >= rules.next_check(state, check.ttl, now):
                self._apply(name, state, self._probe(check), now)
        for name in [n for n in self._states if n not in wanted]:
            del self._states[name]  # no stored definition declares it any more
        self._sweep(now)
        self._publish(rules.blocked(self._needs, self._states))
        return self._next_wake(now)

    def _scan(self, now: datetime) -> None:
        self._next_scan = now + SCAN_INTERVAL
        with self.engine.store.read() as tx:
            fingerprint = tx.definitions_fingerprint()
            if fingerprint == self._fingerprint:
                return
            found = tx.definitions_mentioning(rules.DEPENDENCIES_FIELD)
        self._needs = rules.needs_by_digest((digest, content) for _tenant, digest, content in found)
        tenants: dict[str, set[str]] = {}
        for tenant, _digest, content in found:
            for name in rules.declared(content):
                tenants.setdefault(name, set()).add(tenant)
        self._tenants = {name: frozenset(t) for name, t in tenants.items()}
        self._fingerprint = fingerprint
        self._publish(rules.blocked(self._needs, self._states))

    def _publish(self, blocked: frozenset[str]) -> None:
        shrank = bool(self.blocked - blocked)
        self.blocked = blocked
        if shrank and self._on_change is not None:
            self._on_change()  # runs are claimable again: wake the worker

    def _next_wake(self, now: datetime) -> timedelta:
        wake = SCAN_INTERVAL
        for name, state in self._states.items():
            check = self._checks.get(name)
            if check is not None:
                wake = min(wake, rules.next_check(state, check.ttl, now) - now)
        return wake

    # ------------------------------------------------------------------ reporting
    def _not_configured(self, name: str) -> None:
        """A stored definition declares ``name`` but this host has no check for it: this host
        does not claim those runs (``rules.blocked`` holds a dependency without a state), and
        that is all. It is not an outage of the dependency (a host configured for it may run
        them), so nothing is reported and nothing is dead-lettered from here."""
        if name not in self._unconfigured:
            self._unconfigured.add(name)
            log.warning(
                "dependency %s is declared by stored definitions but not configured on this host: "
                "their runs are left to workers that have it",
                name,
                extra={"action": "dependency_not_configured", "dependency": name},
            )

    def _apply(self, name: str, state: State, problem: str | None, now: datetime) -> None:
        """Fold one check into the state, the cluster's outage marker first.

        The state moves only once its report is written: a recovery whose marker write fails
        leaves the dependency down here (its runs still wait), so the next pass checks again
        and closes the marker then; an outage is held at once (runs must not start against a
        dependency seen down), and its marker is written again at every check while it lasts.
        """
        new, change = rules.observe(state, problem, now)
        if new.up is False:
            self._states[name] = new
            self._states[name] = self._report_down(new, now, opened_here=change is Change.WENT_DOWN)
        elif change is Change.RECOVERED or state.up is None:
            # Also at the first check: an outage reported before every worker restarted ends here.
            self._report_up(new, now, recovered_here=change is Change.RECOVERED)
            self._states[name] = new
        else:
            self._states[name] = new

    def _report_down(self, state: State, now: datetime, *, opened_here: bool) -> State:
        """Keep the cluster's outage marker open; the observer that opens it writes the events.
        Returns the state with the outage's start as the cluster knows it."""
        tenants = sorted(self._tenants.get(state.name, ()))
        with self.engine.store.write() as tx:
            opened, since = tx.outage_down(state.name, self.observer, now, MARKER_TTL)
            if opened:  # in the transaction that opened the marker: reported exactly once
                tx.outbox_append([(None, t, self._event(t, state, False, since, now)) for t in tenants], now)
        if opened_here or opened:
            log.warning(
                "dependency %s is down (%s): runs that declare it wait in the queue",
                state.name,
                state.problem,
                extra={"action": "dependency_unavailable", "dependency": state.name, "reported": opened},
            )
        if state.since is not None and since < state.since:
            # Another worker saw the outage begin earlier: the wait bound counts from then.
            return replace(state, since=since)
        return state

    def _report_up(self, state: State, now: datetime, *, recovered_here: bool) -> None:
        tenants = sorted(self._tenants.get(state.name, ()))
        with self.engine.store.write() as tx:
            marker = tx.outage_up(state.name)
            if marker is not None:
                down_since = marker.acquired_at
                tx.outbox_append([(None, t, self._event(t, state, True, down_since, now)) for t in tenants], now)
        if recovered_here or marker is not None:
            log.info(
                "dependency %s is back: its runs are claimed again",
                state.name,
                extra={"action": "dependency_recovered", "dependency": state.name, "reported": marker is not None},
            )

    def _event(self, tenant: str, state: State, available: bool, since: datetime, now: datetime) -> events.Event:
        return events.dependency_changed(
            tenant_id=tenant,
            dependency=state.name,
            available=available,
            problem=state.problem,
            down_since=since,
            observed_by=self.observer,
            now=now,
        )

    # ------------------------------------------------------------------ the bound
    def _sweep(self, now: datetime) -> None:
        """Dead-letter runs that waited ``max_wait`` for a dependency that is still down."""
        for name, state in self._states.items():
            spec = self._checks.get(name)
            if spec is None:
                continue  # not checked on this host: never judged down from here
            cutoff = rules.wait_cutoff(state, spec.max_wait, now)
            if cutoff is None:
                continue
            digests = sorted(d for d, names in self._needs.items() if name in names)
            if digests:
                self._dead_letter(name, state, digests, cutoff, spec.max_wait, now)

    def _dead_letter(
        self, name: str, state: State, digests: list[str], cutoff: datetime, max_wait: timedelta, now: datetime
    ) -> None:
        with self.engine.store.read() as tx:
            waiting = tx.runs_waiting_on(digests, cutoff, SWEEP_LIMIT)
        if not waiting:
            return
        decision = Decision(
            RunStatus.DEAD_LETTERED,
            TransitionReason.DEPENDENCY_UNAVAILABLE,
            dead_letter_reason=DeadLetterReason.MISSING_DEPENDENCY,
        )
        message = f"dependency {name} unavailable ({state.problem}) for longer than {max_wait.total_seconds():g} s"
        changes = []
        for run in waiting:
            s = settle_without_attempt(
                run, decision, now=now, actor=self.observer, error_code=ERROR_CODE, detail={"dependency": name}
            )
            changes.append(transitions.settled(s, run, now=now, error_message=message))
        with self.engine.store.write() as tx:
            done = tx.runs_apply(changes)
            if done:
                tx.audit_append(
                    [
                        AuditEvent(
                            c.tenant_id,
                            self.observer,
                            "run.dead_lettered",
                            "run",
                            c.job_run_id,
                            now,
                            reason=ERROR_CODE,
                            payload={"dependency": name},
                        )
                        for c in done
                    ]
                )
        for c in done:
            log.warning(
                "run %s: waited longer than %s for dependency %s; dead-lettered (missing_dependency)",
                c.job_run_id,
                max_wait,
                name,
                extra={"action": "dependency_wait_exceeded", "job_run_id": c.job_run_id, "dependency": name},
            )
