"""Leases are measured on the database's clock, so a host whose clock is off cannot steal them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobgate.clock import DatabaseClock, SystemClock
from jobgate.runtime.scheduler import Scheduler
from jobgate.service.engine import Engine
from jobgate.testing import FakeClock, SkewedClock

HOUR = timedelta(hours=1)


def test_the_offset_is_measured_against_the_middle_of_the_round_trip() -> None:
    host = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))  # the host's clock, moved by the test
    reads = []

    def database_now() -> datetime:
        reads.append(host.now())
        at = host.advance(timedelta(milliseconds=10))  # a 10 ms round trip
        return at - timedelta(milliseconds=5) + HOUR  # the database is an hour ahead

    clock = DatabaseClock(database_now, refresh=timedelta(seconds=30), host_now=host.now)
    assert clock.now() == host.now() + HOUR
    assert clock.offset == HOUR
    host.advance(timedelta(seconds=29))
    clock.now()
    assert len(reads) == 1  # within the refresh: no query
    host.advance(timedelta(seconds=2))
    clock.now()
    assert len(reads) == 2


def test_an_unreachable_database_keeps_the_last_offset_and_retries_soon() -> None:
    host = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    up = True

    def database_now() -> datetime:
        if not up:
            raise ConnectionError("server closed the connection")
        return host.now() + HOUR

    clock = DatabaseClock(database_now, refresh=timedelta(seconds=30), retry=timedelta(seconds=1), host_now=host.now)
    assert clock.now() == host.now() + HOUR
    up = False
    host.advance(timedelta(seconds=31))
    assert clock.now() == host.now() + HOUR  # no exception, the last offset
    up = True
    host.advance(timedelta(seconds=2))
    assert clock.now() == host.now() + HOUR


def test_each_backend_gives_the_clock_its_processes_share(engine: Engine) -> None:
    clock = engine.store.clock()
    if engine.store.dialect == "postgresql":
        assert isinstance(clock, DatabaseClock)
        clock.now()
        assert abs(clock.offset) < timedelta(seconds=1)  # the local server runs on this host's clock
    else:
        assert isinstance(clock, SystemClock)
    assert isinstance(engine.clock, type(clock))  # the engine measures with it by default


def test_a_scheduler_on_a_host_an_hour_fast_does_not_take_the_leaders_lease(engine: Engine) -> None:
    leader = Scheduler(engine, owner="leader", lease=timedelta(seconds=10))
    assert leader.tick().leader
    fast_host = DatabaseClock(engine.store.database_now, host_now=lambda: datetime.now(UTC) + HOUR)
    standby = Scheduler(Engine(engine.store, engine.config, clock=fast_host), owner="fast")
    assert not standby.tick().leader  # on database time the leader's lease has not expired
    naive = Scheduler(Engine(engine.store, engine.config, clock=SkewedClock(HOUR)), owner="naive")
    assert naive.tick().leader  # on its own clock it would have taken it: this is what the clock prevents
