"""Retention by record type (seed 000 §57): a job class may keep its finished runs for a time of
its own (replay records, safe-mode jobs), and a dead-lettered run stays until its letter was
resolved long enough ago; the configuration names what it cannot use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from tests.helpers import define, make_config
from tests.runtime.runtime_support import running_worker, wait_status

from jobgate.config import RetentionSettings
from jobgate.core.errors import ValidationError
from jobgate.core.states import RunStatus
from jobgate.evidence import anchors, sinks
from jobgate.runtime.outbox import publish_once
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.retention import passes, retire
from jobgate.service.submission import SubmitRequest
from jobgate.store import codec
from jobgate.store.base import RetireScope
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

NOW = datetime(2026, 12, 4, tzinfo=UTC)
RULES = {"finished_runs_days": 1, "job_classes": {"REPLAY_JOB": 30}, "resolved_dead_letters_days": 10}


def test_each_class_with_its_own_retention_is_a_pass_and_the_rest_one_more() -> None:
    settings = RetentionSettings(timedelta(days=1), {"REPLAY_JOB": timedelta(days=30)}, timedelta(days=10))
    replay, rest = passes(settings, NOW, bound=NOW - timedelta(days=5))
    letters = NOW - timedelta(days=10)
    assert replay.cutoff == NOW - timedelta(days=30) and replay.scope == RetireScope(("REPLAY_JOB",), (), letters)
    assert rest.cutoff == NOW - timedelta(days=5)  # not past what is anchored
    assert rest.scope == RetireScope(None, ("REPLAY_JOB",), letters) and rest.rule == "retention.finished_runs_days"
    assert passes(RetentionSettings(), NOW, None) == []  # nothing configured: nothing ever goes


@pytest.mark.parametrize(
    ("retention", "field"),
    [
        ({"job_classes": {"NO_SUCH_JOB": 3}}, "retention.job_classes.NO_SUCH_JOB"),
        ({"job_classes": {"REPLAY_JOB": 0}}, "retention.job_classes.REPLAY_JOB"),
        ({"resolved_dead_letters_days": 0.5}, "retention.resolved_dead_letters_days"),
        ({"archive_days": 3}, "retention"),
        # past a century no cutoff is a date any more (a calendar's limits): keep for ever is unset
        ({"finished_runs_days": 9_999_999_999}, "retention.finished_runs_days"),
        ({"finished_runs_days": 800_000}, "retention.finished_runs_days"),
        ({"job_classes": {"REPLAY_JOB": 36_501}}, "retention.job_classes.REPLAY_JOB"),
        ({"resolved_dead_letters_days": 1e300}, "retention.resolved_dead_letters_days"),
    ],
)
def test_a_rule_the_configuration_cannot_use_is_refused(
    tmp_path: Path, retention: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        make_config(tmp_path, retention=retention)
    assert (refused.value.field or "").startswith(field)


def test_the_longest_retention_allowed_still_gives_a_cutoff() -> None:
    longest = timedelta(days=36_500)
    settings = RetentionSettings(longest, {"REPLAY_JOB": longest}, longest)
    assert [p.cutoff for p in passes(settings, NOW, None)] == [NOW - longest, NOW - longest]


def test_replay_records_and_recently_resolved_dead_letters_outlive_the_other_runs(
    database_url: str, tmp_path: Path
) -> None:
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention=RULES))
    try:
        routine = define(engine)
        replay = define(engine, job_class="REPLAY_JOB")
        runs = {name: _submit(engine, job) for name, job in (("routine", routine), ("replay", replay))}
        lettered = _submit(engine, define(engine, handler="engine_handlers:fail_final"))
        with running_worker(engine):
            for run_id in runs.values():
                wait_status(engine, run_id, RunStatus.COMPLETED)
            wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
        now = engine.clock.now()
        with engine.store.write() as tx:  # its letter resolved just now (as a requeue does)
            connection(tx).execute(
                text("UPDATE dead_letters SET resolved_at = :at WHERE job_run_id = :r"),
                {"at": codec.to_us(now), "r": lettered},
            )
        while publish_once(engine.store, [], engine.clock):
            pass
        soon, much_later = now + timedelta(days=2), now + timedelta(days=40)
        _anchor(engine, tmp_path, soon)
        assert retire(engine, "default", now=soon).deleted == 1
        assert _left(engine, [*runs.values(), lettered]) == {runs["replay"], lettered}
        _anchor(engine, tmp_path, much_later)
        counted = retire(engine, "default", now=much_later, dry_run=True)
        assert counted.deleted == 2
        # each rule with its own cutoff and count (the command prints one line a rule)
        by_rule = {r.rule: r.deleted for r in counted.rules}
        assert by_rule == {"retention.job_classes.REPLAY_JOB": 1, "retention.finished_runs_days": 1}
        assert retire(engine, "default", now=much_later).deleted == 2
        assert _left(engine, [*runs.values(), lettered]) == set()
    finally:
        store.dispose()


def _submit(engine: Engine, job: str) -> str:
    return engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id


def _anchor(engine: Engine, tmp_path: Path, at: datetime) -> None:
    audit.seal_pending(engine, engine.clock.now())  # as the leader does: every seal chained, then anchored
    with engine.store.write() as tx:
        anchors.anchor_due(tx, "default", now=at, window=timedelta(hours=1), sink=sinks.FileSink(tmp_path / "a.jsonl"))


def _left(engine: Engine, run_ids: list[str]) -> set[str]:
    with engine.store.read() as tx:
        return {r.job_run_id for r in tx.runs_get(run_ids)}
