"""Claims straight through the store: queues named twice, rows a worker cannot read."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from tests.helpers import count, define

from jobgate.core import transitions
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.models import JobRun
from jobgate.core.settle import settle_attempt
from jobgate.core.states import RunStatus
from jobgate.core.transitions import RunChange
from jobgate.service.engine import Engine
from jobgate.service.policies import retry_policy
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunsClaim
from jobgate.testing import connection


def submit(engine: Engine, job: str, n: int) -> list[str]:
    results = engine.submit_many([SubmitRequest(job, request_id=f"r{i}") for i in range(n)])
    return [r.run.job_run_id for r in results]


def claim(engine: Engine, queues: tuple[str, ...], limit: int) -> list[str]:
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", queues, limit, now, now + timedelta(seconds=30), start_now=limit))
    return [r.job_run_id for r in batch.runs()]


def succeeded(engine: Engine, run: JobRun, now: datetime) -> RunChange:
    """The settlement change of a successful attempt of ``run`` (as the worker writes it)."""
    done = settle_attempt(
        run,
        Outcome(OutcomeKind.SUCCEEDED),
        retry_policy(engine.config, run.retry_policy),
        now=now,
        actor="w",
        started_at=run.started_at or now,
        result={"ok": True},
    )
    return transitions.settled(done, run, now=now)


def test_a_queue_named_twice_is_claimed_from_once(engine: Engine) -> None:
    job = define(engine)
    submit(engine, job, 10)
    assert len(claim(engine, ("default", "default"), 4)) == 4


def test_a_queue_named_twice_does_not_count_a_run_twice_against_its_limit(engine: Engine) -> None:
    job = define(engine, concurrency_limit=2)
    submit(engine, job, 10)
    assert len(claim(engine, ("default", "default"), 10)) == 2


def test_an_unreadable_claimed_row_does_not_cost_the_others_their_start(engine: Engine) -> None:
    if engine.store.dialect != "sqlite":
        pytest.skip("PostgreSQL decodes claimed rows inside the transaction")
    job = define(engine)
    ids = submit(engine, job, 4)
    # As a newer version might write it. (Not a job class: a class jobgate.yaml no longer
    # declares reads back as its name, since a record never depends on today's configuration.)
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET trigger_type = 'future_trigger' WHERE job_run_id = :id"), {"id": ids[1]}
        )
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", ("default",), 4, now, now + timedelta(seconds=30), start_now=4))
    runs = batch.runs()
    assert sorted(r.job_run_id for r in runs) == sorted(ids[:1] + ids[2:])
    assert [run_id for run_id, _ in batch.unreadable] == [ids[1]]
    assert "future_trigger" in batch.unreadable[0][1]


def test_a_batch_of_completions_applies_the_fresh_ones_and_writes_nothing_for_a_stale_one(engine: Engine) -> None:
    """One group of same-kind changes, one of them fenced by a token that is no longer the
    run's: only the others change, and only they get a transition and an event."""
    job = define(engine)
    ids = submit(engine, job, 3)
    now = engine.clock.now()
    with engine.store.write() as tx:
        runs = tx.runs_claim(RunsClaim("w", ("default",), 3, now, now + timedelta(seconds=30), start_now=3)).runs()
    changes = []
    for run in sorted(runs, key=lambda r: r.job_run_id):
        held = run if run.job_run_id != ids[1] else replace(run, lease_token=run.lease_token - 1)  # taken over
        changes.append(succeeded(engine, held, now))
    events_before, transitions_before = count(engine, "outbox"), count(engine, "run_transitions")
    with engine.store.write() as tx:
        applied = tx.runs_apply(changes)
    assert sorted(c.job_run_id for c in applied) == sorted([ids[0], ids[2]])
    with engine.store.read() as tx:
        statuses = {i: tx.run_get(i).status for i in ids}  # type: ignore[union-attr]
    assert statuses == {ids[0]: RunStatus.COMPLETED, ids[1]: RunStatus.RUNNING, ids[2]: RunStatus.COMPLETED}
    assert count(engine, "run_transitions") == transitions_before + 2
    assert count(engine, "run_transitions", f"job_run_id = '{ids[1]}' AND to_status = 'COMPLETED'") == 0
    assert count(engine, "outbox", f"job_run_id = '{ids[1]}' AND event_type = 'job_completed'") == 0
    assert count(engine, "outbox") > events_before


