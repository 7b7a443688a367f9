"""Pure rules of alerting and dependency health: which checks exist, what a definition
declares, how an observation moves a dependency's state, when a waiting run has waited too
long, and how webhook deliveries are retried. No I/O here (the probes and the monitor are the
edges), so each rule is tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from jobgate.config.health import ANCHOR_SINK, ENVIRONMENT_CHECK, TARGET_PREFIX, DependencySpec
from jobgate.documents import Reader, join

if TYPE_CHECKING:  # annotations only: jobgate.config imports this package
    from jobgate.config import JobgateConfig

DEPENDENCIES_FIELD = "dependencies"


class ProbeKind(StrEnum):
    HEALTH = "health"  # a health URL: a 2xx answer is up
    REACHABLE = "reachable"  # an endpoint that does work (anchor sink, target): any answer below 500 is up
    FILE = "file"  # a local append-only file: its folder exists (or can be made) and is writable


@dataclass(frozen=True)
class Check:
    """How to tell whether the dependency ``name`` is up, and how long runs wait for it."""

    name: str
    kind: ProbeKind
    where: str  # the URL or the file path
    timeout: timedelta
    ttl: timedelta
    max_wait: timedelta


def checks(config: JobgateConfig) -> dict[str, Check]:
    """Every dependency a definition may declare on this host, by name."""
    tuned = config.dependencies
    default = DependencySpec("")
    out: dict[str, Check] = {}

    def add(name: str, kind: ProbeKind, where: str, timings: DependencySpec = default) -> None:
        spec = tuned.get(name)
        if spec is not None:  # configured by name: its timings, and its URL if it gives one
            timings = spec
            if spec.url is not None:
                kind, where = ProbeKind.HEALTH, spec.url
        out[name] = Check(name, kind, where, timings.timeout, timings.ttl, timings.max_wait)

    if config.evidence.anchor_sink_url:
        add(ANCHOR_SINK, ProbeKind.REACHABLE, config.evidence.anchor_sink_url)
    else:
        add(ANCHOR_SINK, ProbeKind.FILE, str(config.anchor_sink_path))
    gates = config.trust_gates
    if gates.environment_url:
        timings = replace(default, timeout=gates.environment_timeout, ttl=gates.environment_ttl)
        add(ENVIRONMENT_CHECK, ProbeKind.HEALTH, gates.environment_url, timings)
    for meid, target in config.targets.items():
        if target.http is not None:
            timings = replace(default, timeout=min(target.http.timeout, default.timeout))
            add(TARGET_PREFIX + meid, ProbeKind.REACHABLE, target.http.url, timings)
    for name, spec in tuned.items():
        if name not in out and spec.url is not None:
            add(name, ProbeKind.HEALTH, spec.url)
    return out


def check_declared(r: Reader, value: Any, config: JobgateConfig) -> tuple[str, ...]:
    """A definition's ``dependencies``: distinct names of checks configured on this host."""
    names = r.strings(value, DEPENDENCIES_FIELD, unique=True)
    known = checks(config)
    for i, name in enumerate(names):
        r.known(name, join(DEPENDENCIES_FIELD, i), "dependency", known)
    return tuple(names)


def declared(content: Mapping[str, Any]) -> tuple[str, ...]:
    """The dependencies a stored definition's content declares (none for older content)."""
    value = content.get(DEPENDENCIES_FIELD)
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


# ---------------------------------------------------------------------- a dependency's state
class Change(StrEnum):
    WENT_DOWN = "went_down"  # an outage begins: report it once
    RECOVERED = "recovered"


@dataclass(frozen=True)
class State:
    """What this process last saw of one dependency. ``up`` is None until the first check:
    runs that need it wait until then, so a worker that just started never runs a job against
    a dependency nobody has looked at. ``since`` is when ``up`` last changed."""

    name: str
    up: bool | None = None
    since: datetime | None = None
    problem: str | None = None
    checked_at: datetime | None = None


def observe(state: State, problem: str | None, now: datetime) -> tuple[State, Change | None]:
    """Fold one check result (``problem`` None: up) into the state; the change it makes, if
    any. The first result is a change only when it is down: a dependency found up at start has
    not recovered from anything."""
    up = problem is None
    if state.up is up:
        return replace(state, problem=problem, checked_at=now), None
    change = Change.WENT_DOWN if not up else Change.RECOVERED if state.up is False else None
    return State(state.name, up, now, problem, now), change


def blocked(needs: Mapping[str, tuple[str, ...]], states: Mapping[str, State]) -> frozenset[str]:
    """Keys (definition digests) whose declared dependencies are not all known to be up. A
    dependency without a state (not checked yet, or with no check on this host) holds its runs
    here; only a dependency seen down has an outage (and a wait bound)."""
    return frozenset(
        key for key, names in needs.items() if any((s := states.get(n)) is None or s.up is not True for n in names)
    )


def wait_cutoff(state: State, max_wait: timedelta, now: datetime) -> datetime | None:
    """Runs due at or before the returned instant have waited ``max_wait`` for this outage:
    they are dead-lettered. None while the outage itself is younger than ``max_wait`` (a run
    due long ago only started waiting for the dependency when it went down)."""
    if state.up is not False or state.since is None or now - state.since < max_wait:
        return None
    return now - max_wait


def next_check(state: State, ttl: timedelta, now: datetime) -> datetime:
    """When to check again: after ``ttl``, or within a second while an outage is on so
    recovery is noticed promptly (a down dependency costs its runs their wait)."""
    if state.checked_at is None:
        return now
    step = min(ttl, timedelta(seconds=1)) if state.up is False else ttl
    return state.checked_at + step


def needs_by_digest(contents: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, tuple[str, ...]]:
    """digest -> declared dependencies, for the definition versions that declare any."""
    return {digest: names for digest, content in contents if (names := declared(content))}


# ---------------------------------------------------------------------- webhook delivery
RETRYABLE_STATUSES = frozenset({408, 425, 429})


def retryable_status(status: int) -> bool:
    """A receiver that is overloaded or failing may accept later; a 4xx refusal will not change."""
    return status >= 500 or status in RETRYABLE_STATUSES


def retry_delay(attempt: int, base: timedelta, cap: timedelta) -> timedelta:
    """Delay before retry ``attempt`` (1-based): ``base``, doubling, at most ``cap``."""
    delay: timedelta = base * (2 ** min(max(0, attempt - 1), 30))  # bounded: no overflow
    return min(delay, cap)


def alert_body(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The webhook body: the event envelope plus ``alert_id``, the event id, so a receiver can
    drop a repeat (delivery is at least once)."""
    return {"alert_id": envelope["event_id"], **envelope}
