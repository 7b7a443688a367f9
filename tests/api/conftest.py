"""The API under test: the real application over the real store (SQLite file and PostgreSQL),
with a token for every role in two tenants, ``acme`` and ``other``."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from tests.helpers import define, make_config
from tests.ldap_directory import SERVICE_PASSWORD, USERS, Directory, running_directory
from tests.oidc_issuer import Issuer, running_issuer

from jobgate.api.server_state import ServerState
from jobgate.console.app import create_app
from jobgate.core.models import JobRun, Scope
from jobgate.core.tokens import Role
from jobgate.service import control, tokens
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunsClaim
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

TENANTS = ("acme", "other")
ACME_JOB = "acme-job"  # defined in acme only: another tenant naming it must get a 404
SHARED_JOB = "shared-job"  # defined in both tenants
ACME_FLOW = "acme-flow"  # a workflow of one step (ACME_JOB), defined in acme only


@dataclass
class World:
    engine: Engine
    client: TestClient
    tokens: dict[tuple[str, Role], str] = field(default_factory=dict)
    token_ids: dict[tuple[str, Role], str] = field(default_factory=dict)
    made: set[str] = field(default_factory=set)  # ids of acme's resources the tests created
    issuer: Issuer | None = None  # set: every role of every tenant is a person signed in by OIDC
    directory: Directory | None = None  # set: acme's roles are people of this LDAP directory

    def headers(self, tenant: str, role: Role) -> dict[str, str]:
        if self.directory is not None and tenant == "acme":
            return basic(f"acme-{role.value}", USERS[f"acme-{role.value}"][0])
        if self.issuer is not None:
            token = self.issuer.token(f"{tenant}-{role.value}", tenant=tenant, roles=[f"jobgate-{role.value}s"])
            return {"Authorization": f"Bearer {token}"}
        return {"Authorization": f"Bearer {self.tokens[(tenant, role)]}"}

    def actor(self, tenant: str, role: Role) -> str:
        if self.directory is not None and tenant == "acme":
            return f"ldap:acme-{role.value}"
        if self.issuer is not None:
            return f"oidc:{tenant}-{role.value}"
        return f"token:{self.token_ids[(tenant, role)]}"

    def new_run(self, tenant: str = "acme", job: str = ACME_JOB, by: str | None = None, **params: str) -> JobRun:
        by = by or self.actor(tenant, Role.ADMIN)
        request = SubmitRequest(job, params=dict(params), scope=Scope(tenant_id=tenant), requested_by=by)
        run = self.engine.submit(request, actor=by).run
        if tenant == "acme":
            self.made.add(run.job_run_id)
        return run

    def terminal_run(self, tenant: str = "acme", by: str | None = None) -> JobRun:
        run = self.new_run(tenant, by=by)
        return control.cancel_run(self.engine, run.job_run_id, actor="test", tenant_id=tenant)

    def running_run(self, tenant: str = "acme", by: str | None = None) -> JobRun:
        run = self.new_run(tenant, by=by)
        now = self.engine.clock.now()
        claim = RunsClaim("test-worker", ("default",), 1000, now, now + timedelta(minutes=5), start_now=1000)
        with self.engine.store.write() as tx:
            tx.runs_claim(claim)
            found = tx.run_get(run.job_run_id)
        assert found is not None and found.status.value == "RUNNING", found
        return found

    def anchored(self, tenant: str = "acme") -> int:
        """Anchor the entries of ``tenant`` whose window has closed, as if it were two windows
        later; the last seq anchored (entries after an anchored window wait for the next)."""
        from jobgate.evidence import anchors

        later = self.engine.clock.now() + 2 * self.engine.config.evidence.anchor_window
        with self.engine.store.write() as tx:
            anchors.anchor_configured(tx, self.engine.config, tenant, later)
            last = tx.anchors.last(tenant, "batch")
        assert last is not None, "nothing to anchor"
        return last.last_seq

    def log_for(self, run: JobRun, text: str = "line 1\nline 2\nline 3\n") -> None:
        folder = Path(self.engine.config.data_dir) / "runs" / run.job_run_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.log").write_text(text)

    def artifact_for(self, run: JobRun, content: bytes = b"report") -> Path:
        import hashlib

        from sqlalchemy import text

        folder = Path(self.engine.config.data_dir) / "runs" / run.job_run_id / "attempt-1"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "report.txt"
        path.write_bytes(content)
        with self.engine.store.write() as tx:
            connection(tx).execute(
                text(
                    "UPDATE job_runs SET artifact_path = :p, artifact_sha256 = :h, artifact_size = :n "
                    "WHERE job_run_id = :r"
                ),
                {
                    "p": str(path),
                    "h": "sha256:" + hashlib.sha256(content).hexdigest(),
                    "n": len(content),
                    "r": run.job_run_id,
                },
            )
        return path

    def schedule(self, tenant: str = "acme") -> str:
        from jobgate.service import schedules

        sid = f"sched-{uuid.uuid4().hex[:8]}"
        now = self.engine.clock.now()
        doc = {"id": sid, "job": ACME_JOB if tenant == "acme" else SHARED_JOB, "every_seconds": 3600, "tenant": tenant}
        schedules.put_schedules(self.engine, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
        if tenant == "acme":
            self.made.add(sid)
        return sid

    def proposal(self, tenant: str = "acme") -> str:
        """A pending request of ``tenant``, proposed by its consumer token."""
        from jobgate.service import requests

        made = requests.propose(
            self.engine,
            tenant_id=tenant,
            requester=self.actor(tenant, Role.CONSUMER),
            job_definition_id=ACME_JOB if tenant == "acme" else SHARED_JOB,
            params={"n": "1"},
            title="month end",
            reason="close the books",
        )
        if tenant == "acme":
            self.made.add(made.request_id)
        return made.request_id

    def safe_mode_off(self) -> None:
        from jobgate.service import safemode

        for tenant in TENANTS:
            current = safemode.status(self.engine, tenant)
            if current is not None and current.active:
                safemode.deactivate(self.engine, tenant, actor="test", reason="reset")

    def digest(self, job: str, tenant: str = "acme") -> str:
        """The current content digest of ``job``: what an approver reviews and names."""
        with self.engine.store.read() as tx:
            stored = tx.definition_get(tenant, job)
        assert stored is not None
        return stored.digest

    def approve(self, job: str, tenant: str = "acme") -> None:
        from jobgate.service import approvals

        approvals.approve(self.engine, tenant, job, actor="test-admin")

    def workflow(self, tenant: str = "acme") -> str:
        from jobgate.service.workflows import StartWorkflow, start_workflow

        by = self.actor(tenant, Role.ADMIN)
        record, _ = start_workflow(
            self.engine, StartWorkflow(ACME_FLOW, scope=Scope(tenant_id=tenant), requested_by=by), actor=by
        )
        if tenant == "acme":
            self.made.add(record.workflow_run_id)
        return record.workflow_run_id

    def victim_token(self, tenant: str = "acme") -> str:
        token_id = tokens.create(self.engine, tenant_id=tenant, role="consumer", actor="test").stored.token_id
        if tenant == "acme":
            self.made.add(token_id)
        return token_id


def basic(username: str, password: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()}


def build_world(
    engine: Engine, *, auth: bool = True, issuer: Issuer | None = None, directory: Directory | None = None
) -> World:
    # A definition's trigger_type is enforced; manual runs are always allowed. The shared job is
    # also fired by events, acme's by the interval schedules these tests add (an adaptive
    # definition may be started by interval and adaptive schedules, and keeps none of its own).
    n = [{"name": "n", "pattern": "[0-9]{1,6}"}]
    for tenant in TENANTS:
        define(engine, job_definition_id=SHARED_JOB, tenant_id=tenant, trigger_type="event", params=n)
    # acme's job also takes a label whose pattern JavaScript compiles only without the "v" flag
    # browsers give a pattern attribute (a class ending in "-"): the console still checks it.
    label = {"name": "label", "pattern": "[A-Za-z][A-Za-z0-9 _.-]{0,15}"}
    define(engine, job_definition_id=ACME_JOB, tenant_id="acme", trigger_type="adaptive", params=[*n, label])
    define(
        engine,
        job_definition_id=ACME_FLOW,
        tenant_id="acme",
        handler=None,
        workflow={"steps": [{"id": "one", "job": ACME_JOB, "params": {"n": "1"}}]},
    )
    state = ServerState(engine, auth=auth)
    client = TestClient(create_app(state), raise_server_exceptions=False)
    world = World(engine, client, issuer=issuer, directory=directory)
    for tenant in TENANTS:
        for role in Role:
            made = tokens.create(engine, tenant_id=tenant, role=role.value, actor="test", label=f"{tenant}-{role}")
            world.tokens[(tenant, role)] = made.token
            world.token_ids[(tenant, role)] = made.stored.token_id
    return world


@pytest.fixture
def world(engine: Engine) -> Iterator[World]:
    w = build_world(engine)
    with w.client:
        yield w


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[Issuer]:
    """An OpenID Connect provider on 127.0.0.1 (HTTPS, its own CA)."""
    with running_issuer(tmp_path) as running:
        yield running


@pytest.fixture
def oidc_world(database_url: str, tmp_path: Path, issuer: Issuer) -> Iterator[World]:
    """The same world, its people signed in through ``issuer`` (``auth.oidc``) instead of tokens."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, auth={"oidc": issuer.config()}))
    w = build_world(engine, issuer=issuer)
    with w.client:
        yield w
    store.dispose()


def body_of(response: Any) -> str:
    return response.text if response.headers.get("content-type", "").startswith(("application/json", "text/")) else ""


@pytest.fixture
def engine_with_quota(database_url: str, tmp_path: Path) -> Iterator[World]:
    """A world whose configuration allows each tenant 2 runs per UTC day."""
    store = Store(database_url)
    w = build_world(Engine(store, make_config(tmp_path, server={"daily_run_quota": 2})))
    with w.client:
        yield w
    store.dispose()


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    """An OpenLDAP directory on 127.0.0.1 (Debian's slapd), its people and groups added."""
    with running_directory(tmp_path_factory.mktemp("slapd")) as running:
        yield running


@pytest.fixture
def ldap_world(
    database_url: str, tmp_path: Path, directory: Directory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    """The same world, acme's people signing in to it through ``directory`` (``auth.ldap``)."""
    monkeypatch.setenv("JOBGATE_TEST_LDAP_PASSWORD", SERVICE_PASSWORD)
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, auth={"ldap": directory.config()}))
    w = build_world(engine, directory=directory)
    with w.client:
        yield w
    w.client.app.state.server.authenticator.close()  # type: ignore[attr-defined]
    store.dispose()
