"""Attempts, derived from the transition record rather than stored twice.

An attempt starts with the transition into RUNNING (its actor is the worker) and ends with the
next transition out of RUNNING for the same attempt number, whose detail carries the outcome
and error. Keeping one record (transitions) means the attempts view can never disagree with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobgate.core.models import Attempt, Transition
from jobgate.core.states import RunStatus


def attempts_from_transitions(transitions: Iterable[Transition]) -> list[Attempt]:
    attempts: dict[int, Attempt] = {}
    for t in transitions:
        if t.to_status is RunStatus.RUNNING:
            attempts[t.attempt] = Attempt(t.job_run_id, t.attempt, t.actor, t.at)
        elif t.from_status is RunStatus.RUNNING and t.attempt in attempts:
            start = attempts[t.attempt]
            attempts[t.attempt] = Attempt(
                start.job_run_id,
                start.attempt,
                start.worker_id,
                start.started_at,
                ended_at=t.at,
                outcome=str(t.detail.get("outcome", t.reason)),
                error_code=t.detail.get("error_code"),
                error_message=t.detail.get("error_message"),
            )
    return [attempts[n] for n in sorted(attempts)]
