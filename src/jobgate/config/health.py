"""The ``alerts`` and ``dependencies`` sections of ``jobgate.yaml`` (seed 000 §5, §58).

``alerts`` names the webhook(s) that receive alerts (dead letters, SLA breaches, escalations,
safe mode, dependency outages) and how hard to try before an alert goes to the local log.
``dependencies`` names the health checks a definition may declare it needs; the anchor sink,
the environment check and HTTP targets are checks already, named ``anchor_sink``,
``environment_check`` and ``target:<MEID>``, and an entry without a ``url`` only tunes one of
them. URLs come from this file only, never from a definition or a request.

Parsing is strict like the rest of the file: an unknown key or event type is refused naming
its path, because an alert rule that silently matches nothing is an alert never sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobgate.core.events import EventType
from jobgate.documents import Reader, join

ANCHOR_SINK = "anchor_sink"
ENVIRONMENT_CHECK = "environment_check"
TARGET_PREFIX = "target:"

# Alertable events written by other parts of jobgate under these names (their builders may be
# added to ``core.events`` independently); every ``EventType`` is accepted as well.
EXTRA_EVENT_TYPES = frozenset({"sla_breach", "workflow_escalated", "dependency_unavailable", "dependency_recovered"})
DEFAULT_ALERT_TYPES = frozenset(
    {
        "job_dead_lettered",
        "job_escalated",
        "sla_breach",
        "workflow_escalated",
        "safe_mode_activation",
        "safe_mode_deactivation",
        "replay_mismatch",
        "dependency_unavailable",
        "dependency_recovered",
    }
)
UNDELIVERED_LOG = "alerts-undelivered.jsonl"
_ALERT_KEYS = (
    "webhook_url",
    "event_types",
    "timeout_seconds",
    "max_attempts",
    "backoff_seconds",
    "max_backoff_seconds",
    "cooldown_seconds",
    "headers",
    "undelivered_log",
)
_DEPENDENCY_KEYS = ("url", "timeout_seconds", "ttl_seconds", "max_wait_seconds")


def known_event_types() -> frozenset[str]:
    return frozenset(e.value for e in EventType) | EXTRA_EVENT_TYPES


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go and how delivery is tried: each alert is POSTed to every URL, retried
    ``max_attempts`` times with doubling backoff on a connection error, a timeout, 408, 429 or
    5xx; an alert that still is not accepted is appended to ``undelivered_log``. After a URL
    exhausted its retries it is given ``cooldown`` before it is tried again, so an outage of
    the receiver costs one round of retries per cooldown, not per alert."""

    webhook_urls: tuple[str, ...] = ()
    event_types: frozenset[str] = DEFAULT_ALERT_TYPES
    timeout: timedelta = timedelta(seconds=2)
    max_attempts: int = 3
    backoff: timedelta = timedelta(milliseconds=500)
    max_backoff: timedelta = timedelta(seconds=4)
    cooldown: timedelta = timedelta(seconds=30)
    headers: tuple[tuple[str, str], ...] = ()
    undelivered_log: Path | None = None  # default: <data_dir>/alerts-undelivered.jsonl

    @property
    def enabled(self) -> bool:
        return bool(self.webhook_urls)


@dataclass(frozen=True)
class DependencySpec:
    """One ``dependencies`` entry: a health URL (a 2xx answer within ``timeout`` is up), or
    ``None`` to tune a check jobgate derives from other configuration. ``ttl`` is how long a
    result is trusted (the check interval); ``max_wait`` is how long a run waits in the queue
    for the dependency before it is dead-lettered with ``missing_dependency``."""

    name: str
    url: str | None = None
    timeout: timedelta = timedelta(seconds=2)
    ttl: timedelta = timedelta(seconds=10)
    max_wait: timedelta = timedelta(hours=1)


