"""A small governed world with every kind of evidence, built once per backend, and fresh copies
of it for tampering (a copied SQLite file; PostgreSQL tables restored from a saved schema)."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from runtime_support import wait_all, wait_until
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from support import coordinating, jobs, start, wait_workflow, workflow

from helpers import PG_URL, config_document, define
from jobgate.config import build_config
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.evidence import anchors, sinks
from jobgate.evidence import keys as evidence_keys
from jobgate.service import approvals, audit, control, requests, safemode, schedules, tokens
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from jobgate.store.tables import metadata

TENANT = "default"


@dataclass
class World:
    """What the tampers aim at: one record of each kind, by id."""

    folder: Path
    config_file: Path
    sink: Path
    url: str
    ids: dict[str, Any]


def build(folder: Path, url: str) -> World:
    folder.mkdir(parents=True, exist_ok=True)
    doc = config_document(folder)
    config_file = folder / "jobgate.yaml"
    config_file.write_text(yaml.safe_dump(doc))
    config = build_config(doc, base_dir=folder, path=config_file)
    evidence_keys.create(config)  # as `jobgate init` does: anchors and bundles are signed
    store = Store(url)
    engine = Engine(store, config)
    try:
        return World(folder, config_file, config.anchor_sink_path, url, _populate(engine))
    finally:
        store.dispose()


def _populate(engine: Engine) -> dict[str, Any]:
    payroll = define(engine, job_definition_id="payroll", params=[{"name": "month"}])
    ledger = define(engine, job_definition_id="ledger", handler="engine_handlers:fail_final")
    spare = define(engine, job_definition_id="spare")

    def submit(job: str, **params: str) -> str:
        req = SubmitRequest(job, params=params, scope=Scope(), requested_by="ada", reason="test")
        return engine.submit(req, actor="ada").run.job_run_id

    done = [submit(payroll, month=m) for m in ("2026-10", "2026-11")]
    dead = submit(ledger)
    cancelled = submit(spare)
    control.cancel_run(engine, cancelled, actor="ops", reason="not needed")
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    with coordinating(engine):
        wait_all(engine, done, RunStatus.COMPLETED)
        wait_all(engine, [dead], RunStatus.DEAD_LETTERED)
        wid = start(engine, wf)
        assert wait_workflow(engine, wid).record.status is RunStatus.COMPLETED
    now = datetime.now(UTC)
    admin = tokens.create(engine, tenant_id=TENANT, role="operator", actor="root", label="ops", principal="olga")
    gone = tokens.create(engine, tenant_id=TENANT, role="auditor", actor="root", label="old", principal="vic")
    tokens.revoke(engine, TENANT, gone.stored.token_id, actor="root")
    timed = define(engine, job_definition_id="nightly-report", trigger_type="cron", schedule_expression="0 2 * * *")
    doc = {"id": "nightly", "job": timed, "cron": "0 2 * * *"}
    schedules.put_schedules(engine, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
    schedules.set_paused(engine, TENANT, "nightly", True, now=now, actor="olga")
    ask = requests.propose(
        engine,
        tenant_id=TENANT,
        requester="rita",
        job_definition_id=payroll,
        params={"month": "2026-12"},
        title="december payroll",
        reason="early close",
    )
    requests.reject(engine, TENANT, ask.request_id, actor="bob", note="too early")
    safemode.activate(engine, TENANT, actor="sam", reason="drill")
    safemode.deactivate(engine, TENANT, actor="sam", reason="drill over")
    approvals.revoke(engine, TENANT, spare, actor="carol", reason="superseded")
    incident = safemode.activate(engine, TENANT, actor="sam", reason="incident 42")  # still on
    with engine.store.read() as tx:
        run = tx.run_get(done[0])
        assert run is not None
        approval = tx.approvals_list(TENANT, payroll)[0]
        revoked = tx.approvals_list(TENANT, spare)[0]
    audit.seal_pending(engine, now)
    with engine.store.write() as tx:  # every window ended: all of it anchored, to the file sink
        made = anchors.anchor_due(
            tx,
            TENANT,
            now=now + timedelta(hours=3),
            window=timedelta(hours=1),
            sink=sinks.FileSink(engine.config.anchor_sink_path),
            signer=evidence_keys.signer_for(engine.config),
        )
    assert made
    return {
        "run": done[0],
        "other_run": done[1],
        "dead": dead,
        "cancelled": cancelled,
        "workflow": wid,
        "definition": payroll,
        "snapshot": run.config_snapshot_id,
        "approval": approval.approval_id,
        "revoked_approval": revoked.approval_id,
        "token": admin.stored.token_id,
        "revoked_token": gone.stored.token_id,
        "schedule": "nightly",
        "request": ask.request_id,
        "safe_mode_on": incident.activation,
    }


# --- fresh copies ---------------------------------------------------------------------------


def admin_url(url: str) -> str:
    """The same database as its superuser: an attacker with write access, past row security."""
    if url.startswith("sqlite"):
        return url
    return make_url(url).set(username=make_url(PG_URL).username).render_as_string(hide_password=False)


def _schema(url: str) -> str:
    return url.split("search_path%3D", 1)[1]


class Copies:
    """Hands out the pristine world again for each tamper."""

    def __init__(self, world: World, work: Path) -> None:
        self.world = world
        self.work = work
        self._sink = world.sink.read_bytes()
        if world.url.startswith("sqlite"):
            self._db = Path(make_url(world.url).database or "")
            with create_engine(world.url).connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            self._pristine = work / "pristine.db"
            shutil.copy(self._db, self._pristine)
        else:
            self._backup = f"pristine_{uuid.uuid4().hex[:8]}"
            schema = _schema(world.url)
            with self._admin() as conn:
                conn.execute(text(f'CREATE SCHEMA "{self._backup}"'))
                for t in metadata.sorted_tables:
                    conn.execute(text(f'CREATE TABLE "{self._backup}".{t.name} AS TABLE "{schema}".{t.name}'))

    def _admin(self) -> Any:
        eng = create_engine(admin_url(self.world.url).replace("postgresql://", "postgresql+psycopg://", 1))
        return _Closing(eng)

    def fresh(self) -> World:
        """A copy of the world as it was built; the world object points at it."""
        self.world.sink.write_bytes(self._sink)
        if self.world.url.startswith("sqlite"):
            # A new file put in place, not the old one written over: a connection an earlier
            # command left open keeps the file it had, and never sees pages of two worlds mixed
            # ("database disk image is malformed" in a loaded CI run).
            staged = self._db.with_name(self._db.name + ".fresh")
            shutil.copy(self._pristine, staged)
            for suffix in ("-wal", "-shm"):
                Path(f"{self._db}{suffix}").unlink(missing_ok=True)
            os.replace(staged, self._db)
            return self.world
        schema = _schema(self.world.url)
        with self._admin() as conn:
            names = ", ".join(f'"{schema}".{t.name}' for t in metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names}"))
            for t in metadata.sorted_tables:
                conn.execute(text(f'INSERT INTO "{schema}".{t.name} SELECT * FROM "{self._backup}".{t.name}'))
        return self.world

    def tamper(self, statement: str | Any, **params: Any) -> None:
        """Apply one direct edit (SQL text, or a function of a connection) as the database's owner."""
        url = admin_url(self.world.url).replace("postgresql://", "postgresql+psycopg://", 1)
        eng = create_engine(url)
        try:
            with eng.begin() as conn:
                if callable(statement):
                    statement(conn)
                else:
                    conn.execute(text(statement), params)
        finally:
            eng.dispose()

    def close(self) -> None:
        if not self.world.url.startswith("sqlite"):
            with self._admin() as conn:
                conn.execute(text(f'DROP SCHEMA "{self._backup}" CASCADE'))


class _Closing:
    def __init__(self, eng: Any) -> None:
        self.eng = eng

    def __enter__(self) -> Connection:
        self.ctx = self.eng.begin()
        conn: Connection = self.ctx.__enter__()
        return conn

    def __exit__(self, *exc: Any) -> None:
        self.ctx.__exit__(*exc)
        self.eng.dispose()


def wait(condition: Any) -> None:
    wait_until(condition, timeout=20)
