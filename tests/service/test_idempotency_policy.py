"""``idempotency_policy`` (seed 000 §12 "idempotency method") takes effect: ``window`` makes one
run per execution window whatever triggered it; ``trigger`` (the default) keeps triggers
apart; an unknown method is refused when the definition is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.helpers import define

from jobgate.core.errors import ValidationError
from jobgate.core.models import ExecutionWindow, TriggerType
from jobgate.definitions import parse_definition
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

START = datetime(2026, 12, 1, tzinfo=UTC)
WINDOW = ExecutionWindow(START, START + timedelta(days=1))


def _two_triggers(engine: Engine, job: str) -> tuple[str, str]:
    fired = SubmitRequest(job, trigger_type=TriggerType.BATCH_WINDOW, trigger_id="sched-1", window=WINDOW)
    manual = SubmitRequest(job, requested_by="ada", request_id="rerun-dec-1", window=WINDOW)
    first = engine.submit(fired, actor="scheduler").run.job_run_id
    second = engine.submit(manual, actor="ada").run.job_run_id
    return first, second


def test_window_makes_one_run_per_window_whatever_triggers_it(engine: Engine) -> None:
    job = define(engine, trigger_type="batch_window", schedule_expression="1d", idempotency_policy="window")
    first, second = _two_triggers(engine, job)
    assert first == second


def test_trigger_keeps_two_triggers_of_one_window_apart(engine: Engine) -> None:
    job = define(engine, trigger_type="batch_window", schedule_expression="1d")  # the default method
    first, second = _two_triggers(engine, job)
    assert first != second


def test_an_unknown_method_is_refused_naming_the_field(engine: Engine) -> None:
    doc = {"job_definition_id": "x", "job_class": "MAINTENANCE_JOB", "handler": "m:f", "idempotency_policy": "magic"}
    with pytest.raises(ValidationError) as refused:
        parse_definition(doc, "x.yaml", engine.config)
    assert refused.value.field == "idempotency_policy" and "trigger, window" in refused.value.message
