"""SQLite: a process keeps a submission's first reads (definition, approvals, safe mode) while
the database's governance epoch says nothing they read changed (``store.sql.governance_cache``).
Whoever changes those rows — this process, another one, a person with ``sqlite3`` — the next
submission is judged on the rows as they are: the kept reads never change a verdict."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import count, define, make_config

from jobgate.core.errors import GovernanceRefusal
from jobgate.service import approvals, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


def _engine(path: Path) -> Engine:
    config = make_config(path, safe_mode={"manual_review": True, "profile_overrides": {"replay_sample_size": 50}})
    return Engine(Store(f"sqlite:///{path / 'jobgate.db'}"), config)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    engine = _engine(tmp_path)
    job = define(engine)
    yield engine, job
    engine.store.dispose()


def _verdict(engine: Engine, job: str) -> str:
    """'admitted', or the refusal's code; a refused submission stores nothing."""
    runs = count(engine, "job_runs")
    try:
        engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada")
    except GovernanceRefusal as refused:
        assert count(engine, "job_runs") == runs
        return refused.code
    return "admitted"


REVOKE = "UPDATE definition_approvals SET revoked_at = 1, revoked_by = 'x'"
UNREVOKE = "UPDATE definition_approvals SET revoked_at = NULL, revoked_by = NULL"


def _by_hand(engine: Engine, sql: str) -> None:
    """A change made outside jobgate: a plain sqlite3 connection to the same file."""
    path = str(engine.store.url).removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(sql)


def _statements(engine: Engine, job: str) -> list[str]:
    """The statements one admitted submission sends on the process's writing connection."""
    seen: list[str] = []
    with engine.store.write() as tx:
        raw = connection(tx).connection.dbapi_connection
    raw.set_trace_callback(seen.append)  # type: ignore[union-attr]
    try:
        assert _verdict(engine, job) == "admitted"
    finally:
        raw.set_trace_callback(None)  # type: ignore[union-attr]
    return seen


def test_a_second_submission_reads_no_definition_approval_or_safe_mode(site: tuple[Engine, str]) -> None:
    engine, job = site
    first = _statements(engine, job)
    second = _statements(engine, job)
    read = ("FROM definitions", "FROM definition_approvals", "FROM safe_mode_periods")
    assert all(any(r in s for s in first) for r in read)
    assert not [s for s in second if any(r in s for r in read)]
    assert any("governance_epoch" in s for s in second)


def test_a_revocation_by_hand_refuses_the_next_submission(site: tuple[Engine, str]) -> None:
    engine, job = site
    assert _verdict(engine, job) == "admitted"
    _by_hand(engine, f"{REVOKE} WHERE job_definition_id = '{job}'")
    assert _verdict(engine, job) == "definition_not_approved"
    _by_hand(engine, f"{UNREVOKE} WHERE job_definition_id = '{job}'")
    assert _verdict(engine, job) == "admitted"


def test_another_process_switching_safe_mode_on_is_seen(site: tuple[Engine, str], tmp_path: Path) -> None:
    engine, job = site
    other = _engine(tmp_path)  # another process's store on the same file
    try:
        assert _verdict(engine, job) == "admitted"
        safemode.activate(other, "default", actor="ops", reason="incident")
        assert _verdict(engine, job) != "admitted"
        safemode.deactivate(other, "default", actor="ops", reason="over")
        assert _verdict(engine, job) == "admitted"
    finally:
        other.store.dispose()


def test_what_a_rolled_back_transaction_read_is_not_kept(site: tuple[Engine, str]) -> None:
    engine, job = site
    assert _verdict(engine, job) == "admitted"
    with pytest.raises(RuntimeError), engine.store.write() as tx:
        connection(tx).exec_driver_sql(f"{REVOKE} WHERE job_definition_id = '{job}'")
        tx.read_ahead("default", job)  # reads the revocation this transaction made...
        raise RuntimeError("...and then undoes it")
    assert _verdict(engine, job) == "admitted"


def test_the_epoch_row_deleted_by_hand_leaves_submissions_judged_on_the_rows(site: tuple[Engine, str]) -> None:
    engine, job = site
    _by_hand(engine, "DELETE FROM governance_epoch")
    assert _verdict(engine, job) == "admitted"
    approvals.revoke(engine, "default", job, actor="root")
    assert _verdict(engine, job) == "definition_not_approved"


CHANGES = {
    "revoke": lambda e, j: approvals.revoke(e, "default", j, actor="root"),
    "approve": lambda e, j: approvals.approve(e, "default", j, actor="root"),
    "edit": lambda e, j: define(e, job_definition_id=j, description=f"v{count(e, 'definitions')}", approve=False),
    "safe mode on": lambda e, j: safemode.activate(e, "default", actor="ops", reason="incident"),
    "safe mode off": lambda e, j: safemode.deactivate(e, "default", actor="ops", reason="over"),
    "suspend by hand": lambda e, j: _by_hand(
        e, f"UPDATE definition_heads SET status = 'suspended' WHERE job_definition_id = '{j}'"
    ),
    "resume by hand": lambda e, j: _by_hand(
        e, f"UPDATE definition_heads SET status = 'active' WHERE job_definition_id = '{j}'"
    ),
    "revoke by hand": lambda e, j: _by_hand(e, f"{REVOKE} WHERE job_definition_id = '{j}'"),
}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(sorted(CHANGES)), st.booleans()), min_size=1, max_size=8))
def test_kept_reads_never_change_a_verdict(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, bool]]
) -> None:
    """Changes made by this process or another, each followed by a submission here: the verdict
    is the one a store that keeps nothing (opened afresh) gives."""
    path = tmp_path_factory.mktemp("epoch")
    here, there = _engine(path), _engine(path)
    try:
        job = define(here)
        assert _verdict(here, job) == "admitted"
        for change, elsewhere in steps:
            with contextlib.suppress(Exception):  # refused as it stands: nothing to revoke, on already
                CHANGES[change](there if elsewhere else here, job)
            fresh = _engine(path)
            try:
                expected = _verdict(fresh, job)
            finally:
                fresh.store.dispose()
            assert _verdict(here, job) == expected, (change, elsewhere)
    finally:
        here.store.dispose()
        there.store.dispose()


