"""The scheduler policy (seed ``comp.FAGF.INPUT.SCHEDULER-POLICY``): a versioned file of rules
enforced at trigger time, for every trigger.

    policy_id: FAGF-SCHEDULER-POLICY
    version: 3
    trigger_types:                 # which triggers may start which job classes
      id: SP-TRIGGERS
      by_job_class: {FEDERATION_SYNC_JOB: [manual, event]}
    priority:                      # the highest priority a tenant or role may run at
      id: SP-PRIORITY
      max: high
      by_tenant: {acme: critical}
      by_role: {consumer: normal}
    manual_reason: {id: SP-REASON}  # manual runs must say why
    blackouts:                     # no runs started in these windows (optionally: only these classes)
      - {id: SP-FREEZE, start: "2026-12-24T00:00:00Z", end: "2026-12-27T00:00:00Z"}
      - {id: SP-NIGHTLY, daily: "02:00-03:00", timezone: Europe/Helsinki, job_classes: [REPLAY_JOB]}
    quotas:                        # per tenant
      id: SP-QUOTA
      runs_per_day: 10000
      concurrent_runs: 200
      by_tenant: {acme: {runs_per_day: 500}}

A refusal names the rule's id. The rules and ``evaluate`` are pure (``jobgate.core.policy``);
reading the file (re-read when it changes) is this edge. The policy's id, version and digest are bound into every run's
configuration snapshot, so a run says which policy admitted it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from datetime import datetime, time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobgate.core.canonical import digest
from jobgate.core.classes import BUILTIN_CLASSES
from jobgate.core.errors import ConfigurationError
from jobgate.core.models import TriggerType
from jobgate.core.policy import CEILINGS, Blackout, Policy
from jobgate.documents import Reader, join, parse_yaml, read_text


# -------------------------------------------------------------------- the file
def parse_policy(document: Any, source: str, declared: Collection[str] = ()) -> Policy:
    """The policy ``document``; its class rules may name the built-in classes and ``declared``
    (jobgate.yaml's ``job_classes``). A rule naming a built-in class binds the declared classes
    that gate as it too (``jobgate.core.classes``)."""
    r = Reader(source, ConfigurationError)
    doc = r.mapping(document, "")
    r.only_keys(doc, "", ("policy_id", "version", "trigger_types", "priority", "manual_reason", "blackouts", "quotas"))
    if "policy_id" not in doc or "version" not in doc:
        r.fail("policy_id", "a policy names its policy_id and version")
    kwargs: dict[str, Any] = {
        "policy_id": r.name(doc["policy_id"], "policy_id"),
        "version": r.integer(doc["version"], "version", minimum=1),
        "digest": digest(doc),
    }
    classes = {*BUILTIN_CLASSES, *declared}
    triggers = {t.value for t in TriggerType}
    if "trigger_types" in doc:
        spec = r.mapping(doc["trigger_types"], "trigger_types")
        r.only_keys(spec, "trigger_types", ("id", "by_job_class"))
        kwargs["trigger_rule"] = _rule_id(r, spec, "trigger_types")
        by_class: dict[str, frozenset[str]] = {}
        for cls, allowed in r.mapping(spec.get("by_job_class") or {}, "trigger_types.by_job_class").items():
            at = join("trigger_types.by_job_class", cls)
            if cls not in classes:
                r.fail(at, f"unknown job class {cls!r} (not built in, nor declared in jobgate.yaml)")
            names = r.strings(allowed, at)
            for i, name in enumerate(names):
                if name not in triggers:
                    r.fail(join(at, i), f"unknown trigger type {name!r}")
            by_class[cls] = frozenset(names)
        kwargs["triggers_by_class"] = by_class
    if "priority" in doc:
        spec = r.mapping(doc["priority"], "priority")
        r.only_keys(spec, "priority", ("id", "max", "by_tenant", "by_role"))
        kwargs["priority_rule"] = _rule_id(r, spec, "priority")
        kwargs["max_priority"] = None if spec.get("max") is None else _priority(r, spec["max"], "priority.max")
        for key in ("by_tenant", "by_role"):
            values = r.mapping(spec.get(key) or {}, join("priority", key))
            kwargs[f"max_priority_{key}"] = {
                k: _priority(r, v, join(join("priority", key), k)) for k, v in values.items()
            }
    if "manual_reason" in doc:
        spec = r.mapping(doc["manual_reason"], "manual_reason")
        r.only_keys(spec, "manual_reason", ("id",))
        kwargs["reason_rule"] = _rule_id(r, spec, "manual_reason")
    if "blackouts" in doc:
        kwargs["blackouts"] = tuple(
            _blackout(r, item, join("blackouts", i), classes)
            for i, item in enumerate(r.sequence(doc["blackouts"], "blackouts"))
        )
    if "quotas" in doc:
        spec = r.mapping(doc["quotas"], "quotas")
        r.only_keys(spec, "quotas", ("id", "runs_per_day", "concurrent_runs", "by_tenant"))
        kwargs["quota_rule"] = _rule_id(r, spec, "quotas")
        for key in ("runs_per_day", "concurrent_runs"):
            if spec.get(key) is not None:
                kwargs[key] = r.integer(spec[key], join("quotas", key), minimum=0)
        by_tenant: dict[str, dict[str, int]] = {}
        for tenant, values in r.mapping(spec.get("by_tenant") or {}, "quotas.by_tenant").items():
            at = join("quotas.by_tenant", tenant)
            own = r.mapping(values, at)
            r.only_keys(own, at, ("runs_per_day", "concurrent_runs"))
            by_tenant[tenant] = {k: r.integer(v, join(at, k), minimum=0) for k, v in own.items()}
        kwargs["quotas_by_tenant"] = by_tenant
    return Policy(**kwargs)


def _rule_id(r: Reader, spec: Mapping[str, Any], at: str) -> str:
    if "id" not in spec:
        r.fail(join(at, "id"), "every rule has an id (refusals name it)")
    return r.name(spec["id"], join(at, "id"))


def _priority(r: Reader, value: Any, at: str) -> str:
    name = r.string(value, at)
    if name not in CEILINGS:
        r.fail(at, f"one of {', '.join(CEILINGS)} (background is never capped)")
    return name


def _blackout(r: Reader, value: Any, at: str, classes: set[str]) -> Blackout:
    spec = r.mapping(value, at)
    r.only_keys(spec, at, ("id", "start", "end", "daily", "timezone", "job_classes"))
    rule = _rule_id(r, spec, at)
    only = frozenset(r.strings(spec["job_classes"], join(at, "job_classes"))) if "job_classes" in spec else frozenset()
    for name in only - classes:
        r.fail(join(at, "job_classes"), f"unknown job class {name!r} (not built in, nor declared in jobgate.yaml)")
    if "daily" in spec:
        text = r.string(spec["daily"], join(at, "daily"))
        try:
            opens, closes = (time.fromisoformat(part.strip()) for part in text.split("-"))
        except ValueError:
            r.fail(join(at, "daily"), "HH:MM-HH:MM")
        zone = r.string(spec.get("timezone", "UTC"), join(at, "timezone"))
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            r.fail(join(at, "timezone"), f"unknown timezone {zone!r}")
        return Blackout(rule, daily=(opens, closes), zone=zone, job_classes=only)
    try:
        start = datetime.fromisoformat(r.string(spec.get("start"), join(at, "start")).replace("Z", "+00:00"))
        end = datetime.fromisoformat(r.string(spec.get("end"), join(at, "end")).replace("Z", "+00:00"))
    except ValueError:
        r.fail(at, "start and end are ISO 8601 instants")
    if start.tzinfo is None or end.tzinfo is None or end <= start:
        r.fail(at, "start and end need timezones, and end comes after start")
    return Blackout(rule, start=start, end=end, job_classes=only)


class PolicyFile:
    """The policy on disk, re-read when it changes. A changed policy is returned with
    ``changed`` until ``confirm`` says its change was recorded (audited), so a failed audit
    write cannot let a new policy bind unrecorded. A file that cannot be read refuses every
    trigger (fail closed) with a ``ConfigurationError`` naming it."""

    def __init__(self, path: Path | None, declared: Collection[str] = ()) -> None:
        self.path = path
        self.declared = tuple(declared)  # the job classes jobgate.yaml declares
        self._seen: tuple[float, int] | None = None
        self._policy: Policy | None = None
        self._candidate: tuple[tuple[float, int], Policy] | None = None
        self._lock = threading.Lock()

    def current(self) -> tuple[Policy | None, bool]:
        """The policy and whether it differs from the last confirmed one."""
        if self.path is None:
            return None, False
        try:
            st = self.path.stat()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot be read ({exc.strerror}); no trigger is admitted", field="policy"
            ) from None
        key = (st.st_mtime, st.st_size)
        with self._lock:
            if key == self._seen:
                return self._policy, False
            text = read_text(self.path, error=ConfigurationError)
            document = parse_yaml(text, source=str(self.path), error=ConfigurationError)
            policy = parse_policy(document, str(self.path), self.declared)
            if self._policy is not None and self._policy.digest == policy.digest:
                self._seen = key  # touched, not changed
                return policy, False
            self._candidate = (key, policy)
            return policy, True

    def confirm(self, policy: Policy) -> None:
        with self._lock:
            if self._candidate is not None and self._candidate[1] is policy:
                self._seen, self._policy = self._candidate[0], policy
                self._candidate = None
