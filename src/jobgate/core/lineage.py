"""Retry lineage (seed 001 retry contract): the rules, as pure functions of stored facts.

A retry names its source run in ``retry_of`` and in its trigger's payload; that edge is the
only lineage jobgate derives (``/runs/{id}/parents`` and ``/children``). A run belongs to a
schedule when the schedule made it (its slot or trigger id ``TGTRIG-<schedule>@...``) or when
it retries a run that did (the retry's trigger payload carries ``schedule_id``), so the
schedule-only retry path can retry a retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus

SCHEDULE_TRIGGER_PREFIX = "TGTRIG-"  # ``scheduling.plan.TRIGGER_PREFIX``: a schedule's trigger ids
RETRY_EDGE = "retry"  # the kind of every edge lineage reports


def schedule_of(run: JobRun, trigger: Mapping[str, Any] | None) -> str | None:
    """The schedule a run belongs to, or None. A slot or schedule trigger id names it
    (``TGTRIG-<schedule>@<instant | created.episode-n | config-...>``); a retry carries its source's in
    its trigger payload. An event schedule's run records no schedule id, so it belongs to none."""
    for named in (run.slot, run.trigger_id):
        if named and named.startswith(SCHEDULE_TRIGGER_PREFIX) and "@" in named:
            schedule_id = named[len(SCHEDULE_TRIGGER_PREFIX) :].rpartition("@")[0]
            if schedule_id:
                return schedule_id
    payload = (trigger or {}).get("payload") or {}
    carried = payload.get("schedule_id") if isinstance(payload, Mapping) else None
    return carried if isinstance(carried, str) and carried else None


RETRY_REQUEST_PREFIX = "retry-of:"  # a retry's trigger request id: this and its source run id


def retry_source(trigger: Mapping[str, Any] | None) -> str | None:
    """The run a stored trigger document says its run retries, or None. Only a retry's own
    trigger counts (manual, request id ``retry-of:<source>``, payload ``retry_of``): an event
    whose payload happens to carry a ``retry_of`` field makes no lineage."""
    doc = trigger or {}
    payload = doc.get("payload")
    source = payload.get("retry_of") if isinstance(payload, Mapping) else None
    if not isinstance(source, str) or not source:
        return None
    if doc.get("trigger_type") != "manual" or doc.get("request_id") != f"{RETRY_REQUEST_PREFIX}{source}":
        return None
    return source


def retry_refusal(status: RunStatus) -> str | None:
    """Why a run in ``status`` cannot be retried (409), or None: only a terminal run can."""
    if status.is_terminal:
        return None
    return f"run is {status.value}; only a terminal run can be retried"
