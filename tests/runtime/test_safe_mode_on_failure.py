"""The ``safe_mode_on_failure`` retry strategy (seed 000 §20): after the last attempt fails the
run is dead-lettered for review and its tenant's safe mode switches on, naming the run; a
configuration that uses it without allowing automatic activation is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import define, make_config
from tests.runtime.runtime_support import running_worker, wait_until

from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.core.states import RunStatus
from jobgate.service import safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

CRITICAL = {
    "retry_policy_id": "critical_v1",
    "strategy": "safe_mode_on_failure",
    "max_attempts": 2,
    "initial_delay_seconds": 0,
    "max_delay_seconds": 0,
}


@pytest.fixture
def critical(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    config = make_config(tmp_path, retry_policies=[CRITICAL], safe_mode={"allow_automatic": True})
    store = Store(database_url)
    yield Engine(store, config)
    store.dispose()


def test_the_last_failure_dead_letters_the_run_and_switches_safe_mode_on(critical: Engine) -> None:
    job = define(critical, handler="engine_handlers:fail_retryable", retry_policy="critical_v1")
    assert safemode.status(critical, "default") is None
    run_id = critical.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id
    with running_worker(critical):
        wait_until(lambda: _status(critical, run_id) is RunStatus.DEAD_LETTERED, what="the run to be dead-lettered")
        wait_until(lambda: safemode.status(critical, "default") is not None, what="safe mode to switch on")
    period = safemode.status(critical, "default")
    assert period is not None and run_id in period.reason
    with critical.store.read() as tx:
        letter = tx.dead_letter_open_for(run_id)
        run = tx.run_get(run_id)
    assert letter is not None and letter.requires_manual_review and run is not None and run.attempt == 2
    # Another run failing its last attempt while safe mode is on leaves the period as it is.
    second = critical.submit(SubmitRequest(job, requested_by="ada", request_id="2"), actor="ada").run.job_run_id
    with running_worker(critical):
        wait_until(lambda: _status(critical, second) is RunStatus.DEAD_LETTERED, what="the second dead letter")
    assert safemode.status(critical, "default") == period
    assert len(safemode.history(critical, "default")) == 1


def test_a_non_retryable_failure_is_a_final_failure_too(critical: Engine) -> None:
    """Found by a review: a non-retryable failure (the most definite kind) was dead-lettered with
    no review asked and safe mode left off; it is this strategy's final failure as much as an
    exhausted one."""
    job = define(critical, handler="engine_handlers:fail_final", retry_policy="critical_v1")
    run_id = critical.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id
    with running_worker(critical):
        wait_until(lambda: _status(critical, run_id) is RunStatus.DEAD_LETTERED, what="the run to be dead-lettered")
        wait_until(lambda: safemode.status(critical, "default") is not None, what="safe mode to switch on")
    period = safemode.status(critical, "default")
    assert period is not None and run_id in period.reason
    with critical.store.read() as tx:
        letter = tx.dead_letter_open_for(run_id)
        run = tx.run_get(run_id)
    assert letter is not None and letter.requires_manual_review and run is not None and run.attempt == 1


def test_the_strategy_without_automatic_safe_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises((ConfigurationError, ValidationError)) as refused:
        make_config(tmp_path, retry_policies=[CRITICAL])
    assert refused.value.field == "retry_policies.critical_v1.strategy"
    assert "safe_mode.allow_automatic" in refused.value.message


def _status(engine: Engine, run_id: str) -> RunStatus | None:
    with engine.store.read() as tx:
        run = tx.run_get(run_id)
    return None if run is None else run.status
