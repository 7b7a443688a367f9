"""Runs: creation keyed by idempotency key and slot, the reads and lists of runs, progress, stop
requests and dead letters, on both backends.

The contract: a run is created once per idempotency key (and once per schedule slot of a
tenant), with its creation transitions; a repeated creation writes nothing and returns the stored
run; reads find runs by id, key, tenant and filter, newest first with a stable cursor; progress
and stop requests apply to running runs only, fenced to the lease; a dead letter stays open until
resolved.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.helpers import count
from tests.store_contract.support import (
    JOB,
    T0,
    WORKER,
    apply,
    complete,
    creation,
    dead_letter,
    get,
    holding,
    make,
    new_run,
    running,
)

from jobgate.core.governance import Code
from jobgate.core.models import JobClass, TriggerType
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.store.base import RunFilter

S = RunStatus


def test_runs_create_stores_a_scheduled_run_with_its_creation_transitions(engine: Engine) -> None:
    c = creation(new_run(at=T0, due_at=T0 + timedelta(minutes=1), params={"p": "1"}), concurrency_limit=2)
    with engine.store.write() as tx:
        made = tx.runs_create([c])
    assert made == [(c.run, True)]
    stored = get(engine, c.run.job_run_id)
    assert stored == c.run
    with engine.store.read() as tx:
        assert tx.run_transitions(stored.job_run_id) == list(c.transitions)
        assert tx.run_trigger(stored.job_run_id) == c.trigger


def test_runs_create_of_a_stored_key_writes_nothing_and_returns_the_stored_run(engine: Engine) -> None:
    first = creation(new_run(key="the-key", at=T0))
    with engine.store.write() as tx:
        tx.runs_create([first])
    # The same key again, from a later trigger: the stored run answers, unchanged.
    again = creation(new_run(key="the-key", at=T0 + timedelta(hours=1), params={"x": "changed"}))
    with engine.store.write() as tx:
        assert tx.runs_create([again]) == [(first.run, False)]
    assert count(engine, "job_runs") == 1
    assert count(engine, "run_transitions") == 2


def test_a_key_repeated_in_one_call_is_created_once_for_its_first_request(engine: Engine) -> None:
    p, q = creation(new_run()), creation(new_run())
    twin = creation(new_run(key=p.run.idempotency_key))
    with engine.store.write() as tx:
        made = tx.runs_create([p, q, twin])
        assert tx.runs_create([]) == []
    assert made == [(p.run, True), (q.run, True), (p.run, False)]
    assert count(engine, "job_runs") == 2


def test_a_schedule_slot_has_one_run_whatever_its_key(engine: Engine) -> None:
    slot = "nightly@2030-01-01T00:00:00Z"
    first, second = creation(new_run(slot=slot)), creation(new_run(slot=slot))
    with engine.store.write() as tx:
        made = tx.runs_create([first, second])
        later = tx.runs_create([creation(new_run(slot=slot))])
    assert made == [(first.run, True), (first.run, False)]
    assert later == [(first.run, False)]
    assert count(engine, "job_runs") == 1


def test_a_slot_is_one_tenants_the_same_slot_of_another_tenant_is_another_run(engine: Engine) -> None:
    slot = "nightly@2030-01-01T00:00:00Z"
    mine, theirs = creation(new_run(slot=slot)), creation(new_run(slot=slot, tenant="tenant-b"))
    with engine.store.write() as tx:
        assert tx.runs_create([mine]) == [(mine.run, True)]
        assert tx.runs_create([theirs]) == [(theirs.run, True)]


def test_one_call_creates_the_same_slot_for_two_tenants(engine: Engine) -> None:
    slot = "nightly@2030-01-01T00:00:00Z"
    mine, theirs = creation(new_run(slot=slot)), creation(new_run(slot=slot, tenant="tenant-b"))
    with engine.store.write() as tx:
        made = tx.runs_create([mine, theirs])
    assert made == [(mine.run, True), (theirs.run, True)]


def test_run_holders_names_the_stored_run_of_a_key_or_a_slot(engine: Engine) -> None:
    stored, slotted = creation(new_run()), creation(new_run(slot="s@1"))
    with engine.store.write() as tx:
        tx.runs_create([stored, slotted])
    same_key = new_run(key=stored.run.idempotency_key)
    same_slot = new_run(slot="s@1")
    other_tenant = new_run(slot="s@1", tenant="tenant-b")
    fresh = new_run(slot="s@2")
    with engine.store.read() as tx:
        holders = tx.run_holders([same_key, same_slot, other_tenant, fresh])
        assert tx.run_holders([]) == {}
    assert holders == {same_key.idempotency_key: stored.run, same_slot.idempotency_key: slotted.run}


def test_runs_holding_slots_names_a_tenants_run_of_each_job_and_slot(engine: Engine) -> None:
    mine, theirs = creation(new_run(slot="e@1")), creation(new_run(slot="e@1", tenant="tenant-b"))
    with engine.store.write() as tx:
        tx.runs_create([mine, theirs])
    job = mine.run.job_definition_id
    with engine.store.read() as tx:
        held = tx.runs_holding_slots(mine.run.tenant_id, [(job, "e@1"), (job, "e@2"), ("another-job", "e@1")])
        assert tx.runs_holding_slots("tenant-c", [(job, "e@1")]) == {}
    assert held == {(job, "e@1"): mine.run}


def test_run_get_finds_a_run_by_id_within_its_tenant(engine: Engine) -> None:
    (run,) = make(engine, tenant="tenant-a")
    with engine.store.read() as tx:
        assert tx.run_get(run.job_run_id) == run
        assert tx.run_get(run.job_run_id, "tenant-a") == run
        assert tx.run_get(run.job_run_id, "tenant-b") is None
        assert tx.run_get("TGJOBRUN-unknown") is None


def test_run_lock_reads_the_run_and_holds_it_until_the_transaction_ends(engine: Engine) -> None:
    """``run_lock`` is ``run_get`` that a second locker waits behind (on PostgreSQL a row lock;
    on SQLite the one writer): the second sees what the first committed."""
    import threading

    (run,) = make(engine)
    first_done = threading.Event()
    seen: list[str] = []

    def second() -> None:
        with engine.store.write() as tx:
            locked = tx.run_lock(run.job_run_id)
            seen.append("after first" if first_done.is_set() else "before first")
            assert locked is not None

    with engine.store.write() as tx:
        assert tx.run_lock(run.job_run_id) == run and tx.run_lock("TGJOBRUN-unknown") is None
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(0.3)  # real time: the second locker must still be waiting while the first holds it
        assert waiter.is_alive()
        first_done.set()
    waiter.join(10)
    assert seen == ["after first"]


def test_runs_get_and_runs_by_keys_return_the_runs_that_exist(engine: Engine) -> None:
    runs = make(engine, 3)
    with engine.store.read() as tx:
        by_id = tx.runs_get([runs[0].job_run_id, "TGJOBRUN-unknown", runs[2].job_run_id])
        by_key = tx.runs_by_keys([runs[1].idempotency_key, "no-such-key"])
        assert tx.runs_get([]) == [] and tx.runs_by_keys([]) == []
    assert sorted(r.job_run_id for r in by_id) == sorted([runs[0].job_run_id, runs[2].job_run_id])
    assert by_key == [runs[1]]


def test_runs_create_stores_retry_of_and_run_retries_finds_a_sources_retries(engine: Engine) -> None:
    """A retry names its source (``retry_of``), stored with it; ``run_retries`` lists a source's
    retries within one tenant, oldest first; a second creation under a stored run id writes
    nothing, whatever its key (the retry contract's derived id)."""
    (source,) = make(engine, tenant="tenant-a")
    first = new_run(tenant="tenant-a", retry_of=source.job_run_id, at=T0)
    later = new_run(tenant="tenant-a", retry_of=source.job_run_id, at=T0 + timedelta(seconds=1))
    elsewhere = new_run(tenant="tenant-b", retry_of=source.job_run_id)
    with engine.store.write() as tx:
        tx.runs_create([creation(later), creation(first), creation(elsewhere)])
        twin = new_run(tenant="tenant-a", retry_of=source.job_run_id).evolve(job_run_id=first.job_run_id)
        assert tx.runs_create([creation(twin)]) == [(first, False)]
    with engine.store.read() as tx:
        assert get(engine, first.job_run_id).retry_of == source.job_run_id
        assert tx.run_retries("tenant-a", source.job_run_id) == [first, later]
        assert tx.run_retries("tenant-a", source.job_run_id, limit=1) == [first]
        assert tx.run_retries("tenant-b", source.job_run_id) == [elsewhere]
        assert tx.run_retries("tenant-a", first.job_run_id) == []
        assert tx.run_get(source.job_run_id, "tenant-a") == source and source.retry_of is None
    assert count(engine, "job_runs") == 4


def test_runs_list_is_newest_first_and_pages_with_its_cursor(engine: Engine) -> None:
    runs = make(engine, 3, at=T0) + make(engine, 2, at=T0 + timedelta(seconds=1)) + make(engine, at=T0 - timedelta(1))
    expected = sorted(runs, key=lambda r: (r.created_at, r.job_run_id), reverse=True)
    seen = []
    before = None
    with engine.store.read() as tx:
        while True:
            page = tx.runs_list(RunFilter(limit=2, before=before))
            if not page:
                break
            assert len(page) <= 2
            seen += page
            before = (page[-1].created_at, page[-1].job_run_id)
    assert [r.job_run_id for r in seen] == [r.job_run_id for r in expected]


def test_runs_list_filters_by_tenant_status_definition_class_and_creation_time(engine: Engine) -> None:
    (waiting,) = make(engine, job_id="job-a", at=T0)
    done = complete(engine, job_id="job-b", job_class=JobClass.AUDIT_INTEGRITY_JOB, at=T0 + timedelta(seconds=1))
    (foreign,) = make(engine, job_id="job-c", tenant="tenant-b", at=T0 + timedelta(seconds=2))
    (cron,) = make(engine, job_id="job-a", tenant="tenant-b", trigger_type=TriggerType.CRON, at=T0)

    def ids(**f: object) -> set[str]:
        with engine.store.read() as tx:
            return {r.job_run_id for r in tx.runs_list(RunFilter(**f))}  # type: ignore[arg-type]

    assert ids(tenant_id="default") == {waiting.job_run_id, done.job_run_id}
    assert ids() == {waiting.job_run_id, done.job_run_id, foreign.job_run_id, cron.job_run_id}
    assert ids(statuses=(S.COMPLETED,)) == {done.job_run_id}
    assert ids(statuses=(S.SCHEDULED, S.COMPLETED), tenant_id="default") == {waiting.job_run_id, done.job_run_id}
    assert ids(job_definition_id="job-a") == {waiting.job_run_id, cron.job_run_id}
    assert ids(job_definition_ids=("job-a", "job-c"), tenant_id="default") == {waiting.job_run_id}
    assert ids(job_definition_ids=()) == set()
    assert ids(job_class=JobClass.AUDIT_INTEGRITY_JOB.value) == {done.job_run_id}
    assert ids(trigger_type=TriggerType.CRON.value) == {cron.job_run_id}
    assert ids(created_from=T0 + timedelta(seconds=1)) == {done.job_run_id, foreign.job_run_id}
    assert ids(created_to=T0 + timedelta(seconds=1)) == {waiting.job_run_id, cron.job_run_id}
    assert len(ids(limit=1)) == 1


def test_runs_list_by_trigger_prefix_takes_the_prefix_literally(engine: Engine) -> None:
    (mine,) = make(engine, trigger_id="TGTRIG-nightly_1@2030-01-01")
    make(engine, trigger_id="TGTRIG-nightlyX1@2030-01-01")  # '_' is not a wildcard
    make(engine, trigger_id="TGTRIG-nightly_10@2030-01-01")
    with engine.store.read() as tx:
        found = tx.runs_list(RunFilter(trigger_prefix="TGTRIG-nightly_1@"))
    assert [r.job_run_id for r in found] == [mine.job_run_id]


def test_runs_list_by_trigger_prefix_tells_schedules_apart_by_case(engine: Engine) -> None:
    """Schedule ids are case-sensitive (``Nightly`` and ``nightly`` are two schedules), and the
    scheduler finds a schedule's outstanding runs by this prefix (overlap ``forbid``/``replace``)."""
    (upper,) = make(engine, trigger_id="TGTRIG-Nightly@2030-01-01T00:00:00Z")
    make(engine, trigger_id="TGTRIG-nightly@2030-01-01T00:00:00Z")
    with engine.store.read() as tx:
        found = tx.runs_list(RunFilter(trigger_prefix="TGTRIG-Nightly@"))
    assert [r.job_run_id for r in found] == [upper.job_run_id]


def test_run_transitions_and_attempts_record_a_run_in_order(engine: Engine) -> None:
    done = complete(engine)
    with engine.store.read() as tx:
        ts = tx.run_transitions(done.job_run_id)
        attempts = tx.run_attempts(done.job_run_id)
        assert tx.run_transitions("TGJOBRUN-unknown") == [] and tx.run_attempts("TGJOBRUN-unknown") == []
    assert [(t.from_status, t.to_status, t.attempt) for t in ts] == [
        (None, S.CREATED, 0),
        (S.CREATED, S.SCHEDULED, 0),
        (S.SCHEDULED, S.DISPATCHED, 0),
        (S.DISPATCHED, S.RUNNING, 1),
        (S.RUNNING, S.COMPLETED, 1),
    ]
    assert [t.at for t in ts] == sorted(t.at for t in ts)
    (attempt,) = attempts
    assert (attempt.job_run_id, attempt.attempt, attempt.worker_id, attempt.outcome) == (
        done.job_run_id, 1, WORKER, "succeeded",
    )  # fmt: skip
    assert (attempt.started_at, attempt.ended_at) == (ts[3].at, ts[4].at)


def test_run_trigger_is_the_document_the_run_was_created_with(engine: Engine) -> None:
    c = creation(new_run())
    trigger = {**c.trigger, "reason": "month end", "request_id": "REQ-1", "payload": {"k": "v"}}
    with engine.store.write() as tx:
        tx.runs_create([type(c)(c.run, trigger, c.transitions)])
    with engine.store.read() as tx:
        assert tx.run_trigger(c.run.job_run_id) == trigger
        assert tx.run_trigger("TGJOBRUN-unknown") is None


def test_runs_created_count_counts_a_tenants_runs_created_in_a_half_open_window(engine: Engine) -> None:
    make(engine, 2, at=T0)
    make(engine, at=T0 + timedelta(seconds=1))
    make(engine, tenant="tenant-b", at=T0)
    complete(engine, at=T0 + timedelta(seconds=2))  # every state counts
    with engine.store.read() as tx:
        assert tx.runs_created_count("default", T0, T0 + timedelta(seconds=1)) == 2
        assert tx.runs_created_count("default", T0, T0 + timedelta(seconds=3)) == 4
        assert tx.runs_created_count("tenant-b", T0, T0 + timedelta(seconds=3)) == 1
        assert tx.runs_created_count("default", T0 + timedelta(seconds=1), T0 + timedelta(seconds=1)) == 0


def test_open_held_and_due_counts_group_the_open_runs(engine: Engine) -> None:
    audit = JobClass.AUDIT_INTEGRITY_JOB
    now = engine.clock.now()
    waiting = make(engine, 2, at=now - timedelta(minutes=1)) + make(engine, at=now - timedelta(minutes=2))
    (held,) = make(engine, job_class=audit)
    assert apply(engine, [holding(engine, held, Code.SAFE_MODE)])
    running(engine, job_class=audit)
    complete(engine)
    make(engine, tenant="tenant-b", at=now - timedelta(minutes=3))
    make(engine, due_at=now + timedelta(hours=1))
    with engine.store.read() as tx:
        assert tx.runs_open_counts("default") == {
            ("SCHEDULED", "MAINTENANCE_JOB"): 4,
            ("HELD", "AUDIT_INTEGRITY_JOB"): 1,
            ("RUNNING", "AUDIT_INTEGRITY_JOB"): 1,
        }
        assert tx.runs_open_counts(None)[("SCHEDULED", "MAINTENANCE_JOB")] == 5
        assert tx.runs_held_counts("default") == {("safe_mode_active", "AUDIT_INTEGRITY_JOB"): 1}
        assert tx.runs_held_counts("tenant-b") == {}
        assert tx.runs_held_counts(None) == {("safe_mode_active", "AUDIT_INTEGRITY_JOB"): 1}
        # Due: claimable at ``now`` (the one due in an hour is not), and the oldest due time.
        assert tx.runs_due_summary("default", now) == (3, min(r.due_at for r in waiting))
        assert tx.runs_due_summary(None, now) == (4, now - timedelta(minutes=3))
        assert tx.runs_due_summary("tenant-c", now) == (0, None)


def test_run_progress_is_written_only_by_the_lease_holder_of_a_running_run(engine: Engine) -> None:
    (run,) = running(engine)
    (waiting,) = make(engine)
    with engine.store.write() as tx:
        assert tx.run_progress(run.job_run_id, run.lease_token, 0.5, "half way")
        assert not tx.run_progress(run.job_run_id, run.lease_token + 1, 0.9, "not mine")
        assert not tx.run_progress(waiting.job_run_id, waiting.lease_token, 0.1, "not running")
    with engine.store.read() as tx:
        assert tx.run_progress_get(run.job_run_id) == (0.5, "half way")
        assert tx.run_progress_get(waiting.job_run_id) == (None, None)
        assert tx.run_progress_get("TGJOBRUN-unknown") == (None, None)


def test_run_progress_never_moves_back_within_an_attempt(engine: Engine) -> None:
    """Seed 001 §3: a late or reordered report cannot lower the recorded fraction; a report
    without a fraction changes only the message."""
    (run,) = running(engine)
    with engine.store.write() as tx:
        assert tx.run_progress(run.job_run_id, run.lease_token, 0.5, "half way")
        assert not tx.run_progress(run.job_run_id, run.lease_token, 0.4, "late report")
        assert tx.run_progress(run.job_run_id, run.lease_token, None, "still going")
        assert tx.run_progress(run.job_run_id, run.lease_token, 0.5, "the same fraction again")
    with engine.store.read() as tx:
        assert tx.run_progress_get(run.job_run_id) == (0.5, "the same fraction again")


def test_a_stop_request_marks_a_running_run_only(engine: Engine) -> None:
    (run, other) = running(engine, 2)
    (waiting,) = make(engine)
    with engine.store.write() as tx:
        assert tx.run_request_stop(run.job_run_id)
        assert not tx.run_request_stop(waiting.job_run_id)
        assert not tx.run_request_stop("TGJOBRUN-unknown")
    with engine.store.read() as tx:
        asked = tx.runs_stop_requested([run.job_run_id, other.job_run_id, waiting.job_run_id])
        assert tx.runs_stop_requested([]) == set()
    assert asked == {run.job_run_id}
    assert get(engine, run.job_run_id).stop_requested


def test_runs_stop_check_tells_a_worker_what_to_stop_and_what_is_no_longer_its(engine: Engine) -> None:
    asked, kept, taken = running(engine, 3)
    with engine.store.write() as tx:
        tx.run_request_stop(asked.job_run_id)
    leases = [
        (asked.job_run_id, asked.lease_token),
        (kept.job_run_id, kept.lease_token),
        (taken.job_run_id, taken.lease_token + 1),  # the lease moved on: someone else's now
        ("TGJOBRUN-gone", 1),  # retired
    ]
    with engine.store.read() as tx:
        stop, gone = tx.runs_stop_check(leases)
        assert tx.runs_stop_check([]) == (set(), set())
    assert stop == {asked.job_run_id}
    assert gone == {taken.job_run_id, "TGJOBRUN-gone"}


def test_a_dead_letter_is_open_until_resolved(engine: Engine) -> None:
    lettered = dead_letter(engine)
    (waiting,) = make(engine)
    with engine.store.read() as tx:
        letter = tx.dead_letter_open_for(lettered.job_run_id)
        assert tx.dead_letter_open_for(waiting.job_run_id) is None
    assert letter is not None
    assert (letter.job_run_id, letter.tenant_id, letter.reason.value, letter.last_error_code) == (
        lettered.job_run_id, "default", "queue_timeout_exceeded", "QUEUE_TIMEOUT",
    )  # fmt: skip
    assert (letter.resolved_at, letter.resolution) == (None, None)
    resolved_at = engine.clock.now()
    with engine.store.write() as tx:
        tx.dead_letter_resolve(letter.dead_letter_id, "requeued", resolved_at)
        tx.dead_letter_resolve("TGDLQ-unknown", "nothing", resolved_at)  # no such letter: nothing happens
    with engine.store.read() as tx:
        assert tx.dead_letter_open_for(lettered.job_run_id) is None
        assert tx.dead_letters_list("default") == []
        (closed,) = tx.dead_letters_list("default", open_only=False)
    assert (closed.dead_letter_id, closed.resolved_at, closed.resolution) == (
        letter.dead_letter_id, resolved_at, "requeued",
    )  # fmt: skip
    assert get(engine, lettered.job_run_id).status is S.DEAD_LETTERED  # resolving does not move the run


def test_dead_letters_list_is_newest_first_per_tenant_and_pages(engine: Engine) -> None:
    letters = [dead_letter(engine) for _ in range(3)]
    dead_letter(engine, tenant="tenant-b")
    with engine.store.read() as tx:
        everything = tx.dead_letters_list(None)
        mine = tx.dead_letters_list("default")
        first = tx.dead_letters_list("default", limit=2)
        rest = tx.dead_letters_list("default", before=(first[-1].created_at, first[-1].dead_letter_id))
    assert len(everything) == 4
    assert [d.job_run_id for d in mine] == [r.job_run_id for r in reversed(letters)]
    assert len(first) == 2
    assert [d.dead_letter_id for d in first + rest] == [d.dead_letter_id for d in mine]


def test_runs_ended_by_bucket_counts_a_tenants_ended_runs_per_bucket_and_final_status(engine: Engine) -> None:
    done = complete(engine)
    lettered = dead_letter(engine)
    complete(engine, tenant="tenant-b")
    make(engine)  # open: never counted
    assert done.ended_at is not None and lettered.ended_at is not None
    hour = timedelta(hours=1)
    early = min(done.ended_at, lettered.ended_at)
    long_ago = early - timedelta(days=2)
    with engine.store.read() as tx:
        # Bucket 0 starts half an hour before the first end; bucket 1 an hour later.
        counted = tx.runs_ended_by_bucket("default", early - hour / 2, hour, long_ago)
        assert sorted(counted) == [(0, "COMPLETED", 1), (0, "DEAD_LETTERED", 1)]
        later = tx.runs_ended_by_bucket("default", early - 3 * hour / 2, hour, long_ago)
        assert sorted(counted) == sorted((b - 1, s, n) for b, s, n in later)
        assert tx.runs_ended_by_bucket("default", early + hour, hour, long_ago) == []  # ended before the window
        assert tx.runs_ended_by_bucket("default", early - hour, hour, early + hour) == []  # created before the bound
        assert tx.runs_ended_by_bucket("tenant-b", early - hour, hour, long_ago) == [(1, "COMPLETED", 1)]
        limited = tx.runs_ended_by_bucket("default", early - hour, hour, long_ago, [done.job_definition_id])
        assert sum(n for _, _, n in limited) == (2 if lettered.job_definition_id == done.job_definition_id else 1)
        assert tx.runs_ended_by_bucket("default", early - hour, hour, long_ago, ["no-such-definition"]) == []
        assert tx.runs_open_counts("default", ["no-such-definition"]) == {}
        assert tx.runs_held_counts("default", ["no-such-definition"]) == {}


def test_run_ids_ending_finds_the_runs_a_short_id_names(engine: Engine) -> None:
    first, second = make(engine, 2)
    (theirs,) = make(engine, tenant="tenant-b")
    with engine.store.read() as tx:
        assert tx.run_ids_ending(first.job_run_id[-12:]) == [first.job_run_id]
        assert tx.run_ids_ending(second.job_run_id[-12:], "default") == [second.job_run_id]
        assert tx.run_ids_ending(theirs.job_run_id[-12:], "default") == []  # another tenant's, when scoped
        assert tx.run_ids_ending("0123456789abcdef0123") == []
        assert len(tx.run_ids_ending(first.job_run_id[-1:], limit=5)) <= 5
    with pytest.raises(ValueError), engine.store.read() as tx:
        tx.run_ids_ending("%")


def test_runs_retired_in_slots_is_empty_for_slots_no_retired_run_held(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert tx.runs_retired_in_slots("default", []) == {}
        assert tx.runs_retired_in_slots("default", [(JOB, "TGEVENT-e1")]) == {}


def test_runs_lock_free_takes_the_stored_runs_no_other_transaction_holds(engine: Engine) -> None:
    """The rescuer's lock (``runs_lock_free``): the stored runs among those asked; on
    PostgreSQL a run another open transaction holds is left out, never waited for."""
    import threading

    a, b = make(engine, 2)
    with engine.store.write() as tx:
        assert tx.runs_lock_free([a.job_run_id, b.job_run_id, "TGJOBRUN-none"]) == {a.job_run_id, b.job_run_id}
        assert tx.runs_lock_free([]) == set()
    if engine.store.dialect != "postgresql":
        return  # SQLite: one writer at a time holds the whole file
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.store.write() as tx:
            tx.run_lock(a.job_run_id)
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with engine.store.write() as tx:
            assert tx.runs_lock_free([a.job_run_id, b.job_run_id]) == {b.job_run_id}
    finally:
        release.set()
        holder.join(10)
