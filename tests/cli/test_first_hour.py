"""The first hour's traps, closed (issue: the first hour): nothing creates or migrates a
database implicitly, ``--db`` takes a path or a URL, an unreachable database is named with its
host and the cause (exit 69, not an internal error), ``jobgate migrate [--check]`` is the one
door to the schema, and ``--version`` says which build this is."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine
from tests.cli.test_cli import ENV, jobgate

from jobgate.store.migrate import HEAD, alembic_config


def test_a_folder_without_configuration_gets_no_database_and_is_told_what_to_run(tmp_path: Path) -> None:
    for args in (("runs", "list"), ("doctor",), ("definitions", "list"), ("worker", "--exit-when-idle")):
        proc = jobgate(tmp_path, *args, check=False)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "no jobgate.yaml here — run `jobgate init` or pass --config" in proc.stderr
        assert "Traceback" not in proc.stderr and "internal" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created: no database, no lock file


def test_migrate_without_a_folder_or_a_named_database_makes_nothing(tmp_path: Path) -> None:
    refused = jobgate(tmp_path, "migrate", check=False)
    assert refused.returncode == 1 and "no jobgate.yaml here" in refused.stderr and "--db" in refused.stderr
    assert list(tmp_path.iterdir()) == []  # no database nothing else would open, no lock file


def test_init_with_a_database_writes_it_into_the_folder_so_every_command_opens_it(tmp_path: Path) -> None:
    """``init --db`` set up that database but left the folder pointing at a new SQLite file: its
    own "next:" command then failed. The folder's configuration now names the database given."""
    jobgate(tmp_path, "--db", "state/jobs.db", "init", "site")
    folder = tmp_path / "site"
    assert (
        f'database: "sqlite:///{(tmp_path / "state" / "jobs.db").as_posix()}"' in (folder / "jobgate.yaml").read_text()
    )
    made = jobgate(folder, "--json", "submit", "demo-hello", "--param", "name=you")
    assert "job_run_id" in made.stdout and not (folder / "jobgate.db").exists()
    listed = jobgate(tmp_path, "--db", "state/jobs.db", "--json", "runs", "list").stdout
    assert "demo-hello" in listed  # the run is in the database init was given


def test_a_failed_init_leaves_nothing_it_made_and_can_be_run_again(tmp_path: Path) -> None:
    """Found by a review: an init whose database could not be made left a half-made folder, and
    the same command again was refused (its jobgate.yaml existed); a database path under a file
    was an internal error (exit 70). Nothing init made stays; what was there before does."""
    (tmp_path / "afile").write_text("in the way\n")
    failed = jobgate(tmp_path, "--db", "afile/x.db", "init", "site", check=False)
    assert failed.returncode == 1 and "cannot make the database's folder" in failed.stderr
    assert not (tmp_path / "site").exists()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine\n")
    failed = jobgate(tmp_path, "--db", "afile/x.db", "init", "kept", check=False)
    assert failed.returncode == 1 and sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["notes.txt"]
    made = jobgate(tmp_path, "init", "kept")  # the same folder, the default database: it works now
    assert made.returncode == 0 and (tmp_path / "kept" / "jobgate.yaml").exists()


