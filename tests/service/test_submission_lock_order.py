"""Every path that makes a run and appends its audit entry takes the run's key before the
tenant's chain head. A single submission that locked the head first (to read it with its key
lookups) deadlocked against a batch inserting the same key (found by a review: 26 of 150 rounds
raised ``DeadlockDetected``, a 500 at the API). Concurrent repeats of one trigger end with one
run, each caller answered, and a linear chain."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from tests.helpers import define, make_config

from jobgate.evidence import anchors
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

ROUNDS = 40


def test_a_single_submission_and_a_batch_sharing_a_key_never_deadlock(database_url: str, tmp_path: Path) -> None:
    single_side = Engine(Store(database_url), make_config(tmp_path / "a"))
    batch_side = Engine(Store(database_url), make_config(tmp_path / "b"))
    try:
        job = define(single_side)
        failures: list[BaseException] = []
        made: dict[str, set[str]] = {}

        def single(key: str) -> None:
            try:
                run = single_side.submit(SubmitRequest(job, requested_by="alice", client_key=key), actor="alice").run
                made.setdefault(key, set()).add(run.job_run_id)
            except BaseException as exc:  # collected, asserted below
                failures.append(exc)

        def batch(key: str) -> None:
            try:
                asks = [SubmitRequest(job, requested_by="bob", client_key=k) for k in (key, f"{key}x")]
                results = batch_side.submit_many(asks, actor="bob")
                made.setdefault(key, set()).add(results[0].run.job_run_id)
            except BaseException as exc:
                failures.append(exc)

        for _ in range(ROUNDS):
            key = uuid.uuid4().hex
            threads = [threading.Thread(target=batch, args=(key,)), threading.Thread(target=single, args=(key,))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert failures == []
        assert all(len(ids) == 1 for ids in made.values()), made  # one run per trigger, both told it
        assert len(made) == ROUNDS
        with single_side.store.read() as tx:
            assert anchors.verify_tenant(tx, "default").ok
        assert all(r.ok for r in audit.verify_records(single_side, ["default"]))
    finally:
        single_side.store.dispose()
        batch_side.store.dispose()
