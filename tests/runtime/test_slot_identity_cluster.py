"""Every slot exactly one run, on PostgreSQL, with several processes racing through a fold hour.

Two schedulers whose configurations differ (so their runs' configuration digests, and keys,
differ) take leadership in turn while a third process backfills the same slots over and over
and toggles safe mode (which changes the digest again). Simulated time walks through Oslo's
2026-10-25 fall-back, step by step, all three processes acting at each step together. At the
end each slot the schedules owe has exactly one run, and no run is outside a slot.
"""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tests.helpers import define, make_config

from jobgate.runtime.scheduler import Scheduler
from jobgate.scheduling.model import MisfirePolicy, Schedule, ScheduleKind, check_schedule
from jobgate.service import safemode
from jobgate.service.engine import Engine
from jobgate.service.schedules import backfill
from jobgate.service.snapshots import resolve_snapshot
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

START = datetime(2026, 10, 24, 23, 35, tzinfo=UTC)  # 01:35 CEST; the fold is 00:00Z-02:00Z
STEP = timedelta(seconds=30)
STEPS = int(timedelta(hours=3, minutes=6) / STEP)  # to 02:40:30Z
PROFILES = ({"nightly": {"level": "a"}}, {"nightly": {"level": "b"}})


def _config(base: Path, which: int) -> Any:
    return make_config(base, profiles=PROFILES[which])


def _scheduler(url: str, base: str, which: int, barrier: Any) -> None:
    engine = Engine(Store(url, migrate=False), _config(Path(base), which))
    scheduler = Scheduler(engine, owner=f"scheduler-{which}", lease=timedelta(seconds=5))
    for k in range(STEPS):
        barrier.wait(timeout=120)
        scheduler.tick(START + k * STEP + timedelta(seconds=which))  # a lease of 5 s: turns alternate


def _backfiller(url: str, base: str, jobs: list[tuple[str, str]], barrier: Any) -> None:
    engine = Engine(Store(url, migrate=False), _config(Path(base), 1))
    on = False
    for k in range(STEPS):
        barrier.wait(timeout=120)
        now = START + k * STEP
        if k % 7 == 3:
            on = not on
            (safemode.activate if on else safemode.deactivate)(engine, "default", actor="ops", reason="drill", now=now)
        if k % 4 == 1:
            for job, schedule_id in jobs:
                backfill(
                    engine, tenant_id="default", job_definition_id=job, schedule_id=schedule_id, start=START, end=now
                )


@pytest.fixture
def pg_engine(pg_schema_url: str, tmp_path: Path) -> Any:
    from tests.conftest import _truncate_pg

    _truncate_pg(pg_schema_url)
    store = Store(pg_schema_url)
    yield Engine(store, _config(tmp_path, 0))
    store.dispose()


def test_every_slot_has_exactly_one_run_across_processes(pg_engine: Engine, pg_schema_url: str, tmp_path: Path) -> None:
    engine = pg_engine
    # cron definitions (a trigger_type is enforced); their own schedules fire on 29 February only
    cron = {"config_profile": "nightly", "trigger_type": "cron", "schedule_expression": "0 0 29 2 *"}
    wildcard, fixed = define(engine, **cron), define(engine, **cron)
    with engine.store.write() as tx:
        for name, job, expression in (("every-10", wildcard, "*/10 * * * *"), ("at-0230", fixed, "30 2 * * *")):
            schedule = Schedule(
                name,
                job,
                ScheduleKind.CRON,
                START,
                timezone="Europe/Oslo",
                cron=expression,
                misfire=MisfirePolicy.FIRE_ALL,
            )
            tx.schedule_put(check_schedule(schedule), watermark=START, source="test", now=START)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [
        ctx.Process(target=_scheduler, args=(pg_schema_url, str(tmp_path), 0, barrier)),
        ctx.Process(target=_scheduler, args=(pg_schema_url, str(tmp_path), 1, barrier)),
        ctx.Process(
            target=_backfiller,
            args=(pg_schema_url, str(tmp_path), [(wildcard, "every-10"), (fixed, "at-0230")], barrier),
        ),
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    end = START + (STEPS - 1) * STEP
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_id, slot, config_digest FROM job_runs")).all()
    slots = [r[0] for r in rows]
    assert len(slots) == len(set(slots)), "a slot with two runs"
    assert all(r[1] == r[0] for r in rows), "a run outside its slot"
    every_ten = [START + timedelta(minutes=5) + k * timedelta(minutes=10) for k in range(20)]
    expected = {f"TGTRIG-every-10@{at:%Y-%m-%dT%H:%M:%SZ}" for at in every_ten if at <= end}
    expected.add("TGTRIG-at-0230@2026-10-25T00:30:00Z")  # 02:30 CEST, the first pass only
    assert set(slots) == expected
    # The premise: the two configurations bind different snapshots, so a slot's fire under one
    # and its backfill under the other have different idempotency keys (which of them made each
    # slot's run depends on the race; that only one did is the point).
    digests = {resolve_snapshot(_config(tmp_path, which), "nightly", "default").config_digest for which in (0, 1)}
    assert len(digests) == 2