def parse_alerts(r: Reader, value: Any, data_dir: Path, base_dir: Path) -> AlertSettings:
    """The ``alerts`` section; ``data_dir`` holds the undelivered log unless a path is given."""
    spec = r.mapping({} if value is None else value, "alerts")
    r.only_keys(spec, "alerts", _ALERT_KEYS)
    d = AlertSettings()
    raw = spec.get("webhook_url")
    urls: list[str] = []
    if isinstance(raw, list):
        urls = [r.http_url(u, join("alerts.webhook_url", i)) for i, u in enumerate(raw)]
        r.strings(raw, "alerts.webhook_url", unique=True)
    elif raw is not None:
        urls = [r.http_url(raw, "alerts.webhook_url")]
    types = d.event_types
    if spec.get("event_types") is not None:
        names = r.strings(spec["event_types"], "alerts.event_types", unique=True)
        known = known_event_types()
        for i, name in enumerate(names):
            r.known(name, join("alerts.event_types", i), "event type", known)
        types = frozenset(names)

    def seconds(key: str, default: timedelta) -> timedelta:
        return default if spec.get(key) is None else r.duration(spec[key], join("alerts", key))

    attempts = d.max_attempts
    if spec.get("max_attempts") is not None:
        attempts = r.integer(spec["max_attempts"], "alerts.max_attempts", minimum=1, maximum=20)
    backoff = seconds("backoff_seconds", d.backoff)
    max_backoff = seconds("max_backoff_seconds", d.max_backoff)
    if max_backoff < backoff:
        r.fail("alerts.max_backoff_seconds", "must be at least backoff_seconds")
    headers_doc = r.mapping({} if spec.get("headers") is None else spec["headers"], "alerts.headers")
    headers = tuple(sorted((str(k), r.text(v, join("alerts.headers", str(k)))) for k, v in headers_doc.items()))
    log_path = data_dir / UNDELIVERED_LOG
    if spec.get("undelivered_log") is not None:
        log_path = base_dir / r.string(spec["undelivered_log"], "alerts.undelivered_log")
    return AlertSettings(
        webhook_urls=tuple(urls),
        event_types=types,
        timeout=seconds("timeout_seconds", d.timeout),
        max_attempts=attempts,
        backoff=backoff,
        max_backoff=max_backoff,
        cooldown=seconds("cooldown_seconds", d.cooldown),
        headers=headers,
        undelivered_log=log_path,
    )


def derived_names(doc: Mapping[str, Any], targets: Mapping[str, Any]) -> set[str]:
    """Checks jobgate derives from other sections of the same file: the anchor sink (always
    configured: a file by default), the environment check when it has a URL, HTTP targets."""
    names = {ANCHOR_SINK}
    trust = doc.get("trust_gates")
    if isinstance(trust, dict) and isinstance(trust.get("environment"), dict) and trust["environment"].get("url"):
        names.add(ENVIRONMENT_CHECK)
    names.update(TARGET_PREFIX + meid for meid, t in targets.items() if getattr(t, "http", None) is not None)
    return names


def parse_dependencies(r: Reader, doc: Mapping[str, Any], targets: Mapping[str, Any]) -> dict[str, DependencySpec]:
    """The ``dependencies`` section: name -> check. An entry without ``url`` must name a
    derived check (it only changes its timings)."""
    value = doc.get("dependencies")
    entries = r.mapping({} if value is None else value, "dependencies")
    derived = derived_names(doc, targets)
    out: dict[str, DependencySpec] = {}
    d = DependencySpec("")
    for name, raw in entries.items():
        at = join("dependencies", r.name(name, join("dependencies", str(name))))
        spec = r.mapping({} if raw is None else raw, at)
        r.only_keys(spec, at, _DEPENDENCY_KEYS)
        url = None
        if spec.get("url") is not None:
            url = r.http_url(spec["url"], join(at, "url"))
        elif name not in derived:
            listed = ", ".join(sorted(derived))
            r.fail(join(at, "url"), f"required: {name!r} is not a check jobgate knows (derived checks: {listed})")
        out[name] = DependencySpec(
            name=name,
            url=url,
            timeout=_seconds(r, spec, at, "timeout_seconds", d.timeout),
            ttl=_seconds(r, spec, at, "ttl_seconds", d.ttl),
            max_wait=_seconds(r, spec, at, "max_wait_seconds", d.max_wait),
        )
    return out


def _seconds(r: Reader, spec: Mapping[str, Any], at: str, key: str, default: timedelta) -> timedelta:
    return default if spec.get(key) is None else r.duration(spec[key], join(at, key))
