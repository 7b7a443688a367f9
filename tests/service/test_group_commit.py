"""Group commit: concurrent callers share a transaction, and each gets its own outcome."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

from tests.helpers import define
from tests.runtime.runtime_support import wait_until

from jobgate.core.audit import ACTING, Acting
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.group_commit import GroupCommit, InFlight
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

NOW = datetime(2026, 12, 3, tzinfo=UTC)


class Ledger:
    """A ``write`` that commits a list of items or none of them, and can be held open."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.calls: list[list[str]] = []
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.hold.set()

    def write(self, items: Sequence[str], now: datetime) -> list[str]:
        self.calls.append(list(items))
        self.holding.set()
        self.hold.wait(10)
        if any(item.startswith("bad") for item in items):
            raise ValueError("refused: " + ",".join(i for i in items if i.startswith("bad")))
        self.committed.extend(items)
        return [f"stored {item}" for item in items]


def _wait_for_callers(group: GroupCommit[str, str], n: int) -> None:
    """Until ``n`` callers queue behind the leader (the queue the leader takes next)."""

    def queued() -> bool:
        with group._mutex:  # the test looks at the queue under its lock
            return len(group._waiting) >= n

    wait_until(queued, what=f"{n} callers queued")


def _start(group: GroupCommit[str, str], items: list[str], out: dict[str, object]) -> threading.Thread:
    def call() -> None:
        try:
            out[items[0]] = group.store(items, NOW)
        except Exception as exc:  # the caller's own outcome
            out[items[0]] = exc

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def _behind_a_leader(ledger: Ledger, group: GroupCommit[str, str], callers: list[list[str]]) -> dict[str, object]:
    """``a1`` writes alone and is held open while ``callers`` queue behind it; then all finish.
    Returns each caller's outcome keyed by its first item."""
    out: dict[str, object] = {}
    ledger.hold.clear()
    first = _start(group, ["a1"], out)
    assert ledger.holding.wait(10)
    others = [_start(group, items, out) for items in callers]
    _wait_for_callers(group, len(callers))
    ledger.hold.set()
    for t in [first, *others]:
        t.join(10)
    return out


def test_callers_that_arrive_while_one_writes_share_the_next_transaction() -> None:
    ledger = Ledger()
    group: GroupCommit[str, str] = GroupCommit(ledger.write)
    out = _behind_a_leader(ledger, group, [[f"b{n}", f"c{n}"] for n in range(5)])
    assert ledger.calls[0] == ["a1"]
    assert len(ledger.calls) == 2 and sorted(ledger.calls[1]) == sorted(f"{x}{n}" for n in range(5) for x in "bc")
    assert out["a1"] == ["stored a1"]
    for n in range(5):  # each caller gets its own results, in its own order
        assert out[f"b{n}"] == [f"stored b{n}", f"stored c{n}"]
    assert (group.groups, group.grouped_callers) == (2, 6)


def test_a_failing_caller_in_a_group_fails_alone_and_stores_nothing() -> None:
    ledger = Ledger()
    out = _behind_a_leader(ledger, GroupCommit(ledger.write), [["g1"], ["bad1"], ["g2"]])
    assert out["g1"] == ["stored g1"] and out["g2"] == ["stored g2"]
    assert isinstance(out["bad1"], ValueError) and str(out["bad1"]) == "refused: bad1"
    assert "bad1" not in ledger.committed
    assert sorted(ledger.committed) == ["a1", "g1", "g2"]


def test_a_group_is_bounded_and_the_lead_passes_on() -> None:
    ledger = Ledger()
    out = _behind_a_leader(ledger, GroupCommit(ledger.write, max_items=3), [[f"x{n}"] for n in range(7)])
    assert all(len(call) <= 3 for call in ledger.calls)
    assert sorted(ledger.committed) == sorted(["a1", *(f"x{n}" for n in range(7))])
    assert all(out[f"x{n}"] == [f"stored x{n}"] for n in range(7))


