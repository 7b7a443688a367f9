"""A signed plugin's handler, end to end on both backends: admitted at startup, named by a
definition (``handler: <plugin>.jobs:run``), approved and run by a worker; a definition naming a
plugin that is not admitted is refused on field ``handler`` and stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_status

from helpers import count, make_config
from jobgate.core.errors import ValidationError
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.definitions import load_definitions
from jobgate.plugins import admission
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from plugin_kit import Kit, forgetting_plugins, make_kit


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with forgetting_plugins():
        yield make_kit(tmp_path)


def _engine(database_url: str, base: Path, kit: Kit, *enabled: str) -> Engine:
    config = make_config(base, plugins=kit.section(*enabled))
    admission.admit(config.plugins)  # as `jobgate worker` / `serve` do before anything else
    return Engine(Store(database_url), config)


def _apply(engine: Engine, folder: Path, job: str, handler: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job}.yaml").write_text(f"job_definition_id: {job}\njob_class: MAINTENANCE_JOB\nhandler: {handler}\n")
    loaded = load_definitions([folder], engine.config)
    engine.apply_definitions(loaded)
    approvals.approve(engine, "default", job, actor="test-admin")


def test_an_admitted_plugins_handler_runs_through_a_worker(database_url: str, tmp_path: Path, kit: Kit) -> None:
    name, marker = kit.plugin()
    kit.sign(name)
    engine = _engine(database_url, tmp_path / "w", kit, name)
    try:
        _apply(engine, tmp_path / "defs", "from-plugin", f"{name}.jobs:run")
        request = SubmitRequest("from-plugin", scope=Scope(), requested_by="ada", reason="plugin")
        run_id = engine.submit(request, actor="ada").run.job_run_id
        with running_worker(engine):
            done = wait_status(engine, run_id, RunStatus.COMPLETED)
        assert done.result == {"plugin": name, "answer": 42} and marker.exists()
    finally:
        engine.store.dispose()


def test_a_definition_naming_a_plugin_not_admitted_is_refused(database_url: str, tmp_path: Path, kit: Kit) -> None:
    enabled, _ = kit.plugin()
    disabled, marker = kit.plugin()
    kit.sign(enabled)
    kit.sign(disabled)
    engine = _engine(database_url, tmp_path / "w", kit, enabled)
    try:
        before = count(engine, "definitions")
        with pytest.raises(ValidationError) as refused:
            _apply(engine, tmp_path / "defs", "sneaky", f"{disabled}.jobs:run")
        assert refused.value.field == "handler" and "not admitted" in refused.value.message
        assert count(engine, "definitions") == before and not marker.exists()
    finally:
        engine.store.dispose()
