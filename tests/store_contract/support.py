"""Set-up shared by the store contract tests.

Runs are built here as plain ``JobRun`` values and stored with ``StoreTx.runs_create``; they are
moved on with ``StoreTx.runs_claim`` and the changes of ``core.transitions``. So every test starts
from rows the store itself wrote, and the suite depends on the service layer for nothing: the
contract under test is the store's alone.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from jobgate.core import transitions
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.governance import Code, Verdict
from jobgate.core.models import DEFAULT_QUEUE, DEFAULT_TENANT, JobClass, JobRun, Priority, Transition, TriggerType
from jobgate.core.policies import RetryPolicy, RetryStrategy
from jobgate.core.settle import queue_timeout_decision, settle_attempt, settle_without_attempt
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.core.transitions import RunChange
from jobgate.service.engine import Engine
from jobgate.store.base import RunCreate, RunsClaim
from jobgate.store.sqlstore import Store, StoreTx

LEASE = timedelta(seconds=30)
WORKER = "w1"
JOB = "job-a"
# A fixed instant for rows whose times the test chooses (schedules, tokens, audit entries ...).
T0 = datetime(2024, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)  # in the past: runs created then are due
POLICY = RetryPolicy("test_fixed_v1", RetryStrategy.FIXED_DELAY, 3, timedelta(seconds=5), timedelta(seconds=5))


def uid(prefix: str = "x") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def digest_of(job_id: str, version: int = 1) -> str:
    """A stand-in definition digest, one per (definition, version)."""
    return "sha256:" + uuid.uuid5(uuid.NAMESPACE_OID, f"{job_id}/{version}").hex * 2


def new_run(
    *,
    tenant: str = DEFAULT_TENANT,
    job_id: str = JOB,
    key: str | None = None,
    at: datetime = T0,
    due_at: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: Priority = Priority.NORMAL,
    job_class: JobClass = JobClass.MAINTENANCE_JOB,
    trigger_id: str | None = None,
    trigger_type: TriggerType = TriggerType.MANUAL,
    max_attempts: int = 3,
    **fields: Any,
) -> JobRun:
    """A new SCHEDULED run, as the pipeline builds one (not stored)."""
    key = key or uid("key")
    return JobRun(
        job_run_id=f"TGJOBRUN-{uuid.uuid4().hex}",
        tenant_id=tenant,
        job_definition_id=job_id,
        definition_version=1,
        definition_digest=digest_of(job_id),
        job_class=job_class,
        trigger_id=trigger_id or f"TGTRIG-{key}",
        trigger_type=trigger_type,
        idempotency_key=key,
        config_snapshot_id="snap-1",
        config_digest="sha256:" + "c" * 64,
        status=RunStatus.SCHEDULED,
        attempt=fields.pop("attempt", 0),
        max_attempts=max_attempts,
        priority=priority,
        queue=queue,
        retry_policy=POLICY.retry_policy_id,
        params=fields.pop("params", {}),
        scope={"tenant_id": tenant},
        created_at=at,
        due_at=due_at or at,
        **fields,
    )


def creation(run: JobRun, **limits: Any) -> RunCreate:
    """``run``'s creation: its trigger document and its CREATED and SCHEDULED transitions."""
    at, rid = run.created_at, run.job_run_id
    ts = (
        Transition(rid, None, RunStatus.CREATED, 0, TransitionReason.CREATED.value, "test", at, {"k": "v"}),
        Transition(rid, RunStatus.CREATED, RunStatus.SCHEDULED, 0, TransitionReason.ADMITTED.value, "test", at),
    )
    trigger = {"trigger_id": run.trigger_id, "trigger_type": run.trigger_type.value, "requested_by": "test"}
    return RunCreate(run, trigger, ts, **limits)


def make(engine: Engine, n: int = 1, *, limits: dict[str, Any] | None = None, **fields: Any) -> list[JobRun]:
    """``n`` new SCHEDULED runs stored in one ``runs_create`` (created and due now, by default)."""
    fields.setdefault("at", engine.clock.now())
    creates = [creation(new_run(**fields), **(limits or {})) for _ in range(n)]
    with engine.store.write() as tx:
        made = tx.runs_create(creates)
    assert all(created for _, created in made)
    return [run for run, _ in made]


def claim_params(
    engine: Engine,
    *,
    limit: int = 10,
    start_now: int = 0,
    worker: str = WORKER,
    queues: Sequence[str] = (DEFAULT_QUEUE,),
    now: datetime | None = None,
    lease: timedelta = LEASE,
    **more: Any,
) -> RunsClaim:
    at = engine.clock.now() if now is None else now
    return RunsClaim(worker, tuple(queues), limit, at, at + lease, start_now=start_now, **more)


