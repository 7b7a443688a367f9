"""The worker's side of the store: claims, compare-and-set run changes, leases and the reads the
rescuer and the gates make, on both backends.

The contract: a claim takes due, claimable runs of the named queues by priority then due time,
never a run another claim holds, honouring concurrency and rate limits and the admission rule;
a run change applies only if the run is still in its expected status (and, for a worker's
change, under its lease token), and one that does not match writes nothing at all; a lease is
renewed only by its holder; the rescuer's reads find exactly the runs past their bound.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from tests.helpers import count
from tests.store_contract.support import (
    LEASE,
    T0,
    WORKER,
    apply,
    cancelling,
    claim,
    claim_params,
    completion,
    dead_lettering,
    digest_of,
    dispatched,
    failure,
    get,
    holding,
    make,
    other_thread_waits,
    running,
    uid,
)

from jobgate.core import transitions
from jobgate.core.governance import Code, Verdict
from jobgate.core.models import DefinitionStatus, Priority
from jobgate.core.records import Approval
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.service.engine import Engine
from jobgate.store.base import DefinitionPut, LeaseRenew, WorkerBeat
from jobgate.store.sqlstore import StoreTx
from jobgate.testing import connection

S = RunStatus


def _events(engine: Engine, job_run_id: str) -> list[str]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(
            text("SELECT event_type FROM outbox WHERE job_run_id = :r ORDER BY id"), {"r": job_run_id}
        )
        return [r[0] for r in rows]


# ---------------------------------------------------------------------------- claims


def test_a_claim_takes_due_runs_by_priority_then_due_time_up_to_its_limit(engine: Engine) -> None:
    now = engine.clock.now()
    low = make(engine, priority=Priority.LOW, due_at=now - timedelta(minutes=9))
    late_high = make(engine, priority=Priority.HIGH, due_at=now - timedelta(minutes=1))
    early_high = make(engine, priority=Priority.HIGH, due_at=now - timedelta(minutes=2))
    critical = make(engine, priority=Priority.CRITICAL, due_at=now)
    normal = make(engine, 2, priority=Priority.NORMAL, due_at=now - timedelta(minutes=5))
    with engine.store.write() as tx:
        batch = tx.runs_claim(claim_params(engine, limit=4, now=now))
    order = critical + early_high + late_high
    taken = [r.job_run_id for r in batch.runs()]
    assert batch.count == 4 and batch.more
    assert taken[:3] == [r.job_run_id for r in order]
    assert taken[3] in {r.job_run_id for r in normal}
    assert get(engine, low[0].job_run_id).status is S.SCHEDULED
    for run in batch.runs():
        assert (run.status, run.lease_owner, run.lease_token) == (S.DISPATCHED, WORKER, 1)
        assert run.lease_expires_at == now + LEASE
        assert get(engine, run.job_run_id) == run
        with engine.store.read() as tx:
            last = tx.run_transitions(run.job_run_id)[-1]
        assert (last.from_status, last.to_status, last.reason, last.actor, last.at) == (
            S.SCHEDULED, S.DISPATCHED, "claimed", WORKER, now,
        )  # fmt: skip


def test_a_claim_leaves_runs_not_due_of_other_queues_and_not_claimable(engine: Engine) -> None:
    now = engine.clock.now()
    q = uid("q")
    running(engine, queue=q)  # leased already
    (due,) = make(engine, queue=q, due_at=now)
    make(engine, queue=q, due_at=now + timedelta(seconds=1))  # not due yet
    make(engine, queue=uid("other"))  # another queue
    (held,) = make(engine, queue=q)
    apply(engine, [holding(engine, held)])
    with engine.store.write() as tx:
        batch = tx.runs_claim(claim_params(engine, now=now, queues=[q]))
        assert [r.job_run_id for r in batch.runs()] == [due.job_run_id]
        assert not batch.more
        empty = tx.runs_claim(claim_params(engine, now=now, queues=[q]))
        assert (empty.count, empty.runs(), empty.more) == (0, [], False)


def test_a_claim_takes_several_queues_and_a_queue_named_twice_once(engine: Engine) -> None:
    a, b = uid("qa"), uid("qb")
    mine = make(engine, 2, queue=a) + make(engine, queue=b)
    taken = claim(engine, queues=[a, b, a], limit=10)
    assert sorted(r.job_run_id for r in taken) == sorted(r.job_run_id for r in mine)


def test_a_claim_starts_the_first_start_now_runs_and_dispatches_the_rest(engine: Engine) -> None:
    q = uid("q")
    now = engine.clock.now()
    made = make(engine, 3, queue=q, due_at=now - timedelta(seconds=1))
    with engine.store.write() as tx:
        batch = tx.runs_claim(claim_params(engine, queues=[q], start_now=2, now=now))
    runs = batch.runs()
    assert sorted(r.status for r in runs) == [S.DISPATCHED, S.RUNNING, S.RUNNING]
    for run in runs:
        if run.status is S.RUNNING:
            assert (run.attempt, run.started_at) == (1, now)
            assert _events(engine, run.job_run_id) == ["job_started"]
            with engine.store.read() as tx:
                ts = tx.run_transitions(run.job_run_id)
            assert [(t.to_status, t.attempt, t.reason) for t in ts[-2:]] == [
                (S.DISPATCHED, 0, "claimed"),
                (S.RUNNING, 1, "started"),
            ]
        else:
            assert (run.attempt, run.started_at) == (0, None)
            assert _events(engine, run.job_run_id) == []
    assert {r.job_run_id for r in runs} == {r.job_run_id for r in made}


def test_a_run_with_no_attempt_left_is_claimed_but_not_started(engine: Engine) -> None:
    q = uid("q")
    (spent,) = make(engine, queue=q, attempt=1, max_attempts=1)
    (run,) = claim(engine, queues=[q], start_now=1)
    assert (run.job_run_id, run.status, run.attempt) == (spent.job_run_id, S.DISPATCHED, 1)


def test_a_claim_leaves_the_runs_of_excluded_digests(engine: Engine) -> None:
    q = uid("q")
    make(engine, queue=q, job_id="waits-for-dependency")
    (free,) = make(engine, queue=q, job_id="free")
    with engine.store.write() as tx:
        batch = tx.runs_claim(
            claim_params(engine, queues=[q], exclude_digests=frozenset({digest_of("waits-for-dependency")}))
        )
    assert [r.job_run_id for r in batch.runs()] == [free.job_run_id]


def test_runs_the_admission_rule_refuses_are_handed_back_unclaimed(engine: Engine) -> None:
    q = uid("q")
    (refused,) = make(engine, queue=q, job_id="not-approved", due_at=T0)
    (admitted,) = make(engine, queue=q, job_id="approved", due_at=T0 + timedelta(seconds=1))
    verdict = Verdict(False, Code.NOT_APPROVED, "approval", "not approved")
    seen: list[Sequence[Any]] = []

    def admit(candidates: Sequence[Any]) -> Mapping[str, Any]:
        seen.append(candidates)
        return {c.job_run_id: verdict for c in candidates if c.job_definition_id == "not-approved"}

    with engine.store.write() as tx:
        batch = tx.runs_claim(claim_params(engine, queues=[q], admit=admit))
    assert [c.job_run_id for c in seen[0]] == [refused.job_run_id, admitted.job_run_id]
    assert [(c.job_run_id, v) for c, v in batch.refused] == [(refused.job_run_id, verdict)]
    assert [r.job_run_id for r in batch.runs()] == [admitted.job_run_id]
    assert get(engine, refused.job_run_id).status is S.SCHEDULED


def test_a_definitions_concurrency_limit_is_kept_without_blocking_the_runs_behind(engine: Engine) -> None:
    q = uid("q")
    limited = make(engine, 3, queue=q, job_id="limited", due_at=T0, limits={"concurrency_limit": 1})
    (other,) = make(engine, queue=q, job_id="other", due_at=T0 + timedelta(seconds=1))
    with engine.store.write() as tx:
        first = tx.runs_claim(claim_params(engine, queues=[q], limit=2))
    # The batch is cut short by the limit and says so: the next claim tops it up.
    assert first.count == 1 and first.more
    assert first.runs()[0].job_run_id in {r.job_run_id for r in limited}
    # The limited definition's runs are no longer candidates while one is leased: the run behind
    # them is not blocked.
    assert [r.job_run_id for r in claim(engine, queues=[q], limit=2)] == [other.job_run_id]
    assert claim(engine, queues=[q], limit=5) == []


def test_a_definitions_rate_limit_admits_its_burst_per_instant(engine: Engine) -> None:
    q = uid("q")
    now = engine.clock.now()
    make(engine, 3, queue=q, due_at=T0, limits={"rate_limit_per_second": 1.0})
    assert len(claim(engine, queues=[q], now=now)) == 1
    assert claim(engine, queues=[q], now=now) == []
    assert len(claim(engine, queues=[q], now=now + timedelta(seconds=1))) == 1


def test_a_queue_rate_limits_the_claims_of_that_queue_only(engine: Engine) -> None:
    slow, fast = uid("slow"), uid("fast")
    make(engine, 3, queue=slow)
    make(engine, 3, queue=fast)
    now = engine.clock.now()
    rates = {slow: (1.0, 1)}
    taken = claim(engine, queues=[slow, fast], now=now, queue_rates=rates)
    assert sorted(r.queue for r in taken) == [fast] * 3 + [slow]
    assert claim(engine, queues=[slow], now=now, queue_rates=rates) == []


def test_concurrent_claims_never_take_the_same_run(engine: Engine) -> None:
    q = uid("q")
    made = make(engine, 40, queue=q)
    results: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def worker(i: int) -> None:
        start.wait(10)
        for _ in range(40):
            runs = claim(engine, queues=[q], limit=3, worker=f"w{i}")
            if not runs:
                return
            results[i] += [r.job_run_id for r in runs]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not set(results[0]) & set(results[1])
    assert sorted(results[0] + results[1]) == sorted(r.job_run_id for r in made)


# ---------------------------------------------------------------------------- run changes


def test_runs_apply_returns_the_changes_that_matched_in_input_order(engine: Engine) -> None:
    a, b = running(engine, 2)
    (waiting,) = make(engine)
    stale = waiting.evolve(status=S.DISPATCHED, lease_token=1)  # not what the store holds
    changes = [completion(engine, b), cancelling(engine, stale), completion(engine, a)]
    done = apply(engine, changes)
    assert done == [changes[0], changes[2]]
    assert get(engine, a.job_run_id).status is get(engine, b.job_run_id).status is S.COMPLETED
    assert get(engine, waiting.job_run_id) == waiting
    assert apply(engine, []) == []


def test_a_change_that_does_not_match_writes_nothing(engine: Engine) -> None:
    (run,) = running(engine)
    fenced_out = completion(engine, run.evolve(lease_token=run.lease_token + 1))
    before = (count(engine, "run_transitions"), count(engine, "outbox"), get(engine, run.job_run_id))
    assert apply(engine, [fenced_out]) == []
    assert (count(engine, "run_transitions"), count(engine, "outbox"), get(engine, run.job_run_id)) == before
    # A change that was made once does not match a second time either.
    change = completion(engine, run)
    assert apply(engine, [change]) == [change]
    assert apply(engine, [change]) == []


def test_a_change_writes_its_transition_values_events_and_dead_letter(engine: Engine) -> None:
    (run,) = make(engine)
    change = dead_lettering(engine, run)
    assert apply(engine, [change]) == [change]
    stored = get(engine, run.job_run_id)
    ended = change.values["ended_at"]
    assert (stored.status, stored.error_code, stored.ended_at) == (S.DEAD_LETTERED, "QUEUE_TIMEOUT", ended)
    with engine.store.read() as tx:
        assert tx.run_transitions(run.job_run_id)[-1] == change.transition
        letter = tx.dead_letter_open_for(run.job_run_id)
    assert change.dead_letter is not None and letter == change.dead_letter
    assert _events(engine, run.job_run_id) == [kind.value for kind, _ in change.events]


def test_a_worker_change_moves_the_attempt_and_the_lease_with_the_status(engine: Engine) -> None:
    (run,) = dispatched(engine)
    start = transitions.started(run, worker_id=WORKER, now=engine.clock.now())
    assert apply(engine, [start]) == [start]
    started = get(engine, run.job_run_id)
    assert (started.status, started.attempt, started.lease_owner, started.lease_token) == (
        S.RUNNING, 1, WORKER, run.lease_token,
    )  # fmt: skip
    retry = failure(engine, started)
    assert apply(engine, [retry]) == [retry]
    waiting = get(engine, run.job_run_id)
    assert (waiting.status, waiting.attempt, waiting.lease_owner, waiting.lease_expires_at) == (
        S.RETRY_WAIT, 1, None, None,
    )  # fmt: skip
    assert waiting.next_retry_at == waiting.due_at == retry.values["next_retry_at"]


def test_a_revoked_lease_fences_its_former_holder_out(engine: Engine) -> None:
    (run,) = dispatched(engine)
    cancel = cancelling(engine, run)  # by a person: the claim's lease is revoked
    assert apply(engine, [cancel]) == [cancel]
    stored = get(engine, run.job_run_id)
    assert (stored.status, stored.lease_token, stored.lease_owner) == (S.CANCELLED, run.lease_token + 1, None)
    start = transitions.started(run, worker_id=WORKER, now=engine.clock.now())
    assert apply(engine, [start]) == []


def test_the_rescuers_release_applies_only_while_the_lease_is_expired(engine: Engine) -> None:
    (run,) = dispatched(engine)
    assert run.lease_expires_at is not None
    before_expiry = run.lease_expires_at - timedelta(seconds=1)
    after_expiry = run.lease_expires_at + timedelta(seconds=1)

    def release(at: Any) -> transitions.RunChange:
        return transitions.released(
            run, actor="rescuer", now=at, reason=TransitionReason.LEASE_EXPIRED, lease_expired_before=at
        )

    assert apply(engine, [release(before_expiry)]) == []
    change = release(after_expiry)
    assert apply(engine, [change]) == [change]
    stored = get(engine, run.job_run_id)
    assert (stored.status, stored.lease_owner, stored.lease_token, stored.due_at) == (
        S.SCHEDULED, None, run.lease_token + 1, after_expiry,
    )  # fmt: skip


def test_prepared_changes_apply_as_the_changes_would(engine: Engine) -> None:
    a, b = running(engine, 2)
    changes = [completion(engine, a), completion(engine, b.evolve(lease_token=99))]
    prepared = engine.store.prepare_changes(changes)
    with engine.store.write() as tx:
        done = tx.runs_apply(prepared)
    assert done == [changes[0]]
    assert (get(engine, a.job_run_id).status, get(engine, b.job_run_id).status) == (S.COMPLETED, S.RUNNING)


# ---------------------------------------------------------------------------- leases


def test_leases_renew_extends_only_the_leases_its_worker_still_holds(engine: Engine) -> None:
    now = engine.clock.now()
    with engine.store.write() as tx:
        tx.worker_heartbeat(WorkerBeat(WORKER, "host", 1, 4, ("default",), now))
    mine, moved = running(engine, 2)
    (theirs,) = running(engine, worker="w2")
    (done,) = running(engine)
    apply(engine, [completion(engine, done)])
    later = now + timedelta(minutes=5)
    leases = [
        (mine.job_run_id, mine.lease_token),
        (moved.job_run_id, moved.lease_token + 1),
        (theirs.job_run_id, theirs.lease_token),
        (done.job_run_id, done.lease_token),
    ]
    with engine.store.write() as tx:
        held = tx.leases_renew(LeaseRenew(WORKER, tuple(leases), later))
        assert tx.leases_renew(LeaseRenew(WORKER, (), later)) == set()
    assert held == {mine.job_run_id}
    assert get(engine, mine.job_run_id).lease_expires_at == later
    assert get(engine, moved.job_run_id).lease_expires_at == moved.lease_expires_at
    assert get(engine, theirs.job_run_id).lease_expires_at == theirs.lease_expires_at
    with engine.store.read() as tx:
        assert tx.metrics.lease_renewals(now) == {WORKER: 1}


# ---------------------------------------------------------------------------- the rescuer's reads


def test_runs_claimable_exists_answers_for_due_claimable_runs_of_the_queues(engine: Engine) -> None:
    q = uid("q")
    now = engine.clock.now()
    with engine.store.read() as tx:
        assert not tx.runs_claimable_exists([q], now)
    make(engine, queue=q, job_id="a", due_at=now + timedelta(minutes=1))
    with engine.store.read() as tx:
        assert not tx.runs_claimable_exists([q], now)
        assert tx.runs_claimable_exists([q, "other"], now + timedelta(minutes=1))
        assert not tx.runs_claimable_exists(["other"], now + timedelta(minutes=1))
        assert not tx.runs_claimable_exists([q], now + timedelta(minutes=1), [digest_of("a")])
        assert tx.runs_claimable_exists([q], now + timedelta(minutes=1), [digest_of("b")])


def test_runs_waiting_on_lists_the_longest_waiting_runs_of_the_digests(engine: Engine) -> None:
    (old,) = make(engine, job_id="a", due_at=T0)
    (newer,) = make(engine, job_id="a", due_at=T0 + timedelta(minutes=1))
    make(engine, job_id="a", due_at=T0 + timedelta(minutes=5))  # not due before the bound
    make(engine, job_id="b", due_at=T0)  # another definition
    running(engine, job_id="a")  # not waiting
    with engine.store.read() as tx:
        found = tx.runs_waiting_on([digest_of("a")], T0 + timedelta(minutes=1), 10)
        first = tx.runs_waiting_on([digest_of("a")], T0 + timedelta(minutes=1), 1)
        assert tx.runs_waiting_on([digest_of("c")], T0 + timedelta(days=1), 10) == []
    assert [r.job_run_id for r in found] == [old.job_run_id, newer.job_run_id]
    assert [r.job_run_id for r in first] == [old.job_run_id]


def test_runs_lease_expired_lists_leased_runs_past_their_lease_soonest_first(engine: Engine) -> None:
    now = engine.clock.now()
    (short,) = dispatched(engine, lease=timedelta(seconds=1))
    (longer,) = running(engine)
    (done,) = running(engine)
    apply(engine, [completion(engine, done)])
    with engine.store.read() as tx:
        assert tx.runs_lease_expired(now, 10) == []
        soon = tx.runs_lease_expired(now + timedelta(seconds=10), 10)
        both = tx.runs_lease_expired(now + LEASE + timedelta(seconds=10), 10)
        one = tx.runs_lease_expired(now + LEASE + timedelta(seconds=10), 1)
    assert [r.job_run_id for r in soon] == [short.job_run_id]
    assert [r.job_run_id for r in both] == [short.job_run_id, longer.job_run_id]
    assert [r.job_run_id for r in one] == [short.job_run_id]


def test_runs_over_age_lists_the_open_runs_created_before_the_bound(engine: Engine) -> None:
    (waiting,) = make(engine, at=T0)
    (leased,) = running(engine, at=T0)
    (held,) = make(engine, at=T0)
    apply(engine, [holding(engine, held)])
    make(engine, at=T0 + timedelta(hours=1))  # young enough
    (done,) = running(engine, at=T0)
    apply(engine, [completion(engine, done)])
    with engine.store.read() as tx:
        old = tx.runs_over_age(T0 + timedelta(minutes=1), 10)
        assert tx.runs_over_age(T0, 10) == []
    assert sorted(r.job_run_id for r in old) == sorted([waiting.job_run_id, leased.job_run_id, held.job_run_id])


def test_runs_queue_expired_lists_waiting_runs_past_their_queue_deadline(engine: Engine) -> None:
    (expiring,) = make(engine, queue_deadline_at=T0 + timedelta(seconds=5))
    make(engine, queue_deadline_at=T0 + timedelta(hours=1))
    make(engine)  # no queue timeout
    far = engine.clock.now() + timedelta(days=1)
    (claimed,) = dispatched(engine, queue_deadline_at=far)  # claimed: no longer waiting in the queue
    with engine.store.read() as tx:
        assert tx.runs_queue_expired(T0, 10) == []
        found = tx.runs_queue_expired(T0 + timedelta(seconds=5), 10)
        late = tx.runs_queue_expired(far, 10)
        assert len(tx.runs_queue_expired(far, 1)) == 1
    assert [r.job_run_id for r in found] == [expiring.job_run_id]
    assert claimed.job_run_id not in {r.job_run_id for r in late} and len(late) == 2


def test_runs_held_lists_held_runs_longest_held_first(engine: Engine) -> None:
    first, second, _ = make(engine, 3)
    apply(engine, [holding(engine, first)])
    apply(engine, [holding(engine, second, Code.TRUST_GATE)])
    with engine.store.read() as tx:
        held = tx.runs_held(10)
        assert [r.job_run_id for r in tx.runs_held(1)] == [first.job_run_id]
    assert [(r.job_run_id, r.status, r.hold_reason) for r in held] == [
        (first.job_run_id, S.HELD, "safe_mode_active"),
        (second.job_run_id, S.HELD, "trust_gate_refused"),
    ]
    release = transitions.hold_released(held[0], actor="gate", now=engine.clock.now())
    assert apply(engine, [release]) == [release]
    released = get(engine, first.job_run_id)
    assert (released.status, released.hold_reason, released.held_at) == (S.SCHEDULED, None, None)


# ---------------------------------------------------------------------------- gates


def _approve(tx: StoreTx, tenant: str, job_id: str, version: int = 1) -> Approval:
    a = Approval(tenant, job_id, digest_of(job_id, version), version, "admin", T0, None, None, None)
    return tx.approval_put(a)


def _define(tx: StoreTx, tenant: str, job_id: str, status: DefinitionStatus = DefinitionStatus.ACTIVE) -> None:
    content = {"job_definition_id": job_id}
    tx.definition_put(
        DefinitionPut(tenant, job_id, digest_of(job_id), content, job_id, "MAINTENANCE_JOB", status, None, T0)
    )


def test_admission_facts_reads_approvals_lifecycles_and_safe_mode_of_the_candidates(engine: Engine) -> None:
    with engine.store.write() as tx:
        _define(tx, "default", "a")
        _define(tx, "default", "b", DefinitionStatus.SUSPENDED)
        _define(tx, "tenant-b", "a")
        _approve(tx, "default", "a")
        newest = _approve(tx, "default", "a")
        _approve(tx, "default", "a", version=2)
        revoked = _approve(tx, "default", "b")
        tx.approval_revoke("default", "b", revoked.digest, "admin", T0)
        _approve(tx, "default", "c")  # not among the candidates
        period = tx.safe_mode_activate("tenant-b", "ada", "incident", T0)
    assert period is not None
    a, b = make(engine, job_id="a"), make(engine, job_id="b")
    foreign = make(engine, job_id="a", tenant="tenant-b")
    with engine.store.write() as tx:
        facts = tx.admission_facts(a + b + foreign)
        assert tx.admission_facts([]).approvals == {}
    assert facts.approvals == {("default", "a", 1): newest.approval_id, ("default", "a", 2): newest.approval_id + 1}
    assert facts.statuses == {("default", "a"): "active", ("default", "b"): "suspended", ("tenant-b", "a"): "active"}
    assert facts.safe_modes == {"tenant-b": period.activation}


def _shared_then_read(tx: StoreTx) -> None:
    """The shared side, held from the transaction's next statement on (it travels with it on
    PostgreSQL: ``driver.owe``), which here is a read touching no row."""
    tx.gates_shared()
    tx.outbox_backlog()


def test_a_gate_closing_write_and_an_admitting_claim_wait_for_each_other(engine: Engine) -> None:
    other_thread_waits(engine.store, lambda tx: tx.gates_closing(), _shared_then_read)
    other_thread_waits(engine.store, _shared_then_read, lambda tx: tx.gates_closing())


def test_gates_can_be_taken_again_in_their_own_transaction(engine: Engine) -> None:
    (run,) = make(engine)
    with engine.store.write() as tx:
        tx.gates_closing()
        tx.gates_shared()
        tx.gates_shared()  # once per transaction: a second call is free
        tx.gates_closing()
        assert tx.runs_claim(claim_params(engine, admit=lambda c: {}, queues=[run.queue])).count == 1