def test_db_takes_a_path_or_a_url_and_migrate_is_the_one_door(tmp_path: Path) -> None:
    missing = jobgate(tmp_path, "--db", "state/jobs.db", "runs", "list", check=False)
    assert missing.returncode == 1 and "no database at" in missing.stderr and "jobgate migrate" in missing.stderr
    assert not (tmp_path / "state").exists()
    check = jobgate(tmp_path, "--db", "state/jobs.db", "migrate", "--check", check=False)
    assert check.returncode == 1 and not (tmp_path / "state" / "jobs.db").exists()
    made = jobgate(tmp_path, "--db", "state/jobs.db", "migrate")
    assert f"schema {HEAD}" in made.stdout and (tmp_path / "state" / "jobs.db").exists()
    assert made.stdout.startswith("created a new database")  # a mistyped path would be seen at once
    again = jobgate(tmp_path, "--db", "state/jobs.db", "migrate")
    assert "created" not in again.stdout and f"is at schema {HEAD}" in again.stdout
    bad_port = jobgate(tmp_path, "--db", "postgresql://u:s3cret@127.0.0.1:abc/x", "runs", "list", check=False)
    assert bad_port.returncode == 1 and "--db" in bad_port.stderr and "s3cret" not in bad_port.stderr
    assert jobgate(tmp_path, "--db", "state/jobs.db", "migrate", "--check").returncode == 0
    url = f"sqlite:///{(tmp_path / 'state' / 'jobs.db').as_posix()}"
    assert jobgate(tmp_path, "--db", url, "--json", "runs", "list").stdout.strip() == "[]"
    assert jobgate(tmp_path, "--db", "state/jobs.db", "--json", "runs", "list").stdout.strip() == "[]"
    other = jobgate(tmp_path, "--db", "mysql://db/jobs", "runs", "list", check=False)
    assert other.returncode == 1 and "--db" in other.stderr and "unsupported database 'mysql'" in other.stderr


