"""Workers only claim what they can run (issue 25): a worker probes every active definition of
its queues before it claims, leaves out what its host cannot execute (a runner or target not
configured here, code that does not import here), advertises that in its row, and the doctor
names the definitions no live worker can run. Runs of them wait, with no attempt used, for a
worker that can."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import define, make_config
from tests.runtime.runtime_support import running_worker, wait_until

from jobgate.core.capabilities import advertised
from jobgate.core.states import RunStatus
from jobgate.definitions import parse_definition
from jobgate.service import approvals, doctor
from jobgate.service.engine import Engine
from jobgate.service.pipeline import SubmitRequest

SCRIPT = {"job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print('ran on a host with the runner')"}


def _define(engine: Engine, job: str) -> str:
    loaded = parse_definition({"job_definition_id": job, **SCRIPT}, "test", engine.config)
    engine.apply_definitions([loaded])
    approvals.approve(engine, "default", job, actor="test-admin")
    return loaded.digest


def _submit(engine: Engine, job: str) -> str:
    return engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id


def _cannot_run(engine: Engine) -> dict[str, str | None]:
    with engine.store.read() as tx:
        return {
            c.job_definition_id: c.reason
            for w in tx.workers_list()
            if w.stopped_at is None
            for c in map(advertised, w.capabilities.values())
            if not c.runnable
        }


def test_a_worker_without_the_runner_claims_none_of_its_runs_and_the_doctor_names_them(
    engine: Engine, tmp_path: Path
) -> None:
    _define(engine, "etl-load")
    run_id = _submit(engine, "etl-load")
    bare = Engine(engine.store, make_config(tmp_path / "bare", runners={}))  # the same database, no runners
    with running_worker(bare):
        wait_until(lambda: "etl-load" in _cannot_run(engine), what="the worker's advertisement")
        assert "runner 'py'" in (_cannot_run(engine)["etl-load"] or "")
        _run_one_it_can(engine, bare)  # it claimed and ran that one: it passed this one over
        with engine.store.read() as tx:
            run = tx.run_get(run_id)
            history = tx.run_transitions(run_id)
        assert run is not None and (run.status, run.attempt) == (RunStatus.SCHEDULED, 0)
        assert [t.to_status for t in history] == [RunStatus.CREATED, RunStatus.SCHEDULED]  # never claimed
        check = {c.name: c for c in doctor.run_checks(engine)}["capable workers"]
        assert check.level is doctor.Level.RED and "etl-load (1 waiting)" in check.detail
    with running_worker(engine):  # a worker that has the runner runs it
        wait_until(lambda: _status(engine, run_id) is RunStatus.COMPLETED, what="the run to complete")
        wait_until(lambda: "etl-load" not in _cannot_run(engine), what="the capable worker's advertisement")
        check = {c.name: c for c in doctor.run_checks(engine)}["capable workers"]
        assert check.level is doctor.Level.GREEN


def test_a_version_stored_after_the_probe_is_handed_back_once_without_using_an_attempt(
    engine: Engine, tmp_path: Path
) -> None:
    bare = Engine(engine.store, make_config(tmp_path / "bare", runners={}))
    with running_worker(bare, heartbeat_interval=timedelta(hours=1)) as worker:  # no second probe
        wait_until(lambda: _registered(engine, worker.worker_id), what="the worker's first heartbeat")
        digest = _define(engine, "etl-late")
        run_id = _submit(engine, "etl-late")
        worker.wake()
        wait_until(lambda: digest in worker.unrunnable, what="the attempt to be handed back")
        _run_one_it_can(engine, bare)
        with engine.store.read() as tx:
            run = tx.run_get(run_id)
            reasons = [t.reason for t in tx.run_transitions(run_id)]
        assert run is not None and run.status is RunStatus.SCHEDULED
        assert run.max_attempts - run.attempt == 1  # the handed-back attempt raised the ceiling: none used
        assert reasons.count("released_unrunnable") == 1  # not claimed again by this worker


def _run_one_it_can(engine: Engine, worker_engine: Engine) -> None:
    """Submit a run of a handler every host has and wait until the worker ran it: the worker
    has claimed since (the signal that it saw what else was queued)."""
    run_id = _submit(engine, define(engine))
    wait_until(lambda: _status(engine, run_id) is RunStatus.COMPLETED, what="a runnable run to complete")


def _registered(engine: Engine, worker_id: str) -> bool:
    with engine.store.read() as tx:
        return any(w.worker_id == worker_id for w in tx.workers_list())


def _status(engine: Engine, run_id: str) -> RunStatus | None:
    with engine.store.read() as tx:
        run = tx.run_get(run_id)
    return None if run is None else run.status


def test_a_probe_slow_as_a_long_import_does_not_hold_up_lease_renewal(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A definition applied while a worker runs is probed by importing its handler: a module that
    took longer to import than a lease held the worker's loop, the leases of its runs expired
    and the rescuer started them again while their first attempt still ran."""
    from tests.runtime.runtime_support import get_run, transitions, wait_status

    from jobgate.runtime.capabilities import CapabilityProbe

    long_job = define(engine, handler="engine_handlers:sleep", params=[{"name": "seconds", "pattern": "[0-9.]+"}])
    run = engine.submit(SubmitRequest(long_job, params={"seconds": "3"})).run
    probing = threading.Event()
    real = CapabilityProbe._probe

    def slow_import(self: CapabilityProbe, stored: Any) -> Any:
        probing.set()
        time.sleep(2.5)  # real time: a module that takes longer to import than the worker's lease
        return real(self, stored)

    settings = {"lease": timedelta(seconds=1), "heartbeat_interval": timedelta(milliseconds=100)}
    with running_worker(engine, **settings):
        wait_status(engine, run.job_run_id, RunStatus.RUNNING)
        monkeypatch.setattr(CapabilityProbe, "_probe", slow_import)
        define(engine, handler="engine_handlers:succeed")  # a new version: probed at the next heartbeat
        wait_until(probing.is_set, timeout=10, what="the probe of the new version")
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED, timeout=30)
    assert done.attempt == 1 and get_run(engine, run.job_run_id).result == {"slept": 3.0}
    assert not [t for t in transitions(engine, run.job_run_id) if "lease" in t[2]]  # its lease never lapsed


