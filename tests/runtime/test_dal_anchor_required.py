"""``dal_anchor_required`` (seed 000 §12: "whether job events require anchoring") takes effect:
every end of such a definition's runs is recorded in the audit log and anchored at once, in the
settling transaction (a direct, one-leaf anchor), not only with its window; a definition
without it is left to the window's batch anchor."""

from __future__ import annotations

from tests.helpers import define
from tests.runtime.runtime_support import running_worker, wait_until

from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest


def test_the_end_of_a_dal_anchored_run_is_anchored_at_once(engine: Engine) -> None:
    anchored_job = define(engine, dal_anchor_required=True)
    plain_job = define(engine)
    failing_job = define(engine, dal_anchor_required=True, handler="engine_handlers:fail_final")
    runs = [
        engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id
        for job in (anchored_job, plain_job, failing_job)
    ]
    with running_worker(engine):
        wait_until(lambda: all(_ended(engine, r) for r in runs), what="the three runs to end")
    with engine.store.read() as tx:
        direct = [a for a in tx.anchors.of("default") if a.mode == "direct"]
        covered = [e.event.target_id for a in direct for e in tx.anchors.entries("default", a.first_seq, a.last_seq)]
    assert sorted(covered) == sorted([runs[0], runs[2]])  # completed and dead-lettered alike; not the plain run
    assert all(a.leaf_count == 1 for a in direct)


def _ended(engine: Engine, run_id: str) -> bool:
    with engine.store.read() as tx:
        run = tx.run_get(run_id)
    return run is not None and run.status in (RunStatus.COMPLETED, RunStatus.DEAD_LETTERED, RunStatus.FAILED)
