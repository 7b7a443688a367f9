"""Helpers shared by the engine, runtime and CLI tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from jobgate.config import JobgateConfig, build_config
from jobgate.definitions import parse_definition
from jobgate.service.engine import Engine
from jobgate.testing import connection

# The PostgreSQL server the suite uses (as its superuser, to make schemas) and the ordinary
# role every PostgreSQL test connects as, so row-level security binds them.
SERVER_URL = os.environ.get("JOBGATE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/jobgate_test")
APP_ROLE = "jobgate_app"


def _worker_database(url: str) -> str:
    """Under pytest-xdist each worker process has a database of its own (``jobgate_test_gw0``,
    …): advisory locks and LISTEN channels are database-wide, so two workers' tests sharing one
    database would see each other's (conftest.py creates it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    parsed = make_url(url)
    return parsed.set(database=f"{parsed.database}_{worker}").render_as_string(hide_password=False)


PG_URL = _worker_database(SERVER_URL)


def config_document(base: Path, **overrides: Any) -> dict[str, Any]:
    """The test configuration as a document (what a jobgate.yaml would hold)."""
    doc: dict[str, Any] = {
        "data_dir": str(base / "data"),
        "events": {"jsonl_path": str(base / "data" / "events.jsonl"), "log": False},
        "retry_policies": [
            {
                "retry_policy_id": "test_fixed_v1",
                "strategy": "fixed_delay",
                "max_attempts": 3,
                "initial_delay_seconds": 0,
                "max_delay_seconds": 0,
            },
            {
                "retry_policy_id": "test_patient_v1",  # retried every 0.2 s, up to 20 attempts
                "strategy": "fixed_delay",
                "max_attempts": 20,
                "initial_delay_seconds": 0.2,
                "max_delay_seconds": 0.2,
            },
            {
                "retry_policy_id": "test_review_v1",
                "strategy": "manual_review_after_n",
                "max_attempts": 2,
                "initial_delay_seconds": 0,
                "max_delay_seconds": 0,
            },
        ],
        "timeout_policies": [
            {"timeout_policy_id": "test_exec_timeout_v1", "execution_timeout_seconds": 0.5},
            {"timeout_policy_id": "test_queue_timeout_v1", "queue_timeout_seconds": 0.2},
        ],
        "runners": {
            "py": {"binary": "python3", "args": ["{{tmpfile}}"], "stop_grace_seconds": 0.5},
        },
    }
    doc.update(overrides)
    return doc


def make_config(base: Path, **overrides: Any) -> JobgateConfig:
    return build_config(config_document(base, **overrides), base_dir=base, path=None)


def define(engine: Engine, *, approve: bool = True, **fields: Any) -> str:
    """Store one definition given as seed fields (and approve its content, as an admin would
    before anything can run); returns its id. Defaults make a tiny handler job."""
    doc: dict[str, Any] = {
        "job_definition_id": f"job-{uuid.uuid4().hex[:8]}",
        "job_class": "MAINTENANCE_JOB",
        "trigger_type": "manual",
        "handler": "engine_handlers:succeed",
    }
    doc.update(fields)
    loaded = parse_definition(doc, "test", engine.config)
    engine.apply_definitions([loaded])
    if approve:
        from jobgate.service import approvals

        approvals.approve(engine, loaded.definition.tenant_id, loaded.definition.job_definition_id, actor="test-admin")
    return str(doc["job_definition_id"])


def count(engine: Engine, table: str, where: str = "") -> int:
    with engine.store.read() as tx:
        sql = f"SELECT count(*) FROM {table}" + (f" WHERE {where}" if where else "")
        return int(connection(tx).execute(text(sql)).scalar_one())


def history_values(conn: Any, job_run_id: str) -> list[list[Any]]:
    """A run's transitions as the value lists its seal's history chains (``core.seals``)."""
    rows = conn.execute(
        text(
            "SELECT from_status, to_status, attempt, reason, actor, at, detail FROM run_transitions"
            " WHERE job_run_id = :r ORDER BY id"
        ),
        {"r": job_run_id},
    )
    return [list(t) for t in rows]