def claim(engine: Engine, **kw: Any) -> list[JobRun]:
    with engine.store.write() as tx:
        batch = tx.runs_claim(claim_params(engine, **kw))
    return batch.runs()


def running(engine: Engine, n: int = 1, *, worker: str = WORKER, **fields: Any) -> list[JobRun]:
    """``n`` runs claimed and started by ``worker`` (RUNNING, attempt 1). They wait in a queue of
    their own, so the claim takes exactly them."""
    fields.setdefault("queue", uid("q"))
    made = make(engine, n, **fields)
    runs = claim(engine, limit=n, start_now=n, worker=worker, queues=[fields["queue"]])
    assert sorted(r.job_run_id for r in runs) == sorted(r.job_run_id for r in made)
    return runs


def dispatched(
    engine: Engine, n: int = 1, *, worker: str = WORKER, lease: timedelta = LEASE, **fields: Any
) -> list[JobRun]:
    """``n`` runs claimed by ``worker`` and not started (DISPATCHED)."""
    fields.setdefault("queue", uid("q"))
    make(engine, n, **fields)
    runs = claim(engine, limit=n, worker=worker, queues=[fields["queue"]], lease=lease)
    assert len(runs) == n
    return runs


def apply(engine: Engine, changes: Sequence[RunChange]) -> list[RunChange]:
    with engine.store.write() as tx:
        return tx.runs_apply(list(changes))


def get(engine: Engine, job_run_id: str) -> JobRun:
    with engine.store.read() as tx:
        run = tx.run_get(job_run_id)
    assert run is not None
    return run


def completion(engine: Engine, run: JobRun, *, result: dict[str, Any] | None = None) -> RunChange:
    """The worker's change that ends a RUNNING ``run`` COMPLETED."""
    now = engine.clock.now()
    s = settle_attempt(
        run, Outcome(OutcomeKind.SUCCEEDED), POLICY, now=now, actor=WORKER, started_at=run.started_at or now,
        result=result or {"ok": True},
    )  # fmt: skip
    return transitions.settled(s, run, now=now)


def failure(engine: Engine, run: JobRun) -> RunChange:
    """The worker's change after a retryable failure of a RUNNING ``run`` (RETRY_WAIT while
    attempts are left)."""
    now = engine.clock.now()
    outcome = Outcome(OutcomeKind.RETRYABLE_FAILURE, "FLAKY", "it failed")
    s = settle_attempt(run, outcome, POLICY, now=now, actor=WORKER, started_at=run.started_at or now)
    return transitions.settled(s, run, now=now)


def complete(engine: Engine, **fields: Any) -> JobRun:
    """A run that ran once and COMPLETED."""
    (run,) = running(engine, **fields)
    assert apply(engine, [completion(engine, run)])
    return get(engine, run.job_run_id)


def dead_lettering(engine: Engine, run: JobRun) -> RunChange:
    """A waiting ``run`` dead-lettered for its queue timeout (no attempt used), with its letter."""
    now = engine.clock.now()
    s = settle_without_attempt(run, queue_timeout_decision(), now=now, actor="rescuer", error_code="QUEUE_TIMEOUT")
    return transitions.settled(s, run, now=now)


def dead_letter(engine: Engine, **fields: Any) -> JobRun:
    (run,) = make(engine, **fields)
    assert apply(engine, [dead_lettering(engine, run)])
    return get(engine, run.job_run_id)


def cancelling(engine: Engine, run: JobRun) -> RunChange:
    return transitions.cancelled(run, actor="ada", reason="not needed", now=engine.clock.now())


def holding(engine: Engine, run: JobRun, code: Code = Code.SAFE_MODE) -> RunChange:
    verdict = Verdict(False, code, "test_rule", f"held for {code.value}")
    return transitions.held(run, verdict, actor="gate", now=engine.clock.now())


def other_thread_waits(store: Store, hold: Callable[[StoreTx], None], then: Callable[[StoreTx], Any]) -> None:
    """Assert that ``then``, in a write transaction on another thread, does not get through
    while a transaction that did ``hold`` is open, and does once that one has committed."""
    held = threading.Event()
    done = threading.Event()
    failure: list[BaseException] = []

    def waiter() -> None:
        held.wait(10)
        try:
            with store.write() as tx:
                then(tx)
        except BaseException as exc:  # reported on the test's thread
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    with store.write() as tx:
        hold(tx)
        held.set()
        assert not done.wait(0.3), "the other transaction got through while the first held on"
    assert done.wait(10), "the other transaction never got through"
    thread.join(10)
    if failure:
        raise failure[0]