def test_a_settlement_batch_finds_its_runs_by_primary_key_whatever_the_statistics_say(engine: Engine) -> None:
    """Statistics taken before the runs were claimed say almost none is leased. With the expected
    status written as a literal, the planner then read the partial index of leased runs (every
    leased run, and the dead entries of those that left) to find a batch; the batch needs one
    primary-key probe per row."""
    if engine.store.dialect != "postgresql":
        pytest.skip("a PostgreSQL planner question")
    from jobgate.store.sql import changes as run_changes
    from jobgate.store.sql import driver

    job = define(engine)
    submit(engine, job, 3000)
    with engine.store.write() as tx:
        connection(tx).exec_driver_sql("ANALYZE job_runs")  # nothing leased yet
    now = engine.clock.now()
    with engine.store.write() as tx:
        runs = tx.runs_claim(RunsClaim("w", ("default",), 3000, now, now + timedelta(hours=1), start_now=3000)).runs()
    changes = [succeeded(engine, run, now) for run in runs[:64]]
    [(key, _items, rows)] = run_changes.prepare_changes(changes).groups
    with engine.store.write() as tx:
        _, plan = driver.run_arrays(
            connection(tx), "EXPLAIN " + run_changes._cas_postgres_sql(connection(tx).dialect, key), rows
        )
    text_plan = "\n".join(line for (line,) in plan)
    assert "pk_job_runs" in text_plan, text_plan
    assert "ix_job_runs_leased" not in text_plan, text_plan


@pytest.mark.parametrize("start", [True, False], ids=["start", "dispatch"])
def test_a_claim_finds_its_runs_by_primary_key_and_records_both_steps_in_order(engine: Engine, start: bool) -> None:
    """The claim's one statement joins the ids the candidate read locked to the run table by
    primary key, with statistics of a table where every run waits (the claim index is the
    tempting wrong choice), and writes each run's transitions, claimed before started."""
    if engine.store.dialect != "postgresql":
        pytest.skip("a PostgreSQL statement")
    from jobgate.store.sql import claims, driver

    job = define(engine)
    ids = submit(engine, job, 3000)
    with engine.store.write() as tx:
        connection(tx).exec_driver_sql("ANALYZE job_runs")  # every run claimable
    now = engine.clock.now()
    params = {"owner": "w", "exp": 0, "now": 0, "ids": ids[:64], "previous": ["SCHEDULED"] * 64}
    with engine.store.write() as tx:
        sql = claims._PG_START if start else claims._PG_DISPATCH
        plan = driver.returning_sql(connection(tx), "EXPLAIN " + sql, params)
    text_plan = "\n".join(row["QUERY PLAN"] for row in plan)
    assert "pk_job_runs" in text_plan and "ix_job_runs_claim" not in text_plan, text_plan

    with engine.store.write() as tx:
        batch = tx.runs_claim(
            RunsClaim("w", ("default",), 2, now, now + timedelta(hours=1), start_now=2 if start else 0)
        )
    for run in batch.runs():
        steps = [(t.from_status, t.to_status, t.reason, t.attempt, t.actor) for t in _transitions(engine, run)]
        claimed = (RunStatus.SCHEDULED, RunStatus.DISPATCHED, "claimed", 0, "w")
        started = (RunStatus.DISPATCHED, RunStatus.RUNNING, "started", 1, "w")
        assert steps[2:] == ([claimed, started] if start else [claimed])
        assert run.status is (RunStatus.RUNNING if start else RunStatus.DISPATCHED)


def _transitions(engine: Engine, run: JobRun) -> list[Any]:
    with engine.store.read() as tx:
        return list(tx.run_transitions(run.job_run_id))


def test_a_claim_locks_no_more_runs_than_it_takes_so_a_concurrent_claim_gets_the_rest(engine: Engine) -> None:
    """Two workers claiming at once share the queue: the first holds its transaction open, the
    second finds every run the first did not take (it read twice as many as it took before, and
    held them locked until it committed)."""
    if engine.store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: claims never overlap")
    job = define(engine)
    runs = submit(engine, job, 6)
    now = engine.clock.now()
    with engine.store.write() as first:
        taken = first.runs_claim(RunsClaim("w1", ("default",), 3, now, now + timedelta(seconds=30), start_now=3))
        assert taken.count == 3 and taken.more  # it found all it could take: more may be waiting
        with engine.store.write() as second:
            rest = second.runs_claim(RunsClaim("w2", ("default",), 5, now, now + timedelta(seconds=30), start_now=5))
    first_ids = {r.job_run_id for r in taken.runs()}
    second_ids = {r.job_run_id for r in rest.runs()}
    assert len(second_ids) == 3 and not rest.more  # the queue had only those left
    assert first_ids | second_ids == set(runs) and not first_ids & second_ids


def test_a_claim_cut_short_by_a_limit_says_more_runs_may_be_waiting(engine: Engine) -> None:
    job = define(engine, concurrency_limit=2)
    submit(engine, job, 6)
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", ("default",), 4, now, now + timedelta(seconds=30), start_now=4))
    # Two of the four candidates read were refused by the limit; the worker looks again next cycle.
    assert batch.count == 2 and batch.more
