"""What every pipeline-completion source does with what it hears, whatever the broker.

``Completions`` holds the admin's mapping (``pubsub.yaml``, re-read when the file changes; a
broken edit keeps the last good one), asks ``service.pubsub_map.judge`` what a message may
fire and hands that to ``service.pubsub_triggers.fire`` (the one trigger path), counting the
outcome in the source's ``SourceStats``. A source (``runtime.pubsub`` for Redis,
``runtime.pg_listen`` for PostgreSQL) only keeps its connection.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path

from jobgate.config import RetentionSettings
from jobgate.core.errors import JobgateError
from jobgate.runtime.event_sources import SourceStats
from jobgate.service.engine import Engine
from jobgate.service.pubsub_map import PubSubMap, Verdict, judge, load_map
from jobgate.service.pubsub_triggers import fire

log = logging.getLogger("jobgate.pubsub")


class Completions:
    """The mapping and the hand-off to the trigger path, shared by every completion source."""

    def __init__(self, engine: Engine, map_path: Path, tenant_id: str, stats: SourceStats) -> None:
        self.engine = engine
        self.tenant_id = tenant_id
        self.stats = stats
        self._path = map_path
        self._stamp = _stamp(map_path)
        self.mapping: PubSubMap = load_map(map_path)  # a bad mapping fails the start

    def heard(self, data: bytes | str, *, channel_result: str | None, via: str) -> None:
        """One message (or polling key's value): judged against the mapping, then fired. A
        polling key is judged against the retention horizon (``pubsub_map.judge``)."""
        keep = shortest_retention(self.engine.config.retention)
        not_before = self.engine.clock.now() - keep if via == "state" and keep is not None else None
        self.handle(judge(self.current(), data, channel_result=channel_result, not_before=not_before), via=via)

    def handle(self, verdict: Verdict, *, via: str) -> None:
        if verdict.ignored is not None:
            self.stats.add(f"ignored.{verdict.ignored}")
            result = verdict.completion.result_name if verdict.completion else "?"
            log.info(
                "pub/sub %s ignored (%s): %s",
                via,
                verdict.ignored,
                result,
                extra={"action": "pubsub_ignored", "reason": verdict.ignored},
            )
            return
        for made in fire(self.engine, self.tenant_id, verdict, via=via):
            if made.refused is not None:
                self.stats.add("refused")
            else:
                self.stats.add("fired" if made.created else "duplicates")

    def current(self) -> PubSubMap:
        """The mapping, re-read when its file changed; a broken edit keeps the last good one."""
        stamp = _stamp(self._path)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self.mapping = load_map(self._path)
                log.info("pub/sub mapping re-read", extra={"action": "pubsub_map_reloaded"})
            except JobgateError as exc:
                log.error(
                    "pub/sub mapping not re-read, the last good one stays: %s",
                    exc,
                    extra={"action": "pubsub_map_refused"},
                )
        return self.mapping


def shortest_retention(settings: RetentionSettings) -> timedelta | None:
    """The soonest any finished run may be retired (None: never), whatever its class or letter."""
    kept = [settings.finished_runs, settings.resolved_dead_letters, *settings.job_classes.values()]
    return min((k for k in kept if k is not None), default=None)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)
