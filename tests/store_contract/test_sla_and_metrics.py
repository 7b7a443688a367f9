"""The SLA monitor's reads and writes (``tx.sla``) and the grouped counts behind ``/metrics``
(``tx.metrics``), on both backends.

The contract: the monitor's reads name exactly the open subjects whose deadline may have come
and the transitions that ended something, paged and bounded as asked; its cursors only move
forward while its marks move either way; each breach is recorded once per (tenant, subject, kind,
phase); a workflow is escalated by compare-and-set on its version. The metrics count what the
tables hold, grouped by tenant and job class, for one tenant or all.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text
from tests.store_contract.support import (
    T0,
    apply,
    claim,
    completion,
    creation,
    dead_letter,
    failure,
    get,
    holding,
    make,
    new_run,
    running,
    uid,
)

from jobgate.core import transitions
from jobgate.core.canonical import digest
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.encoding import to_us
from jobgate.core.models import DefinitionStatus, JobClass
from jobgate.core.policies import RetryPolicy, RetryStrategy
from jobgate.core.records import (
    BreachRecord,
    DefinitionPolicies,
    StepRecord,
    WorkflowRecord,
    WorkflowTransition,
    WorkflowUpdate,
)
from jobgate.core.settle import settle_attempt
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.store.base import DefinitionPut, WorkerBeat
from jobgate.store.sqlstore import StoreTx
from jobgate.testing import connection

S = RunStatus
HOUR = timedelta(hours=1)


def _define(tx: StoreTx, job_id: str, content: dict[str, Any], tenant: str = "default") -> None:
    tx.definition_put(
        DefinitionPut(tenant, job_id, digest(content), content, job_id, "MAINTENANCE_JOB", DefinitionStatus.ACTIVE,
                      None, T0)
    )  # fmt: skip


def _workflow(
    wid: str, *, job_id: str = "flow", at: Any = T0, status: RunStatus = S.RUNNING, **kw: Any
) -> WorkflowRecord:
    return WorkflowRecord(
        wid, kw.pop("tenant", "default"), f"key-{wid}", job_id, 1, "sha256:f", "MAINTENANCE_JOB", status, "forward",
        {}, {}, {}, "snap-1", "sha256:c", None, at, **kw,
    )  # fmt: skip


def _breach(subject: str, *, kind: str = "sla_deadline", phase: str = "breach", tenant: str = "default",
            at: Any = T0, escalate: bool = False, job_id: str = "job-a") -> BreachRecord:  # fmt: skip
    return BreachRecord(
        f"BR-{tenant}-{subject}-{kind}-{phase}", tenant, "run", subject, "MAINTENANCE_JOB", job_id, "ECO-1", kind,
        phase, "sla-1h", at - HOUR, at, "critical", escalate,
    )  # fmt: skip


# ---------------------------------------------------------------------------- definitions


def test_definition_keys_and_policies_read_every_stored_version(engine: Engine) -> None:
    steps = {"workflow": {"steps": [{"id": "a"}, {"id": "b", "timeout_policy": "short"}]}}
    with engine.store.write() as tx:
        _define(tx, "a", {"sla_policy": "sla-1h", "timeout_policy": "t-5m"})
        _define(tx, "a", {"sla_policy": "sla-2h"})
        _define(tx, "flow", steps, tenant="tenant-b")
        _define(tx, "odd", {"sla_policy": 42})
    with engine.store.read() as tx:
        keys = tx.sla.definition_keys()
        policies = tx.sla.definition_policies([("default", "a", 1), ("default", "a", 2), ("tenant-b", "flow", 1),
                                               ("default", "odd", 1), ("default", "missing", 1)])  # fmt: skip
        assert tx.sla.definition_policies([]) == []
    assert sorted(keys) == [("default", "a", 1), ("default", "a", 2), ("default", "odd", 1), ("tenant-b", "flow", 1)]
    assert sorted(policies, key=lambda p: (p.tenant_id, p.job_definition_id, p.version)) == [
        DefinitionPolicies("default", "a", 1, "sla-1h", "t-5m", False),
        DefinitionPolicies("default", "a", 2, "sla-2h", None, False),
        DefinitionPolicies("default", "odd", 1, None, None, False),
        DefinitionPolicies("tenant-b", "flow", 1, None, None, True),
    ]


# ---------------------------------------------------------------------------- open subjects


def test_open_runs_due_finds_waiting_runs_past_their_queue_deadline_or_old_enough_for_a_policy(
    engine: Engine,
) -> None:
    now = T0 + HOUR
    (queue_late,) = make(engine, job_id="plain", queue_deadline_at=now)
    make(engine, job_id="plain", queue_deadline_at=now + timedelta(seconds=1))
    old = make(engine, 2, job_id="sla", at=T0)
    make(engine, job_id="sla", at=T0 + timedelta(seconds=1))  # too young for the policy
    running(engine, job_id="sla", at=T0)  # leased: the other arm
    groups = [(["sla"], to_us(T0))]
    with engine.store.read() as tx:
        found = tx.sla.open_runs_due(waiting=True, now=now, sla_groups=groups, after=None, limit=10)
        first = tx.sla.open_runs_due(waiting=True, now=now, sla_groups=groups, after=None, limit=1)
        page_key = (to_us(first[0].created_at), first[0].job_run_id)
        rest = tx.sla.open_runs_due(waiting=True, now=now, sla_groups=groups, after=page_key, limit=10)
        assert tx.sla.open_runs_due(waiting=True, now=T0, sla_groups=[], after=None, limit=10) == []
    expected = sorted([*old, queue_late], key=lambda r: (r.created_at, r.job_run_id))
    assert [r.job_run_id for r in found] == [r.job_run_id for r in expected]
    assert [r.job_run_id for r in first + rest] == [r.job_run_id for r in expected]


def test_open_runs_due_finds_leased_runs_past_their_execution_timeout_or_old_enough(engine: Engine) -> None:
    timeout = timedelta(minutes=5)
    (timed,) = running(engine, job_id="plain", execution_timeout=timeout)
    running(engine, job_id="plain")  # no timeout, no policy
    (old,) = running(engine, job_id="sla", at=T0)
    make(engine, job_id="sla", at=T0)  # waiting: the other arm
    assert timed.started_at is not None
    groups = [(["sla"], to_us(T0))]
    with engine.store.read() as tx:
        before = tx.sla.open_runs_due(waiting=False, now=timed.started_at, sla_groups=groups, after=None, limit=10)
        after = tx.sla.open_runs_due(
            waiting=False, now=timed.started_at + timeout, sla_groups=groups, after=None, limit=10
        )
    assert [r.job_run_id for r in before] == [old.job_run_id]
    assert {r.job_run_id for r in after} == {old.job_run_id, timed.job_run_id}


def test_attempt_starts_tells_when_each_attempt_started(engine: Engine) -> None:
    (run,) = running(engine)
    assert apply(engine, [failure(engine, run)])
    (again,) = claim(engine, queues=[run.queue], start_now=1, now=get(engine, run.job_run_id).due_at + HOUR)
    with engine.store.read() as tx:
        starts = tx.sla.attempt_starts({(run.job_run_id, 1), (run.job_run_id, 2), (run.job_run_id, 3)})
        assert tx.sla.attempt_starts(set()) == {}
    assert starts == {(run.job_run_id, 1): run.started_at, (run.job_run_id, 2): again.due_at + HOUR}


def test_open_workflows_due_finds_active_workflows_old_enough_for_their_policy(engine: Engine) -> None:
    with engine.store.write() as tx:
        for w in (
            _workflow("old", at=T0),
            _workflow("older", at=T0 - HOUR),
            _workflow("young", at=T0 + timedelta(seconds=1)),
            _workflow("ended", at=T0, status=S.COMPLETED),
            _workflow("no-policy", job_id="other", at=T0),
        ):
            tx.workflow_insert(w, [], [])
    groups = [(["flow"], to_us(T0))]
    with engine.store.read() as tx:
        found = tx.sla.open_workflows_due(sla_groups=groups, after=None, limit=10)
        rest = tx.sla.open_workflows_due(sla_groups=groups, after=(to_us(T0 - HOUR), "older"), limit=10)
    assert [w.workflow_run_id for w in found] == ["older", "old"]
    assert [w.workflow_run_id for w in rest] == ["old"]
    assert (found[1].status, found[1].version, found[1].created_at) == (S.RUNNING, 0, T0)


# ---------------------------------------------------------------------------- ended subjects


def _transition_ids(engine: Engine, workflows: bool) -> set[int]:
    table = "workflow_transitions" if workflows else "run_transitions"
    with engine.store.read() as tx:
        return {int(r[0]) for r in connection(tx).execute(text(f"SELECT id FROM {table}"))}


def test_max_id_and_contiguous_through_bound_what_the_monitor_may_read(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert tx.sla.max_id(False) == 0 and tx.sla.max_id(True) == 0
        assert tx.sla.contiguous_through(workflows=False, after=0, upto=10) == 0
    make(engine, 2)
    try:  # a transaction that wrote transitions and rolled back (its ids may stay a gap)
        with engine.store.write() as tx:
            tx.runs_create([creation(new_run())])
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    make(engine, 2)
    with engine.store.write() as tx:
        tx.workflow_insert(_workflow("wf"), [], [WorkflowTransition("wf", 1, None, None, "CREATED", "c", "a", T0)])
    ids = _transition_ids(engine, False)
    with engine.store.read() as tx:
        head = tx.sla.max_id(False)
        h = tx.sla.contiguous_through(workflows=False, after=0, upto=head)
        assert tx.sla.contiguous_through(workflows=False, after=head, upto=head) == head
        assert tx.sla.max_id(True) == max(_transition_ids(engine, True))
        assert tx.sla.contiguous_through(workflows=True, after=0, upto=100) == tx.sla.max_id(True)
    assert head == max(ids)
    assert set(range(1, h + 1)) <= ids  # every id up to h is visible
    assert h == head or h + 1 not in ids  # and h stops at the first gap
    assert h >= 4  # the first two runs' transitions are all there


def test_runs_left_names_transitions_that_ended_something_of_runs_with_a_deadline(engine: Engine) -> None:
    with engine.store.read() as tx:
        start = tx.sla.max_id(False)
    (done,) = running(engine, job_id="sla")
    assert apply(engine, [completion(engine, done)])
    running(engine, job_id="plain")  # no deadline of any kind
    (timed,) = running(engine, job_id="plain", queue_deadline_at=engine.clock.now() + HOUR)
    with engine.store.read() as tx:
        head = tx.sla.max_id(False)
        left = tx.sla.runs_left(after=start, upto=head, sla_definitions=["sla"])
        assert tx.sla.runs_left(after=head, upto=head, sla_definitions=["sla"]) == []
    moves = [(run.job_run_id, t.from_status, t.to_status) for t, run in left]
    assert moves == [
        (done.job_run_id, S.SCHEDULED, S.DISPATCHED),
        (done.job_run_id, S.RUNNING, S.COMPLETED),
        (timed.job_run_id, S.SCHEDULED, S.DISPATCHED),
    ]
    assert [t.id for t, _ in left] == sorted(t.id for t, _ in left)
    ended, run = left[1]
    assert (ended.attempt, run.status) == (1, S.COMPLETED)


def test_workflows_left_names_the_transitions_that_ended_a_workflow(engine: Engine) -> None:
    with engine.store.write() as tx:
        for wid, job in (("wf-sla", "flow"), ("wf-other", "other")):
            tx.workflow_insert(_workflow(wid, job_id=job), [StepRecord(wid, "a", "default", 0, "RUNNING")], [])
            tx.workflow_apply(_ending(wid))
        head = tx.sla.max_id(True)
        left = tx.sla.workflows_left(after=0, upto=head, sla_definitions=["flow"])
    assert [(t.from_status, t.to_status, w.workflow_run_id) for t, w in left] == [(S.RUNNING, S.COMPLETED, "wf-sla")]


def _ending(wid: str) -> Any:
    at = T0 + HOUR
    return WorkflowUpdate(
        wid, "default", 0, {"status": S.COMPLETED, "ended_at": at}, [],
        [
            WorkflowTransition(wid, 1, "a", "RUNNING", "DONE", "step_done", "c", at),
            WorkflowTransition(wid, 2, None, "RUNNING", "COMPLETED", "done", "c", at),
        ],
    )  # fmt: skip


# ---------------------------------------------------------------------------- cursors and marks


def test_a_cursor_moves_only_forward_and_a_mark_either_way(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.sla.cursor_get("sla-monitor:runs") is None and tx.sla.mark_get("gap") is None
        tx.sla.cursor_put("sla-monitor:runs", 10, T0)
        tx.sla.cursor_put("sla-monitor:runs", 7, T0 + HOUR)  # a slower monitor: ignored
        assert tx.sla.cursor_get("sla-monitor:runs") == 10
        tx.sla.cursor_put("sla-monitor:runs", 12, T0 + HOUR)
        assert tx.sla.cursor_get("sla-monitor:runs") == 12
        tx.sla.mark_put("gap", 10, T0)
        assert tx.sla.mark_get("gap") == (10, T0)
        tx.sla.mark_put("gap", 3, T0 + HOUR)
        assert tx.sla.mark_get("gap") == (3, T0 + HOUR)
        assert tx.sla.cursor_get("gap") == 3  # one row, read either way
        assert tx.sla.mark_get("sla-monitor:runs") == (12, T0 + HOUR)


# ---------------------------------------------------------------------------- breaches


def test_each_breach_is_recorded_once_per_subject_kind_and_phase(engine: Engine) -> None:
    reminder, breach = _breach("R1", phase="reminder"), _breach("R1")
    with engine.store.write() as tx:
        assert tx.sla.breaches_insert([reminder, breach]) == {reminder.sla_breach_id, breach.sla_breach_id}
        again = BreachRecord(**{**breach.__dict__, "sla_breach_id": "BR-again", "severity": "low"})
        assert tx.sla.breaches_insert([again, _breach("R2")]) == {_breach("R2").sla_breach_id}
        assert not tx.sla.breach_insert(again)
        assert tx.sla.breach_insert(_breach("R1", kind="queue_timeout"))
        assert tx.sla.breach_insert(_breach("R1", tenant="tenant-b"))
        assert tx.sla.breaches_insert([]) == set()
        twins = [_breach("R3"), BreachRecord(**{**_breach("R3").__dict__, "sla_breach_id": "BR-twin"})]
        assert tx.sla.breaches_insert(twins) == {_breach("R3").sla_breach_id}  # twins in one call: the first
        of = tx.sla.breaches_of({("default", "R1"), ("default", "R9")})
    assert list(of) == [("default", "R1")]
    assert sorted((b.kind, b.phase, b.severity) for b in of[("default", "R1")]) == [
        ("queue_timeout", "breach", "critical"),
        ("sla_deadline", "breach", "critical"),
        ("sla_deadline", "reminder", "critical"),
    ]
    assert breach in of[("default", "R1")]


def test_breaches_mark_escalated_marks_those_requiring_escalation(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.sla.breaches_insert(
            [_breach("R1", escalate=True), _breach("R1", phase="reminder"), _breach("R2", escalate=True)]
        )
        tx.sla.breaches_mark_escalated("default", "R1")
        tx.sla.breaches_mark_escalated("tenant-b", "R2")
        marks = {(b.subject_id, b.phase): b.escalated for b in tx.sla.breaches_list("default")}
    assert marks == {("R1", "breach"): True, ("R1", "reminder"): False, ("R2", "breach"): False}


def test_breaches_list_is_newest_first_filters_and_pages(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.sla.breaches_insert([
            _breach("R1", at=T0), _breach("R2", at=T0 + HOUR, job_id="job-b"),
            _breach("R3", at=T0 + HOUR, kind="queue_timeout"), _breach("R4", at=T0, phase="reminder"),
            _breach("R5", tenant="tenant-b"),
        ])  # fmt: skip

    def subjects(**kw: Any) -> list[str]:
        with engine.store.read() as tx:
            return [b.subject_id for b in tx.sla.breaches_list("default", **kw)]

    assert subjects() == ["R3", "R2", "R4", "R1"]
    assert subjects(phase="reminder") == ["R4"]
    assert subjects(kind="queue_timeout") == ["R3"]
    assert subjects(subject_id="R2") == ["R2"]
    assert subjects(job_definition_ids=["job-b"]) == ["R2"]
    assert subjects(job_definition_ids=[]) == []
    assert subjects(limit=1) == ["R3"]
    assert subjects(before=(T0 + HOUR, _breach("R2").sla_breach_id)) == ["R4", "R1"]


def test_a_workflow_is_escalated_by_compare_and_set_on_its_version(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.workflow_insert(_workflow("wf"), [], [WorkflowTransition("wf", 1, None, None, "RUNNING", "c", "a", T0)])
        (subject,) = tx.sla.open_workflows_due(sla_groups=[(["flow"], to_us(T0))], after=None, limit=10)
        tx.workflow_bump("wf")  # it moved since the monitor read it
        assert not tx.sla.workflow_escalate(subject, now=T0 + HOUR, actor="sla", error_code="SLA", detail={})
        (subject,) = tx.sla.open_workflows_due(sla_groups=[(["flow"], to_us(T0))], after=None, limit=10)
        assert tx.sla.workflow_escalate(subject, now=T0 + HOUR, actor="sla", error_code="SLA", detail={"k": 1})
        assert not tx.sla.workflow_escalate(subject, now=T0 + HOUR, actor="sla", error_code="SLA", detail={})
        w = tx.workflow_get("wf")
        last = tx.workflow_transitions("wf")[-1]
    assert w is not None and (w.status, w.ended_at, w.error_code, w.version) == (S.ESCALATED, T0 + HOUR, "SLA", 2)
    assert (last.seq, last.step_id, last.from_status, last.to_status, last.actor, last.detail) == (
        2, None, "RUNNING", "ESCALATED", "sla", {"k": 1},
    )  # fmt: skip


# ---------------------------------------------------------------------------- metrics


def test_without_jit_turns_jit_off_for_the_transaction_only(engine: Engine) -> None:
    make(engine)
    with engine.store.read() as tx:
        tx.metrics.without_jit()
        assert len(tx.metrics.run_counts(None)) == 1
        if engine.store.dialect == "postgresql":
            assert connection(tx).execute(text("SELECT current_setting('jit')")).scalar() == "off"
    if engine.store.dialect == "postgresql":
        with engine.store.read() as tx:
            assert connection(tx).execute(text("SELECT current_setting('jit')")).scalar() != "off"


def test_run_counts_groups_runs_by_tenant_class_and_queue(engine: Engine) -> None:
    q = uid("q")
    done = running(engine, queue=q)[0]
    apply(engine, [completion(engine, done)])
    (retried,) = running(engine, queue=q)
    apply(engine, [failure(engine, retried)])
    (again,) = claim(engine, queues=[q], start_now=1, now=get(engine, retried.job_run_id).due_at)
    final = RetryPolicy("final", RetryStrategy.NONE, 1, timedelta(0), timedelta(0), dead_letter_non_retryable=False)
    s = settle_attempt(again, Outcome(OutcomeKind.NON_RETRYABLE_FAILURE, "BAD"), final, now=engine.clock.now(),
                       actor="w1", started_at=engine.clock.now())  # fmt: skip
    assert apply(engine, [transitions.settled(s, again, now=engine.clock.now())])
    dead_letter(engine, queue=q)
    make(engine, 2, queue=q)
    (held,) = make(engine, queue=q)  # waiting for a gate, not for a worker: not pending (a review)
    apply(engine, [holding(engine, held)])
    make(engine, queue=q, tenant="tenant-b", job_class=JobClass.AUDIT_INTEGRITY_JOB)
    with engine.store.read() as tx:
        mine = tx.metrics.run_counts("default")
        every = tx.metrics.run_counts(None)
    (group,) = [g for g in mine if g.queue == q]
    assert (group.tenant_id, group.job_class) == ("default", "MAINTENANCE_JOB")
    assert (group.created, group.started, group.completed, group.failed, group.retries, group.pending) == (
        6, 3, 1, 1, 1, 2,
    )  # fmt: skip
    assert {(g.tenant_id, g.job_class) for g in every if g.queue == q} == {
        ("default", "MAINTENANCE_JOB"), ("tenant-b", "AUDIT_INTEGRITY_JOB"),
    }  # fmt: skip


def test_dead_letter_and_breach_counts_group_by_tenant_and_class(engine: Engine) -> None:
    dead_letter(engine)
    dead_letter(engine)
    dead_letter(engine, tenant="tenant-b", job_class=JobClass.AUDIT_INTEGRITY_JOB)
    with engine.store.write() as tx:
        tx.sla.breaches_insert([_breach("R1"), _breach("R1", phase="reminder"), _breach("R2", tenant="tenant-b")])
    with engine.store.read() as tx:
        assert tx.metrics.dead_letter_counts("default") == {("default", "MAINTENANCE_JOB"): 2}
        assert tx.metrics.dead_letter_counts(None) == {
            ("default", "MAINTENANCE_JOB"): 2, ("tenant-b", "AUDIT_INTEGRITY_JOB"): 1,
        }  # fmt: skip
        assert tx.metrics.sla_breach_counts("default") == {("default", "MAINTENANCE_JOB"): 1}  # reminders are not
        assert tx.metrics.sla_breach_counts(None) == {
            ("default", "MAINTENANCE_JOB"): 1,
            ("tenant-b", "MAINTENANCE_JOB"): 1,
        }
        assert tx.metrics.dead_letter_counts("tenant-c") == {} and tx.metrics.sla_breach_counts("tenant-c") == {}


def test_workflow_latency_is_a_histogram_of_finished_workflows(engine: Engine) -> None:
    with engine.store.write() as tx:
        for wid, ms in (("fast", 50), ("slow", 2_000)):
            tx.workflow_insert(_workflow(wid), [], [])
            ended = T0 + timedelta(milliseconds=ms)
            tx.workflow_apply(_end_at(wid, ended))
        tx.workflow_insert(_workflow("open"), [], [])
        tx.workflow_insert(_workflow("theirs", tenant="tenant-b"), [], [])
        tx.workflow_apply(_end_at("theirs", T0 + timedelta(seconds=1), tenant="tenant-b"))
        (mine,) = tx.metrics.workflow_latency("default", [100.0, 1_000.0, 10_000.0])
        every = tx.metrics.workflow_latency(None, [100.0])
    assert (mine.tenant_id, mine.job_class, mine.count, mine.sum_ms, mine.cumulative) == (
        "default", "MAINTENANCE_JOB", 2, 2_050.0, (1, 1, 2),
    )  # fmt: skip
    assert sorted((d.tenant_id, d.count) for d in every) == [("default", 2), ("tenant-b", 1)]


def _end_at(wid: str, at: Any, tenant: str = "default") -> Any:
    return WorkflowUpdate(wid, tenant, 0, {"status": S.COMPLETED, "ended_at": at}, [], [])


def test_claim_latency_measures_each_recent_runs_last_claim_from_its_due_time(engine: Engine) -> None:
    now = engine.clock.now()
    q = uid("q")
    make(engine, queue=q, at=now - timedelta(seconds=2))  # due 2 s before its claim
    make(engine, queue=q, at=now - timedelta(milliseconds=10))
    claim(engine, queues=[q], now=now)
    make(engine, at=now)  # not claimed: left out
    make(engine, queue=q, at=now - HOUR)  # created before the window, not claimed
    with engine.store.read() as tx:
        (d,) = tx.metrics.claim_latency("default", now - timedelta(minutes=1), [100.0, 5_000.0])
        assert tx.metrics.claim_latency("tenant-b", now - HOUR, [100.0]) == []
    assert (d.count, d.cumulative, d.sum_ms) == (2, (1, 2), 2_010.0)


def test_lease_renewals_are_reported_for_live_workers_only(engine: Engine) -> None:
    now = engine.clock.now()
    with engine.store.write() as tx:
        for worker, beat in (("live", now), ("stale", now - HOUR), ("stopped", now)):
            tx.worker_heartbeat(WorkerBeat(worker, "host", 1, 1, ("default",), beat))
        tx.worker_stopped("stopped", now)
    with engine.store.read() as tx:
        assert tx.metrics.lease_renewals(now - timedelta(minutes=1)) == {"live": 0}
        assert tx.metrics.lease_renewals(now - 2 * HOUR) == {"live": 0, "stale": 0}
