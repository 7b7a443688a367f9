"""A handler gets its run's context and nothing broader; jobgate's own jobs, and those an operator
trusts, get the host (store, clock, configuration) as a second, declared parameter.

The review found every handler handed the whole engine through ``ctx.host_engine``: a plain
handler read the token table through it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from runtime_support import get_run, running_worker, wait_status

from helpers import count, define
from jobgate.config import JobgateConfig
from jobgate.core.errors import ValidationError
from jobgate.core.states import RunStatus
from jobgate.runtime.executors.python import PythonExecutor
from jobgate.service.engine import Engine
from jobgate.service.host import Host
from jobgate.service.submission import SubmitRequest


def test_a_plain_handlers_context_holds_its_run_and_nothing_broader(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:context_surface")
    run = engine.submit(SubmitRequest(job, request_id="r")).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    surface = set(get_run(engine, run.job_run_id).result["attributes"])
    assert not {name for name in surface if "host" in name or "engine" in name or "store" in name}
    assert {"job_run_id", "params", "payload", "on_complete", "log"} <= surface


def test_a_handler_asking_for_the_host_from_an_untrusted_module_is_refused_and_stores_nothing(
    engine: Engine, marker: Path
) -> None:
    definitions = count(engine, "definitions")
    with pytest.raises(ValidationError, match="trusted_handlers") as refused:
        define(engine, handler="engine_handlers:host_reader")
    assert refused.value.field == "handler"
    assert count(engine, "definitions") == definitions
    with pytest.raises(ValidationError, match="not trusted"):
        PythonExecutor("engine_handlers:host_reader", Host(engine), trusted=())
    assert not marker.exists()  # the handler never ran


def test_a_trusted_module_gets_the_host_and_the_engines_clock(
    engine: Engine, config: JobgateConfig, marker: Path
) -> None:
    trusting = Engine(
        engine.store, replace(config, worker=replace(config.worker, trusted_handlers=("engine_handlers",)))
    )
    job = define(trusting, handler="engine_handlers:host_reader")
    run = trusting.submit(SubmitRequest(job, request_id="r")).run
    with running_worker(trusting):
        wait_status(trusting, run.job_run_id, RunStatus.COMPLETED)
    result = get_run(trusting, run.job_run_id).result
    assert result["tokens"] == 0 and result["now"]
    assert marker.read_text().split() == ["host_reader", run.job_run_id]


def test_trusting_a_module_trusts_its_submodules_and_nothing_that_only_starts_alike(engine: Engine) -> None:
    executor = PythonExecutor("engine_handlers:host_reader", Host(engine), trusted=("engine_handlers",))
    assert executor.handler == "engine_handlers:host_reader"
    with pytest.raises(ValidationError, match="not trusted"):
        PythonExecutor("engine_handlers:host_reader", Host(engine), trusted=("engine_handler",))
    with pytest.raises(ValidationError, match="run it in a worker"):
        PythonExecutor("jobgate.retention:retention_job", None)
