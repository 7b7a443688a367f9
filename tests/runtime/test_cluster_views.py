"""``jobgate workers`` and ``jobgate locks``: alive, stale, gone and stopped workers; held and free locks."""

from __future__ import annotations

from datetime import timedelta

from jobgate.service import cluster
from jobgate.service.engine import Engine
from jobgate.store.base import WorkerBeat


def test_workers_are_alive_stale_or_stopped_by_their_heartbeat(engine: Engine) -> None:
    now = engine.clock.now()
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w-alive", "h1", 11, 8, ("default",), now - timedelta(seconds=2)))
        tx.worker_heartbeat(WorkerBeat("w-stale", "h2", 12, 8, ("default",), now - timedelta(seconds=60)))
        tx.worker_heartbeat(WorkerBeat("w-gone", "h3", 13, 8, ("default",), now - timedelta(seconds=1)))
        tx.worker_stopped("w-gone", now)
    shown = {r.info.worker_id: r.state for r in cluster.workers(engine)}
    assert shown == {"w-alive": "alive", "w-stale": "stale"}
    every = {r.info.worker_id: r.state for r in cluster.workers(engine, include_stopped=True)}
    assert every == {"w-alive": "alive", "w-stale": "stale", "w-gone": "stopped"}
    strict = {r.info.worker_id: r.state for r in cluster.workers(engine, stale_after=timedelta(seconds=1))}
    assert strict["w-alive"] == "stale"


def test_a_worker_silent_for_long_is_gone_not_stale_for_ever(engine: Engine) -> None:
    """Found by a review: a SIGKILLed worker (nothing marks it stopped) stayed stale, and
    ``doctor`` amber, for good. Past ``GONE_AFTER`` it is gone: listed with the stopped ones."""
    from jobgate.service import doctor
    from jobgate.service.doctor import Level

    now = engine.clock.now()
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w-alive", "h1", 11, 8, ("default",), now - timedelta(seconds=2)))
        tx.worker_heartbeat(WorkerBeat("w-killed", "h2", 12, 8, ("default",), now - cluster.GONE_AFTER * 2))
    assert {r.info.worker_id: r.state for r in cluster.workers(engine)} == {"w-alive": "alive"}
    every = {r.info.worker_id: r.state for r in cluster.workers(engine, include_stopped=True)}
    assert every == {"w-alive": "alive", "w-killed": "gone"}
    with engine.store.read() as tx:
        check = doctor.judge_workers(now, tx.workers_list(), 0, False)
    assert check.level is Level.GREEN and "1 alive, 0 stale, 1 gone" in check.detail


def test_locks_show_holder_token_and_whether_they_are_held(engine: Engine) -> None:
    now = engine.clock.now()
    with engine.store.write() as tx:
        held = tx.lock_acquire("batch:2026-06-25T18", "worker-a", now, timedelta(seconds=60))
        gone = tx.lock_acquire("workflow:WF-1", "worker-b", now - timedelta(seconds=120), timedelta(seconds=60))
        free = tx.lock_acquire("job:nightly", "worker-c", now, timedelta(seconds=60))
        assert held and gone and free
        tx.lock_release("job:nightly", "worker-c", free)
    rows = {r.info.name: (r.state, r.info.owner, r.info.token) for r in cluster.locks(engine)}
    assert rows == {
        "batch:2026-06-25T18": ("held", "worker-a", held),
        "workflow:WF-1": ("expired", "worker-b", gone),
        "job:nightly": ("released", "worker-c", free),
    }
    assert [r.info.name for r in cluster.locks(engine, prefix="batch:")] == ["batch:2026-06-25T18"]
    assert cluster.locks(engine, prefix="b%") == []  # the prefix is literal, not a pattern


def test_a_silent_worker_that_still_holds_a_lease_stays_stale(engine: Engine) -> None:
    """Found by a regression review: a worker paused with a long lease was called gone (and
    doctor green) while its run waited for the lease to expire."""
    from helpers import define
    from jobgate.service.submission import SubmitRequest
    from jobgate.store.base import RunsClaim

    run = engine.submit(SubmitRequest(define(engine))).run
    now = engine.clock.now()
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w-frozen", "h2", 12, 8, ("default",), now - cluster.GONE_AFTER * 2))
        claimed = tx.runs_claim(RunsClaim("w-frozen", ("default",), 1, now, now + timedelta(hours=1)))
    assert [r.job_run_id for r in claimed.runs()] == [run.job_run_id]
    every = {r.info.worker_id: r.state for r in cluster.workers(engine, include_stopped=True)}
    assert every == {"w-frozen": "stale"}
    later = now + timedelta(hours=2)  # its lease expired: gone
    with engine.store.read() as tx:
        (info,) = tx.workers_list()
    assert cluster.worker_state(info, later) == "gone"
