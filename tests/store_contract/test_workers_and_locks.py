"""Worker registrations, named locks with fencing tokens and dependency outage markers, on both
backends.

The contract: a heartbeat registers a worker once and keeps it alive, a stop marks it; a lock has
one holder at a time, is renewed only by that holder, and every new holder gets a larger token
than all before it; an outage is opened (reported) once for the cluster however many observers
see it, renewed by its observer, taken over quietly when that observer stops, and closed once.
"""

from __future__ import annotations

from datetime import timedelta

from tests.store_contract.support import T0, digest_of, make, running

from jobgate.service.engine import Engine
from jobgate.store.base import WorkerBeat

TTL = timedelta(seconds=30)


def test_a_heartbeat_registers_a_worker_once_and_keeps_it_alive(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host-a", 101, 4, ("default", "reports"), T0))
        tx.worker_heartbeat(WorkerBeat("w2", "host-b", 202, 2, ("default",), T0 + timedelta(seconds=1)))
        tx.worker_heartbeat(WorkerBeat("w1", "host-a", 101, 4, ("default", "reports"), T0 + timedelta(seconds=5)))
    with engine.store.read() as tx:
        workers = tx.workers_list()
    assert [w.worker_id for w in workers] == ["w1", "w2"]  # the latest heartbeat first
    w1 = workers[0]
    assert (w1.host, w1.pid, w1.concurrency, w1.queues) == ("host-a", 101, 4, ("default", "reports"))
    assert (w1.started_at, w1.heartbeat_at, w1.stopped_at) == (T0, T0 + timedelta(seconds=5), None)


def test_a_workers_capabilities_are_kept_until_it_advertises_new_ones(engine: Engine) -> None:
    first = {"sha256:a": {"tenant": "default", "job": "a", "runnable": False, "reason": "no module 'x'"}}
    second = {"sha256:b": {"tenant": "default", "job": "b", "runnable": True, "code_digest": "sha256:c"}}
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0))
    with engine.store.read() as tx:
        assert tx.workers_list()[0].capabilities == {}  # not probed yet
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0, first))
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0 + timedelta(seconds=1)))  # unchanged
    with engine.store.read() as tx:
        assert tx.workers_list()[0].capabilities == first
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0 + timedelta(seconds=2), second))
        tx.worker_heartbeat(WorkerBeat("w2", "host", 2, 1, ("default",), T0, first))  # registered with them
    with engine.store.read() as tx:
        assert {w.worker_id: w.capabilities for w in tx.workers_list()} == {"w1": second, "w2": first}


def test_runs_waiting_by_digest_counts_the_scheduled_runs_of_each_version(engine: Engine) -> None:
    make(engine, 2, job_id="a")
    make(engine, 1, job_id="b", tenant="acme")
    running(engine, 1, job_id="c")  # started: not waiting
    with engine.store.read() as tx:
        everyone = tx.runs_waiting_by_digest(None)
        acme = tx.runs_waiting_by_digest("acme")
    assert everyone == {digest_of("a"): ("default", "a", 2), digest_of("b"): ("acme", "b", 1)}
    assert acme == {digest_of("b"): ("acme", "b", 1)}


def test_a_stopped_worker_is_marked_until_it_beats_again(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0))
        tx.worker_stopped("w1", T0 + timedelta(seconds=1))
        tx.worker_stopped("unknown", T0)  # nothing to mark
    with engine.store.read() as tx:
        (stopped,) = tx.workers_list()
    assert stopped.stopped_at == T0 + timedelta(seconds=1)
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat("w1", "host", 1, 1, ("default",), T0 + timedelta(seconds=2)))
    with engine.store.read() as tx:
        (back,) = tx.workers_list()
    assert (back.started_at, back.heartbeat_at, back.stopped_at) == (T0, T0 + timedelta(seconds=2), None)


