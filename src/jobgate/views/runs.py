"""Views shared by the API and the command line, so both show a run the same way."""

from __future__ import annotations

from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.views.schemas import AttemptOut, DeadLetterOut, RunDetailOut, RunOut, TransitionOut


def run_detail_view(engine: Engine, job_run_id: str, tenant_id: str | None = None) -> RunDetailOut:
    """The run with every transition (numbered as the SSE stream numbers them), its attempts,
    its open dead letter and its last reported progress."""
    detail = control.run_detail(engine, job_run_id, tenant_id)
    with engine.store.read(tenant_id=tenant_id) as tx:
        progress, message = tx.run_progress_get(job_run_id)
    return RunDetailOut(
        run=RunOut.of(detail.run),
        transitions=[TransitionOut.of(i, t) for i, t in enumerate(detail.transitions, start=1)],
        attempts=[AttemptOut.of(a) for a in detail.attempts],
        dead_letter=None if detail.dead_letter is None else DeadLetterOut.of(detail.dead_letter),
        progress=progress,
        progress_message=message,
    )