def test_a_dropped_trigger_turns_keeping_off(site: tuple[Engine, str], caplog: pytest.LogCaptureFixture) -> None:
    """A trigger dropped by hand (or with a table a tool rebuilt) no longer moves the epoch: the
    process notices the schema change, counts the triggers, and reads the rows from then on."""
    engine, job = site
    assert _verdict(engine, job) == "admitted"
    _by_hand(engine, "DROP TRIGGER governance_epoch_definition_approvals_update")
    _by_hand(engine, f"{REVOKE} WHERE job_definition_id = '{job}'")
    with caplog.at_level("WARNING", logger="jobgate.store"):
        assert _verdict(engine, job) == "definition_not_approved"
    assert "governance_epoch is missing" in caplog.text
    _by_hand(engine, f"{UNREVOKE} WHERE job_definition_id = '{job}'")
    assert _verdict(engine, job) == "admitted"


@pytest.mark.parametrize(
    "body",
    [
        "SELECT 1",  # moves nothing
        "UPDATE governance_epoch SET epoch = epoch WHERE id = 1",  # writes the row, the same value
        "UPDATE governance_epoch SET epoch = random() WHERE id = 2",  # another row
    ],
)
def test_a_trigger_created_again_with_another_body_turns_keeping_off(
    site: tuple[Engine, str], caplog: pytest.LogCaptureFixture, body: str
) -> None:
    """A trigger of the same name whose body no longer moves the epoch is as good as none: the
    process reads the triggers' text at the schema change and reads the rows from then on."""
    engine, job = site
    assert _verdict(engine, job) == "admitted"
    name = "governance_epoch_definition_approvals_update"
    _by_hand(engine, f"DROP TRIGGER {name}")
    _by_hand(engine, f"CREATE TRIGGER {name} AFTER UPDATE ON definition_approvals BEGIN {body}; END")
    with caplog.at_level("WARNING", logger="jobgate.store"):
        assert _verdict(engine, job) == "admitted"  # read under the schema as it is now
        _by_hand(engine, f"{REVOKE} WHERE job_definition_id = '{job}'")  # the epoch stays
        assert _verdict(engine, job) == "definition_not_approved"
    assert "not as migration 0033 made it" in caplog.text
    _by_hand(engine, f"{UNREVOKE} WHERE job_definition_id = '{job}'")
    assert _verdict(engine, job) == "admitted"


@pytest.mark.parametrize(
    "extra",
    [
        "CREATE TRIGGER zz_pin AFTER UPDATE ON governance_epoch"
        " BEGIN UPDATE governance_epoch SET epoch = 42 WHERE id = 1; END",
        "CREATE TRIGGER zz_pin AFTER UPDATE ON definition_approvals BEGIN UPDATE GOVERNANCE_EPOCH SET epoch = 42; END",
    ],
)
def test_another_trigger_naming_the_epoch_turns_keeping_off(
    site: tuple[Engine, str], caplog: pytest.LogCaptureFixture, extra: str
) -> None:
    """Found by a regression review: every trigger of migration 0033 in place, and one more that
    sets the epoch back to a value it had: a revocation by hand left the kept reading served."""
    engine, job = site
    _by_hand(engine, "UPDATE governance_epoch SET epoch = 42 WHERE id = 1")
    _by_hand(engine, extra)
    with caplog.at_level("WARNING", logger="jobgate.store"):
        assert _verdict(engine, job) == "admitted"
        _by_hand(engine, f"{REVOKE} WHERE job_definition_id = '{job}'")  # the epoch moves, and is pinned back
        assert _verdict(engine, job) == "definition_not_approved"
    assert "another trigger names it" in caplog.text


def test_each_database_starts_with_its_own_epoch(tmp_path: Path) -> None:
    """Two files migrated afresh (or one restored from a copy made before the epoch existed and
    migrated again) never share a first value a process could have kept readings under."""
    epochs = set()
    for name in ("a", "b", "c"):
        store = Store(f"sqlite:///{tmp_path / name}.db")
        with store.read() as tx:
            epochs.add(connection(tx).exec_driver_sql("SELECT epoch FROM governance_epoch").scalar_one())
        store.dispose()
    assert len(epochs) == 3


def test_a_relative_file_is_the_same_file_after_the_process_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///jobgate.db`` names the file in the directory the store was opened in; a
    handler's ``os.chdir`` later refused every transaction (the file looked replaced) and a
    connection opened afterwards would have made a new database there."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    engine = Engine(Store("sqlite:///jobgate.db"), make_config(tmp_path))
    try:
        job = define(engine)
        assert _verdict(engine, job) == "admitted"
        monkeypatch.chdir(tmp_path / "elsewhere")
        assert _verdict(engine, job) == "admitted"
        assert count(engine, "job_runs") == 2
        assert not (tmp_path / "elsewhere" / "jobgate.db").exists()
    finally:
        engine.store.dispose()
