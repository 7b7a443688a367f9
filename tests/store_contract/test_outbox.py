"""The transactional outbox and run retention, on both backends.

The contract: events committed with a change (or appended on their own) are pending, oldest first,
until the publisher marks the batch it delivered (always the oldest pending ones); the backlog and
summary count what is still undelivered. Retention deletes only finished runs whose every event
was delivered, with no open dead letter and not part of a running workflow, older than the bound,
and leaves nothing of them behind but their seal's tombstone.
"""

from __future__ import annotations

from datetime import timedelta

from tests.helpers import count
from tests.store_contract.support import (
    T0,
    complete,
    dead_letter,
    get,
    make,
    running,
)

from jobgate.core.events import EventType
from jobgate.core.records import WorkflowRecord
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine


def _deliver_all(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.outbox_mark_delivered([e.event_id for e in tx.outbox_pending(100_000)], engine.clock.now())


def test_appended_events_are_pending_oldest_first_as_written(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.outbox_append(
            [
                ("TGJOBRUN-1", "tenant-a", (EventType.JOB_CANCELLED, {"n": 1, "text": "é"})),
                (None, "tenant-b", (EventType.SAFE_MODE_ACTIVATION, {"n": 2})),
            ],
            T0,
        )
        tx.outbox_append([], T0)
        tx.outbox_append([(None, "tenant-a", (EventType.DEPENDENCY_RECOVERED, {"n": 3}))], T0 + timedelta(seconds=1))
    with engine.store.read() as tx:
        pending = tx.outbox_pending(10)
        assert [e.event_id for e in tx.outbox_pending(2)] == [e.event_id for e in pending[:2]]
    assert [(e.job_run_id, e.tenant_id, e.event_type, e.payload) for e in pending] == [
        ("TGJOBRUN-1", "tenant-a", "job_cancelled", {"n": 1, "text": "é"}),
        (None, "tenant-b", "safe_mode_activation", {"n": 2}),
        (None, "tenant-a", "dependency_recovered", {"n": 3}),
    ]
    assert [e.created_at for e in pending] == [T0, T0, T0 + timedelta(seconds=1)]
    assert pending[0].event_id < pending[1].event_id < pending[2].event_id


def test_a_change_commits_its_events_to_the_outbox(engine: Engine) -> None:
    done = complete(engine)
    with engine.store.read() as tx:
        pending = tx.outbox_pending(10)
    assert [(e.job_run_id, e.event_type) for e in pending] == [
        (done.job_run_id, "job_started"),
        (done.job_run_id, "job_completed"),
    ]


def test_marked_events_are_delivered_and_leave_the_backlog(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.outbox_append([(None, "t", (EventType.JOB_CANCELLED, {"n": i})) for i in range(5)], T0)
    with engine.store.write() as tx:
        assert tx.outbox_backlog() == 5
        first = tx.outbox_pending(2)
        tx.outbox_mark_delivered([e.event_id for e in first], T0)
        tx.outbox_mark_delivered([], T0)
        rest = tx.outbox_pending(10)
        assert tx.outbox_backlog() == 3
        tx.outbox_mark_delivered([e.event_id for e in first], T0)  # again: nothing changes
        assert tx.outbox_backlog() == 3
    assert [e.payload["n"] for e in rest] == [2, 3, 4]
    _deliver_all(engine)
    with engine.store.read() as tx:
        assert tx.outbox_pending(10) == [] and tx.outbox_backlog() == 0


def test_outbox_summary_counts_undelivered_events_per_tenant_with_the_oldest(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.outbox_append([(None, "tenant-a", (EventType.JOB_CANCELLED, {}))], T0)
        tx.outbox_append([(None, "tenant-b", (EventType.JOB_CANCELLED, {}))], T0 + timedelta(seconds=1))
        tx.outbox_append([(None, "tenant-a", (EventType.JOB_CANCELLED, {}))], T0 + timedelta(seconds=2))
    with engine.store.read() as tx:
        assert tx.outbox_summary() == (3, T0)
        assert tx.outbox_summary("tenant-a") == (2, T0)
        assert tx.outbox_summary("tenant-b") == (1, T0 + timedelta(seconds=1))
        assert tx.outbox_summary("tenant-c") == (0, None)
    with engine.store.write() as tx:
        tx.outbox_mark_delivered([tx.outbox_pending(1)[0].event_id], T0)
    with engine.store.read() as tx:
        assert tx.outbox_summary("tenant-a") == (1, T0 + timedelta(seconds=2))


def test_retention_deletes_finished_runs_whose_events_were_delivered(engine: Engine) -> None:
    done = complete(engine, slot="window-1")
    (waiting,) = make(engine)
    (busy,) = running(engine)
    later = engine.clock.now() + timedelta(days=1)
    with engine.store.read() as tx:
        assert tx.runs_retirable_count("default", later) == 0  # its events are not delivered yet
    _deliver_all(engine)
    with engine.store.write() as tx:
        assert tx.runs_retirable_count("default", later) == 1
        assert tx.runs_retirable_count("default", done.ended_at or later) == 0  # ended at the bound, not before
        assert tx.runs_retire("default", later, 10, now=later) == [done.job_run_id]
        assert tx.runs_retire("default", later, 10, now=later) == []
        assert tx.run_get(done.job_run_id) is None
        assert tx.run_transitions(done.job_run_id) == []
        assert tx.runs_retirable_count("default", later) == 0
        # what made it its trigger's is remembered: its key (and slot) find it, retired
        (remembered,) = tx.runs_retired_holders([done]).values()
        assert (remembered.job_run_id, remembered.status, remembered.slot) == (done.job_run_id, "COMPLETED", done.slot)
        assert remembered.created_at == done.created_at and remembered.ended_at == done.ended_at
        assert remembered.retired_at == later  # on the caller's clock, not the host's
        assert tx.runs_retired_of("default", [done.job_run_id, waiting.job_run_id]) == [remembered]
        assert tx.runs_retired_of("tenant-b", [done.job_run_id]) == []  # another tenant's: none
        assert tx.runs_retired_holders([waiting]) == {} and tx.runs_retired_holders([]) == {}
    with engine.store.read() as tx:  # asked as a submission asks: its holders, then retention's
        same_key = done.evolve(job_run_id="other", slot=None)
        same_slot = done.evolve(job_run_id="other", idempotency_key="another-key", slot="window-1")
        for candidate in (same_key, same_slot):
            assert tx.run_holders([candidate]) == {}
            (found,) = tx.runs_retired_holders([candidate]).values()
            assert found.job_run_id == done.job_run_id
        assert tx.run_holders([waiting]) == {waiting.idempotency_key: waiting}
        assert tx.runs_retired_holders([waiting]) == {}
        created = done.created_at
        assert [g.job_run_id for g in tx.runs_retired_between("default", created, later)] == [done.job_run_id]
        assert tx.runs_retired_between("default", created, later, done.job_definition_id) == [remembered]
        assert tx.runs_retired_between("default", later, later + timedelta(days=1)) == []
        assert tx.runs_retired_between("tenant-other", created, later) == []
    assert get(engine, waiting.job_run_id).status is RunStatus.SCHEDULED
    assert get(engine, busy.job_run_id).status is RunStatus.RUNNING
    assert count(engine, "outbox", f"job_run_id = '{done.job_run_id}'") == 0


def test_retention_keeps_open_dead_letters_other_tenants_and_active_workflow_steps(engine: Engine) -> None:
    lettered = dead_letter(engine)
    foreign = complete(engine, tenant="tenant-b")
    workflow = WorkflowRecord(
        "wf-1", "default", "wf-key", "flow", 1, "sha256:f", "MAINTENANCE_JOB", RunStatus.RUNNING, "forward",
        {}, {}, {}, "snap-1", "sha256:c", None, T0,
    )  # fmt: skip
    with engine.store.write() as tx:
        assert tx.workflow_insert(workflow, [], [])
    step = complete(engine, workflow_run_id="wf-1")
    _deliver_all(engine)
    later = engine.clock.now() + timedelta(days=1)
    with engine.store.write() as tx:
        assert tx.runs_retirable_count("default", later) == 0
        assert tx.runs_retire("default", later, 10, now=later) == []
        letter = tx.dead_letter_open_for(lettered.job_run_id)
        assert letter is not None
        tx.dead_letter_resolve(letter.dead_letter_id, "discarded", engine.clock.now())
        assert tx.runs_retirable_count("default", later) == 1
        assert tx.runs_retire("default", later, 10, now=later) == [lettered.job_run_id]
        assert tx.dead_letters_list("default", open_only=False) == []  # its resolved letter goes with it
    assert get(engine, step.job_run_id) and get(engine, foreign.job_run_id)
    with engine.store.write() as tx:
        assert tx.runs_retire("tenant-b", later, 10, now=later) == [foreign.job_run_id]


def test_retention_takes_at_most_its_limit_per_call(engine: Engine) -> None:
    for _ in range(3):
        complete(engine)
    _deliver_all(engine)
    later = engine.clock.now() + timedelta(days=1)
    with engine.store.write() as tx:
        first = tx.runs_retire("default", later, 2, now=later)
        second = tx.runs_retire("default", later, 2, now=later)
    assert len(first) == 2 and len(second) == 1 and not set(first) & set(second)