def test_a_lock_has_one_holder_who_alone_renews_it(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.lock_acquire("leader", "a", T0, TTL) == 1
        assert tx.lock_acquire("leader", "b", T0 + timedelta(seconds=1), TTL) is None
        assert tx.lock_acquire("leader", "a", T0 + timedelta(seconds=10), TTL) == 1  # renewed, same token
        assert tx.lock_acquire("other", "b", T0, TTL) == 1  # locks are independent
    with engine.store.read() as tx:
        lock = tx.lock_get("leader")
        assert tx.lock_get("unknown") is None
    assert lock is not None
    assert (lock.name, lock.owner, lock.token) == ("leader", "a", 1)
    assert (lock.acquired_at, lock.expires_at) == (T0, T0 + timedelta(seconds=10) + TTL)


def test_an_expired_lock_goes_to_the_next_taker_with_a_larger_token(engine: Engine) -> None:
    expiry = T0 + TTL
    with engine.store.write() as tx:
        assert tx.lock_acquire("leader", "a", T0, TTL) == 1
        assert tx.lock_acquire("leader", "b", expiry - timedelta(microseconds=1), TTL) is None
        assert tx.lock_acquire("leader", "b", expiry, TTL) == 2
        # The former holder, back late, is told apart by its token and cannot take it back.
        assert not tx.lock_holds("leader", "a", 1, expiry)
        assert tx.lock_acquire("leader", "a", expiry + timedelta(seconds=1), TTL) is None
        # Even the same owner gets a new token once its own lock expired.
        assert tx.lock_acquire("leader", "b", expiry + TTL + TTL, TTL) == 3


def test_lock_holds_only_for_its_owner_and_token_before_expiry(engine: Engine) -> None:
    with engine.store.write() as tx:
        token = tx.lock_acquire("leader", "a", T0, TTL)
        assert token == 1
        assert tx.lock_holds("leader", "a", token, T0 + TTL - timedelta(microseconds=1))
        assert not tx.lock_holds("leader", "a", token, T0 + TTL)
        assert not tx.lock_holds("leader", "b", token, T0)
        assert not tx.lock_holds("leader", "a", token + 1, T0)
        assert not tx.lock_holds("unknown", "a", token, T0)


def test_a_released_lock_is_free_at_once_and_only_its_holder_releases_it(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.lock_acquire("leader", "a", T0, TTL) == 1
        tx.lock_release("leader", "b", 1)  # not the holder: nothing happens
        tx.lock_release("leader", "a", 2)  # not its token: nothing happens
        assert tx.lock_holds("leader", "a", 1, T0)
        tx.lock_release("leader", "a", 1)
        assert not tx.lock_holds("leader", "a", 1, T0)
        assert tx.lock_acquire("leader", "b", T0, TTL) == 2
        tx.lock_release("unknown", "a", 1)


def test_locks_list_gives_the_locks_whose_name_starts_with_the_prefix_by_name(engine: Engine) -> None:
    with engine.store.write() as tx:
        for name in ("sched:b", "sched:a", "sched_x", "schedXa", "leader"):
            tx.lock_acquire(name, "owner", T0, TTL)
    with engine.store.read() as tx:
        assert [lock.name for lock in tx.locks_list()] == ["leader", "sched:a", "sched:b", "schedXa", "sched_x"]
        assert [lock.name for lock in tx.locks_list("sched:")] == ["sched:a", "sched:b"]
        assert [lock.name for lock in tx.locks_list("sched_")] == ["sched_x"]  # '_' is no wildcard
        assert tx.locks_list("none") == []


def test_locks_list_prefix_is_case_sensitive(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.lock_acquire("sched:a", "owner", T0, TTL)
        tx.lock_acquire("Sched:b", "owner", T0, TTL)
    with engine.store.read() as tx:
        assert [lock.name for lock in tx.locks_list("Sched:")] == ["Sched:b"]


def test_an_outage_is_opened_once_and_renewed_by_its_observer(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.outage_down("db", "a", T0, TTL) == (True, T0)
        # Another observer sees it too while it is watched: not a new outage, no takeover.
        assert tx.outage_down("db", "b", T0 + timedelta(seconds=1), TTL) == (False, T0)
        assert tx.outage_down("db", "a", T0 + timedelta(seconds=20), TTL) == (False, T0)
    with engine.store.read() as tx:
        (marker,) = tx.outages_open()
    assert (marker.name, marker.owner, marker.token, marker.acquired_at) == ("db", "a", 1, T0)
    assert marker.expires_at == T0 + timedelta(seconds=20) + TTL


def test_an_outage_whose_observer_stopped_is_taken_over_quietly(engine: Engine) -> None:
    lapsed = T0 + TTL + timedelta(seconds=1)  # a's renewal is overdue, by less than a TTL
    with engine.store.write() as tx:
        tx.outage_down("db", "a", T0, TTL)
        assert tx.outage_down("db", "b", lapsed, TTL) == (False, T0)  # the same outage, reported already
    with engine.store.read() as tx:
        (marker,) = tx.outages_open()
    assert (marker.owner, marker.token, marker.acquired_at, marker.expires_at) == ("b", 1, T0, lapsed + TTL)


def test_an_outage_left_unwatched_for_a_whole_ttl_is_a_new_outage(engine: Engine) -> None:
    abandoned = T0 + TTL + TTL
    with engine.store.write() as tx:
        tx.outage_down("db", "a", T0, TTL)
        assert tx.outage_down("db", "b", abandoned, TTL) == (True, abandoned)
    with engine.store.read() as tx:
        (marker,) = tx.outages_open()
    assert (marker.owner, marker.token, marker.acquired_at) == ("b", 2, abandoned)


def test_an_outage_is_closed_once_and_a_later_one_is_reported_again(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.outage_up("db") is None  # never down
        tx.outage_down("db", "a", T0, TTL)
        tx.outage_down("cache", "a", T0, TTL)
        closed = tx.outage_up("db")
        assert tx.outage_up("db") is None  # closed already: only one closer is told
    assert closed is not None
    assert (closed.owner, closed.token, closed.acquired_at) == ("a", 1, T0)
    with engine.store.read() as tx:
        assert [m.name for m in tx.outages_open()] == ["cache"]
        assert tx.lock_get("dependency-outage:db") is not None  # the marker row stays, closed
    later = T0 + timedelta(minutes=1)
    with engine.store.write() as tx:
        assert tx.outage_down("db", "b", later, TTL) == (True, later)
    with engine.store.read() as tx:
        assert sorted((m.name, m.token) for m in tx.outages_open()) == [("cache", 1), ("db", 2)]