def test_a_lone_caller_writes_at_once_in_its_own_thread() -> None:
    seen: list[int] = []

    def write(items: Sequence[str], now: datetime) -> list[str]:
        seen.append(threading.get_ident())
        return list(items)

    group: GroupCommit[str, str] = GroupCommit(write)
    assert group.store(["only"], NOW) == ["only"]
    assert seen == [threading.get_ident()]


def test_concurrent_submissions_through_the_engine_each_get_their_run(engine: Engine) -> None:
    """Real submissions from many threads (grouped on SQLite, apart on PostgreSQL): each request
    gets its own run, a repeated key gets the same run back, and no run is stored twice."""
    job = define(engine)
    threads = 24
    results: dict[int, str] = {}
    created: dict[int, bool] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def submit(n: int) -> None:
        try:
            start.wait(10)
            key = f"k{n % (threads // 2)}"  # every key asked for twice
            result = engine.submit(SubmitRequest(job, request_id=key, scope=Scope()), actor="t")
            results[n] = result.run.job_run_id
            created[n] = result.created
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=submit, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert errors == []
    half = threads // 2
    assert all(results[n] == results[n + half] for n in range(half))
    assert len(set(results.values())) == half
    assert all(created[n] != created[n + half] for n in range(half))  # one of the two made it
    with engine.store.read() as tx:
        stored = connection(tx).exec_driver_sql("SELECT count(*) FROM job_runs").scalar_one()
    assert stored == half


def test_in_flight_tells_a_caller_whether_it_came_alone() -> None:
    flight = InFlight()
    with flight.submitting() as first:
        assert first is True
        with flight.submitting() as second:  # another caller meanwhile: it has company
            assert second is False
        with flight.submitting() as third:
            assert third is False
    with flight.submitting() as again:  # everyone left: alone again
        assert again is True


def test_in_flight_counts_a_caller_out_when_its_submission_fails() -> None:
    flight = InFlight()
    try:
        with flight.submitting():
            raise ValueError("refused")
    except ValueError:
        pass
    with flight.submitting() as alone:
        assert alone is True


def test_a_lone_trigger_is_written_in_one_transaction_and_company_goes_through_the_group(engine: Engine) -> None:
    """A sequential submission is prepared inside its write transaction (no group); one made
    while another caller of the process submits goes through the group commit (both backends)."""
    job = define(engine)
    group = engine.pipeline.group_commit
    for n in range(3):
        assert engine.submit(SubmitRequest(job, request_id=f"lone{n}", scope=Scope()), actor="t").created
    assert group.groups == 0
    with engine.pipeline.in_flight.submitting():  # another caller of this process is submitting
        assert engine.submit(SubmitRequest(job, request_id="crowd", scope=Scope()), actor="t").created
    assert (group.groups, group.grouped_callers) == (1, 1)
    with engine.store.read() as tx:
        assert connection(tx).exec_driver_sql("SELECT count(*) FROM job_runs").scalar_one() == 4


def test_a_grouped_submission_is_audited_with_its_own_callers_credential(engine: Engine) -> None:
    """A group's leader stores its followers' runs: each manual-scheduling entry still names the
    credential its own caller presented, though the same person called twice, through two."""
    job = define(engine)
    now = engine.clock.now()
    mine = Acting("ada", "token:first")
    theirs = Acting("ada", "token:second")
    token = ACTING.set(mine)
    try:
        request = SubmitRequest(job, scope=Scope(), requested_by="ada")
        prepared = engine.pipeline.prepare([request], now=now, actor="ada")
    finally:
        ACTING.reset(token)
    token = ACTING.set(theirs)  # the leader's context, storing the follower's submission
    try:
        (result,) = engine.pipeline.store_prepared(prepared, now, actor="ada")
    finally:
        ACTING.reset(token)
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="run.scheduled_manually"))
    assert entry.event.target_id == result.run.job_run_id
    assert entry.event.payload["via"] == {"credential": "token:first"}
