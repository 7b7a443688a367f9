"""The migration history builds exactly the schema declared in ``store/tables.py``, on both backends."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from tests.helpers import APP_ROLE, PG_URL

from jobgate.store.migrate import HEAD, MIGRATIONS, alembic_config
from jobgate.store.sqlstore import Store
from jobgate.store.tables import metadata
from jobgate.testing import connection


def _url(database_url: str) -> str:
    return database_url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_head_constant_is_alembic_head(database_url: str) -> None:
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        script = ScriptDirectory.from_config(alembic_config(conn))  # type: ignore[arg-type]
        assert script.get_current_head() == HEAD
    engine.dispose()
    assert MIGRATIONS.is_dir()


def test_migrated_schema_matches_declared_tables(database_url: str) -> None:
    Store(database_url).dispose()
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        diff = compare_metadata(context, metadata)
    engine.dispose()
    assert diff == []


def test_migrating_twice_is_a_no_op(database_url: str) -> None:
    Store(database_url).dispose()
    Store(database_url).dispose()
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == HEAD
    engine.dispose()


def test_processes_starting_at_once_converge_on_one_schema(database_url: str, tmp_path: Path) -> None:
    """Four processes migrate an empty database at the same moment: all start, one schema."""
    if database_url.startswith("postgresql"):
        schema = f"jobgate_race_{uuid.uuid4().hex[:8]}"
        admin = create_engine(_url(PG_URL))
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION {APP_ROLE}'))
        url = database_url.split("?")[0] + f"?options=-csearch_path%3D{schema}"
    else:
        url = f"sqlite:///{tmp_path}/race.db"
    code = "import sys; from jobgate.store.sqlstore import Store; Store(sys.argv[1]).dispose()"
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE) for _ in range(4)]
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
        engine = create_engine(_url(url))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [HEAD]
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        engine.dispose()
    finally:
        if database_url.startswith("postgresql"):
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()


def _fresh_url(database_url: str, tmp_path: Path, name: str) -> tuple[str, object]:
    """An empty database of the backend: a new SQLite file, or a new PostgreSQL schema (and a
    function that drops it)."""
    if not database_url.startswith("postgresql"):
        return f"sqlite:///{tmp_path}/{name}.db", lambda: None
    schema = f"jobgate_{name}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(_url(PG_URL))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION {APP_ROLE}'))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    return database_url.split("?")[0] + f"?options=-csearch_path%3D{schema}", drop


def test_0017_keeps_every_approval_in_order_binding_no_code(database_url: str, tmp_path: Path) -> None:
    """A database of 0016 with approvals (one revoked): after 0017 every approval is a row of its
    own, in the order given, none binding code (their runs are held until approved again), and
    the schema is exactly the declared one."""
    from alembic import command

    from jobgate.store.migrate import upgrade

    url, drop = _fresh_url(database_url, tmp_path, "upgrade")
    engine = create_engine(_url(url))
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
            command.upgrade(alembic_config(conn), "0016")  # type: ignore[arg-type]
            conn.commit()
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            rows = [
                ("job-a", "sha256:a", 1, 10, None),
                ("job-a", "sha256:b", 2, 20, 30),
                ("job-b", "sha256:c", 1, 5, None),
            ]
            for job, digest, version, at, revoked in rows:
                conn.execute(
                    text(
                        "INSERT INTO definition_approvals (tenant_id, job_definition_id, digest, version, approved_by,"
                        " approved_at, revoked_at, revoked_by) VALUES ('default', :j, :d, :v, 'ada', :at, :r, :rb)"
                    ),
                    {"j": job, "d": digest, "v": version, "at": at, "r": revoked, "rb": "root" if revoked else None},
                )
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
                conn.commit()
            upgrade(conn)
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            found = conn.execute(
                text(
                    "SELECT approval_id, job_definition_id, digest, code_digest, revoked_at FROM definition_approvals"
                    " ORDER BY approval_id"
                )
            ).all()
            assert [(r[1], r[2], r[3], r[4]) for r in found] == [
                ("job-b", "sha256:c", None, None),
                ("job-a", "sha256:a", None, None),
                ("job-a", "sha256:b", None, 30),
            ]  # in the order they were given, no code bound
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()
        drop()  # type: ignore[operator]


def test_0018_gives_each_slot_to_its_earliest_run(database_url: str, tmp_path: Path) -> None:
    """Runs of 0017 (two of one slot, made before slots were unique; a manual run): after 0018
    the earliest run of each slot holds it, the later twin and the manual run hold none."""
    from alembic import command

    from jobgate.store.migrate import upgrade

    url, drop = _fresh_url(database_url, tmp_path, "slots")
    engine = create_engine(_url(url))
    runs = [  # run id (time first), trigger id, trigger type
        ("TGJOBRUN-001", "TGTRIG-nightly@2026-03-01T02:00:00Z", "cron"),
        ("TGJOBRUN-002", "TGTRIG-nightly@2026-03-01T02:00:00Z", "backfill"),
        ("TGJOBRUN-003", "TGTRIG-nightly@2026-03-02T02:00:00Z", "backfill"),
        ("TGJOBRUN-004", "TGTRIG-by-hand", "manual"),
    ]
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
            command.upgrade(alembic_config(conn), "0017")  # type: ignore[arg-type]
            conn.commit()
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            for run_id, trigger, kind in runs:
                conn.execute(
                    text(
                        "INSERT INTO job_runs (job_run_id, tenant_id, idempotency_key, job_definition_id,"
                        " definition_version, definition_digest, job_class, trigger_id, trigger_type, trigger, scope,"
                        " params, config_snapshot_id, config_digest, status, max_attempts, priority, priority_rank,"
                        " queue, retry_policy, created_at, due_at) VALUES (:id, 'default', :id, 'job', 1, 'd',"
                        " 'MAINTENANCE_JOB', :t, :k, '{}', '{}', '{}', 's', 'c', 'SCHEDULED', 1, 'normal', 2,"
                        " 'default', 'p', 1, 1)"
                    ),
                    {"id": run_id, "t": trigger, "k": kind},
                )
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
                conn.commit()
            upgrade(conn)
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            found = conn.execute(text("SELECT job_run_id, slot FROM job_runs ORDER BY job_run_id")).all()
        assert [tuple(r) for r in found] == [
            ("TGJOBRUN-001", "TGTRIG-nightly@2026-03-01T02:00:00Z"),
            ("TGJOBRUN-002", None),
            ("TGJOBRUN-003", "TGTRIG-nightly@2026-03-02T02:00:00Z"),
            ("TGJOBRUN-004", None),
        ]
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()
        drop()  # type: ignore[operator]


def test_0021_gives_every_run_its_chain_and_seals_ended_runs_again(database_url: str, tmp_path: Path) -> None:
    """Runs of 0020 (one ended and sealed under the list rule, one still queued): after 0021 each
    row's count and chain match its transitions, the ended run has a seal under the chain rule,
    and every record verifies."""
    from alembic import command

    from helpers import define, history_values, make_config
    from jobgate.core import seals
    from jobgate.service import audit, control
    from jobgate.service.engine import Engine
    from jobgate.service.submission import SubmitRequest
    from jobgate.store.migrate import upgrade

    url, drop = _fresh_url(database_url, tmp_path, "chains")
    store = Store(url)
    try:
        engine = Engine(store, make_config(tmp_path))
        job = define(engine, handler="jobgate.standins:hello")
        ended = engine.submit(SubmitRequest(job)).run.job_run_id
        queued = engine.submit(SubmitRequest(job)).run.job_run_id
        control.cancel_run(engine, ended, actor="ops", reason="test")
        raw = create_engine(_url(url))
        try:
            with raw.connect() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SET jobgate.tenant = '*'"))
                    conn.commit()
                command.downgrade(alembic_config(conn), "0020")  # type: ignore[arg-type]
                conn.commit()
                upgrade(conn)
        finally:
            raw.dispose()
        chains = {}
        with store.read() as tx:
            for rid in (ended, queued):
                count, extent, chain = (
                    connection(tx)
                    .execute(
                        text(
                            "SELECT transition_count, history_extent, history_hash FROM job_runs WHERE job_run_id = :r"
                        ),
                        {"r": rid},
                    )
                    .one()
                )
                history = history_values(connection(tx), rid)
                assert count == extent == len(history) and chain == seals.history_of(history)
                chains[rid] = chain
            latest = (
                connection(tx)
                .execute(
                    text("SELECT history FROM record_seals WHERE record_id = :r ORDER BY id DESC LIMIT 1"), {"r": ended}
                )
                .scalar_one()
            )
            assert latest == chains[ended]  # sealed again under the chain rule
        assert all(r.ok for r in audit.verify_records(engine, ["default"]))
    finally:
        store.dispose()
        drop()  # type: ignore[operator]


def test_0024_gives_existing_retries_their_retry_of(database_url: str, tmp_path: Path) -> None:
    """Runs of 0023 (a retry, a manual run, a run whose payload is not an object, an event whose
    payload has a ``retry_of`` field): after 0024 only the retry has ``retry_of``, and the
    schema is exactly the declared one."""
    from alembic import command

    from jobgate.store.migrate import upgrade

    url, drop = _fresh_url(database_url, tmp_path, "retry_of")
    engine = create_engine(_url(url))
    retry = '{"trigger_type": "manual", "request_id": "retry-of:TGJOBRUN-001", "payload": {"retry_of": "TGJOBRUN-001"}}'
    runs = [  # run id, trigger document
        ("TGJOBRUN-001", '{"trigger_type": "manual", "payload": {}}'),
        ("TGJOBRUN-002", retry),
        ("TGJOBRUN-003", '{"payload": "retry_of"}'),
        ("TGJOBRUN-004", '{"trigger_type": "event", "payload": {"retry_of": "TGJOBRUN-001"}}'),
    ]
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
            command.upgrade(alembic_config(conn), "0023")  # type: ignore[arg-type]
            conn.commit()
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            for run_id, trigger in runs:
                conn.execute(
                    text(
                        "INSERT INTO job_runs (job_run_id, tenant_id, idempotency_key, job_definition_id,"
                        " definition_version, definition_digest, job_class, trigger_id, trigger_type, trigger, scope,"
                        " params, config_snapshot_id, config_digest, status, max_attempts, priority, priority_rank,"
                        " queue, retry_policy, created_at, due_at) VALUES (:id, 'default', :id, 'job', 1, 'd',"
                        " 'MAINTENANCE_JOB', :id, 'manual', :t, '{}', '{}', 's', 'c', 'SCHEDULED', 1, 'normal', 2,"
                        " 'default', 'p', 1, 1)"
                    ),
                    {"id": run_id, "t": trigger},
                )
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET jobgate.tenant = '*'"))
                conn.commit()
            upgrade(conn)
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL jobgate.tenant = '*'"))
            found = conn.execute(text("SELECT job_run_id, retry_of FROM job_runs ORDER BY job_run_id")).all()
        assert [tuple(r) for r in found] == [
            ("TGJOBRUN-001", None),
            ("TGJOBRUN-002", "TGJOBRUN-001"),
            ("TGJOBRUN-003", None),
            ("TGJOBRUN-004", None),  # an event's payload field, not a retry
        ]
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()
        drop()  # type: ignore[operator]