def test_an_older_schema_is_refused_until_migrated_and_never_migrated_by_the_way(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    database = folder / "jobgate.db"
    engine = create_engine(f"sqlite:///{database.as_posix()}")
    with engine.connect() as conn:  # the database of the jobgate before this one
        command.downgrade(alembic_config(conn), "0020")  # type: ignore[arg-type]
        conn.commit()
    engine.dispose()
    for args in (("runs", "list"), ("worker", "--exit-when-idle"), ("scheduler", "--once")):
        proc = jobgate(folder, *args, check=False)
        assert proc.returncode == 1 and f"is at schema 0020; this jobgate needs {HEAD}" in proc.stderr, args
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0020",)
    assert jobgate(folder, "migrate", "--check", check=False).returncode == 1
    assert jobgate(folder, "worker", "--migrate", "--exit-when-idle").returncode == 0
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (HEAD,)
    assert jobgate(folder, "migrate", "--check").returncode == 0


def test_an_unreachable_postgresql_is_named_with_its_host_and_exit_69(tmp_path: Path) -> None:
    proc = jobgate(tmp_path, "--db", "postgresql://jobgate@127.0.0.1:1/jobs", "runs", "list", check=False)
    assert proc.returncode == 69, proc.stderr
    assert "cannot reach the database at 127.0.0.1:1/jobs" in proc.stderr and "refused" in proc.stderr
    assert "internal" not in proc.stderr and "Traceback" not in proc.stderr


def test_version_names_the_build_and_the_schema_it_needs(tmp_path: Path) -> None:
    import jobgate as package

    out = jobgate(tmp_path, "--version").stdout.strip()
    assert out.startswith(f"jobgate {package.__version__} (schema {HEAD}, Python 3.")
    assert list(tmp_path.iterdir()) == []


def test_runs_log_prints_the_handlers_output_and_follow_ends_with_the_run(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    run_id = jobgate(folder, "submit", "demo-hello", "--param", "name=ada").stdout.strip()
    none_yet = jobgate(folder, "runs", "log", run_id, check=False)
    assert none_yet.returncode == 1 and "no log" in none_yet.stderr
    watching = subprocess.Popen(  # follows a run that has not started: waits, prints, ends with it
        [sys.executable, "-m", "jobgate", "runs", "log", run_id, "--follow"],
        cwd=folder,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    jobgate(folder, "worker", "--exit-when-idle")
    out, err = watching.communicate(timeout=60)
    assert watching.returncode == 0, err
    assert "Hello, ada!" in out
    log = jobgate(folder, "runs", "log", run_id).stdout
    assert log.startswith("[jobgate] attempt 1\n") and "Hello, ada!" in log
    assert jobgate(folder, "runs", "log", run_id, "--tail", "1").stdout == "Hello, ada!\n"
    followed = jobgate(folder, "runs", "log", run_id, "--follow", timeout=30).stdout  # the run has ended: returns
    assert followed == log


def test_the_readmes_schedule_file_is_in_the_folder_and_a_dry_backfill_lists_its_slots(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    assert "1 schedules applied (1 new)" in jobgate(folder, "schedules", "apply", "schedules.yaml").stdout
    dry = jobgate(
        folder, "backfill", "demo-window", "--from", "2026-12-01T00:00:00Z", "--to", "2026-12-01T03:00:00Z", "--dry-run"
    ).stdout
    for hour in ("01", "02", "03"):
        assert f"2026-12-01T{hour}:00:00Z" in dry
    assert dry.count("would be created") == 4  # three slots, and the summary line
    assert jobgate(folder, "--json", "runs", "list").stdout.strip() == "[]"  # a dry run stores nothing


def test_run_tables_fit_80_columns_and_their_short_ids_are_accepted(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    run_id = jobgate(folder, "submit", "demo-hello", "--param", "name=ada").stdout.strip()
    table = jobgate(folder, "runs", "list").stdout
    assert max(len(line) for line in table.splitlines()) <= 80, table
    short = run_id[-12:]
    assert short in table and run_id not in table
    assert run_id in jobgate(folder, "runs", "list", "--wide").stdout
    assert run_id in jobgate(folder, "runs", "show", short).stdout
    jobgate(folder, "runs", "cancel", short, "--reason", "by its short id")
    shown = jobgate(folder, "--json", "runs", "show", short).stdout
    assert '"status": "CANCELLED"' in shown
    missing = jobgate(folder, "runs", "show", "0123456789ab", check=False)
    assert missing.returncode == 1 and "no run whose id ends with '0123456789ab'" in missing.stderr
    remote = jobgate(folder, "--server", "http://127.0.0.1:1", "--token", "t", "runs", "show", short, check=False)
    assert remote.returncode == 69 and "cannot reach" in remote.stderr  # looked up on the server, like the rest
    assert "unavailable" in remote.stderr  # as an unreachable database says it: not the caller's input


def test_a_misdeployed_worker_burns_no_run(tmp_path: Path) -> None:
    """A worker probes what it can execute before it claims: one that cannot import a run's code,
    or lacks its runner, claims neither (both stay queued, no attempt used) and advertises what
    it cannot run; a worker that can runs each to the end."""
    import json

    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    (folder / "src" / "mypkg").mkdir(parents=True)
    (folder / "src" / "mypkg" / "__init__.py").write_text("")
    (folder / "src" / "mypkg" / "jobs.py").write_text("def run(ctx):\n    print('ran here')\n")
    (folder / "my-job.yaml").write_text(
        "job_definition_id: my-job\njob_class: MAINTENANCE_JOB\nhandler: mypkg.jobs:run\n"
    )
    lines = (folder / "jobgate.yaml").read_text().splitlines(keepends=True)
    bare, skipping = [], False
    for line in lines:  # the same configuration without its runners block and default runner
        if line.startswith("runners:"):
            skipping = True
            continue
        if skipping and (line.startswith((" ", "#")) or not line.strip()):
            continue
        skipping = False
        if not line.startswith("default_runner"):
            bare.append(line)
    (folder / "bare.yaml").write_text("".join(bare))
    with_code = {**ENV, "PYTHONPATH": str(folder / "src")}

    def run_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobgate", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60
        )

    def shown(run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(jobgate(folder, "--json", "runs", "show", run_id).stdout)
        return found

    assert run_with(with_code, "apply", "my-job.yaml", "--approve").returncode == 0
    mine = jobgate(folder, "submit", "my-job").stdout.strip()
    report = jobgate(folder, "submit", "demo-report", "--param", "title=t", "--param", "rows=2").stdout.strip()
    without = run_with(ENV, "--config", "bare.yaml", "worker", "--exit-when-idle")  # no mypkg, no runners
    assert without.returncode == 0, without.stderr
    for run_id in (mine, report):
        waiting = shown(run_id)
        assert (waiting["run"]["status"], waiting["run"]["attempt"]) == ("SCHEDULED", 0)
        assert [t["to_status"] for t in waiting["transitions"]] == ["CREATED", "SCHEDULED"]  # never claimed
    assert "cannot run demo-report" in without.stderr and "cannot run my-job" in without.stderr
    # and it says, as it stops, what it left waiting (found by a review: it stopped in silence)
    assert "2 run(s) of demo-report, my-job still wait: this worker cannot run them here" in without.stderr
    (advertised,) = json.loads(jobgate(folder, "--json", "workers", "--all").stdout)
    assert {"demo-report", "my-job"} <= set(advertised["cannot_run"])
    assert "demo-hello" not in advertised["cannot_run"]  # a handler of jobgate's own: it runs anywhere
    assert run_with(with_code, "worker", "--exit-when-idle").returncode == 0
    assert shown(mine)["run"]["status"] == "COMPLETED"
    assert shown(report)["run"]["status"] == "COMPLETED"
    assert "ran here" in jobgate(folder, "runs", "log", mine).stdout


def test_a_red_doctor_says_which_checks_are_red_as_not_ready(tmp_path: Path) -> None:
    """Found by a review: a fresh folder's doctor ended with ``validation_error: at least one
    check is red``, as if the command had been given something invalid."""
    jobgate(tmp_path, "init", "site")
    checked = jobgate(tmp_path / "site", "doctor", check=False)
    assert checked.returncode == 1
    assert "error: not_ready: doctor: red: scheduler leader" in checked.stderr


def test_apply_approve_reads_every_approvals_code_before_storing_any(tmp_path: Path) -> None:
    """Found by a review: ``apply --approve a.yaml b.yaml`` with b's ``code:`` path missing
    stored and approved a, then failed on b, saying nothing of a. Nothing is stored now."""
    jobgate(tmp_path, "init", "site")
    site = tmp_path / "site"
    (site / "z1.yaml").write_text(
        "job_definition_id: z1\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
    )
    (site / "z2.yaml").write_text(
        "job_definition_id: z2\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\ncode: [nope/x.py]\n"
    )
    refused = jobgate(site, "apply", "--approve", "z1.yaml", "z2.yaml", check=False)
    assert refused.returncode == 1 and "nope/x.py" in refused.stderr
    listed = jobgate(site, "--json", "definitions", "list").stdout
    assert '"z1"' not in listed and '"z2"' not in listed


def test_a_database_named_without_a_configuration_says_the_built_in_one_applies(tmp_path: Path) -> None:
    """Found by a review: ``jobgate --db site/jobgate.db submit`` from outside the folder bound the
    run to the built-in configuration (no profiles of the folder's) and nothing said so."""
    jobgate(tmp_path, "init", "site")
    outside = jobgate(tmp_path, "--db", "site/jobgate.db", "--json", "submit", "demo-hello", "--param", "name=ada")
    assert outside.stderr.count("note: no jobgate.yaml here: the built-in configuration applies") == 1
    inside = jobgate(tmp_path / "site", "--json", "submit", "demo-hello", "--param", "name=bo")
    assert "note:" not in inside.stderr
    named = jobgate(tmp_path, "--db", "site/jobgate.db", "--config", "site/jobgate.yaml", "--json", "runs", "list")
    assert "note:" not in named.stderr


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite:///", "names a file"),
        ("sqlite://", "names a file"),
        ("sqlite:///:memory:", "names a file"),
        ("sqlite://relative.db", "not a host"),
        ("sqlite://user@host/x.db", "not a host"),
        ("sqlite:////tmp/x.db?x=1", "unknown SQLite option 'x'"),
        ("sqlite:///x.db?timeout=5", "unknown SQLite option 'timeout'"),
        ("sqlite:///x.db?timeout=5&timeout=6", "unknown SQLite option 'timeout'"),
        ("sqlite:///x.db?check_same_thread=maybe", "unknown SQLite option"),
        ("sqlite:///file:x.db?mode=memory&uri=true", "unknown SQLite option"),
        ("sqlite:///file::memory:", "names a file"),
    ],
)
def test_a_malformed_sqlite_url_is_refused_naming_the_form(url: str, says: str) -> None:
    """Found by a review: these were internal errors (exit 70) or passed on with warnings."""
    from jobgate.core.errors import ConfigurationError
    from jobgate.store.opening import database_url

    with pytest.raises(ConfigurationError) as refused:
        database_url(url)
    assert refused.value.field == "--db" and says in refused.value.message


def test_a_sqlite_url_names_its_file_only(tmp_path: Path) -> None:
    from jobgate.store.opening import database_url

    assert database_url("sqlite:///jobs.db") == "sqlite:///jobs.db"
    refused = jobgate(tmp_path, "--db", "sqlite:///", "runs", "list", check=False)
    assert refused.returncode == 1 and "internal" not in refused.stderr and "names a file" in refused.stderr


def test_refusals_say_their_kind_a_typo_in_server_is_not_an_outage(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    for args in (("definitions", "show", "nope"), ("next", "nope")):
        missing = jobgate(folder, *args, check=False)
        assert missing.returncode == 1 and missing.stderr.startswith("error: not_found:"), (args, missing.stderr)
    for server in (
        "notaurl",
        "ftp://host",
        "http://",
        "http://[::1",
        "http://127.0.0.1:1?x=1",
        "http://a b",
        "http://h:99999",
        "http://127.0.0.1:1/?",
        "http://ops:S3cret@127.0.0.1:1",
    ):
        typo = jobgate(folder, "--server", server, "--token", "x", "runs", "list", check=False)
        assert typo.returncode == 1 and "configuration_error: --server" in typo.stderr, typo.stderr
        assert "S3cret" not in typo.stderr  # what was typed is not repeated: it may hold a password
    down = jobgate(folder, "--server", "http://127.0.0.1:1", "--token", "x", "runs", "list", check=False)
    assert down.returncode == 69 and "unavailable" in down.stderr
    quiet = jobgate(folder, "plugins", "verify")
    assert "no plugins to verify" in quiet.stdout


def test_who_acts_is_refused_when_it_would_not_print_as_itself(tmp_path: Path) -> None:
    """Found by a regression review: ``--by`` with a terminal escape was stored and printed raw."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    for args in (
        ("safe-mode", "on", "--reason", "ok", "--by", "evil\x1b[2Jx"),
        ("submit", "demo-hello", "--by", "a\u202eb"),
        ("definitions", "approve", "demo-hello", "--by", "two\nlines"),
    ):
        refused = jobgate(folder, *args, check=False)
        assert refused.returncode == 2 and "--by" in refused.stderr, (args, refused.stderr)
    assert "off" in jobgate(folder, "safe-mode", "status").stdout
    assert json.loads(jobgate(folder, "--json", "runs", "list").stdout) == []


def test_the_demo_runners_run_the_python_that_ran_init_whatever_the_path(tmp_path: Path) -> None:
    """Found by a review: the demo's runners said ``binary: python3``, looked up on the PATH of
    each worker and bound (its bytes) into the approved code digest: activating a virtual
    environment after ``jobgate demo`` held every runner run as ``code_changed``. ``init`` names
    the Python that ran it; another ``python3`` first on the PATH is never run."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    config = (folder / "jobgate.yaml").read_text()
    assert "binary: python3" not in config and f"binary: {json.dumps(sys.executable)}" in config
    other = tmp_path / "otherbin"
    other.mkdir()
    stranger = other / "python3"
    stranger.write_text(f"#!/bin/sh\ntouch {tmp_path / 'stranger-ran'}\nexit 1\n")
    stranger.chmod(0o755)
    env = {**ENV, "PATH": f"{other}:{ENV.get('PATH', '')}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobgate", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120
        )

    made = run("--json", "submit", "demo-report")
    assert made.returncode == 0, made.stderr
    run_id = json.loads(made.stdout)["job_run_id"]
    assert run("worker", "--exit-when-idle").returncode == 0
    shown = json.loads(run("--json", "runs", "show", run_id).stdout)
    assert shown["run"]["status"] == "COMPLETED", shown["run"]
    assert not (tmp_path / "stranger-ran").exists()