RETRY_V1 = {
    "retry_policy_id": "rev_retry_v1",
    "strategy": "fixed_delay",
    "max_attempts": 2,
    "initial_delay_seconds": 1,
    "max_delay_seconds": 1,
}


def test_a_worker_whose_configuration_lacks_a_named_policy_hands_the_run_back(engine: Engine, tmp_path: Path) -> None:
    """Found by a review: a definition applied with a retry or SLA policy added to jobgate.yaml
    since a worker started was dead-lettered by that worker at its first attempt (its older
    configuration could not read the definition), a run admitted and never run. The names a
    definition takes from the configuration are this host's, as its runners are: the run is
    handed back, no attempt used, and a worker that knows the policy runs it."""
    newer = Engine(
        engine.store,
        make_config(
            tmp_path / "newer",
            retry_policies=[RETRY_V1],
            sla_policies=[{"sla_policy_id": "rev_sla_v1", "deadline_seconds": 3600}],
        ),
    )
    for job, field, name in (("late-retry", "retry_policy", "rev_retry_v1"), ("late-sla", "sla_policy", "rev_sla_v1")):
        define(newer, job_definition_id=job, **{field: name})
        run_id = _submit(newer, job)
        with running_worker(engine) as older:  # started with the configuration before the policy
            wait_until(lambda: bool(older.unrunnable), what="the attempt to be handed back")
            _run_one_it_can(engine, engine)
            with engine.store.read() as tx:
                run = tx.run_get(run_id)
                reasons = [t.reason for t in tx.run_transitions(run_id)]
            assert run is not None and run.status is RunStatus.SCHEDULED, (field, run)
            # passed over by its probe, or handed back by an attempt: never failed, no attempt used
            assert set(reasons) <= {"created", "admitted", "claimed", "released_unrunnable"}, reasons
        with running_worker(newer):  # a worker that knows the name runs it
            wait_until(lambda r=run_id: _status(engine, r) is RunStatus.COMPLETED, what="the run to complete")
