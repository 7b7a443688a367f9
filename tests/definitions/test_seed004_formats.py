"""Seed 004's file formats and start-up loading, taken from the seed's text: the runners.yaml
("Runners"), the schedule seed file ("Schedule seed file"), and scenario files loaded once at
start-up from a folder ("Scenario approval", "Run": ``--scenarios ./scenarios``), stored through
the same door as ``jobgate apply``: all or nothing, unchanged content makes no new version,
changed content a new one that needs approving; an invalid file refuses the start."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from tests.api.test_server_process import free_port, wait_ready
from tests.cli.test_cli import ENV
from tests.helpers import count, make_config

from jobgate.config import JobgateConfig, build_config, load_config
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.definitions import load_definitions
from jobgate.scheduling import magic
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.service.schedules import PutOutcome, put_schedules, schedule_from_document
from jobgate.service.startup import load_at_startup
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

PY = sys.executable

# Seed 004 "Scenario file", verbatim.
SEED_SCENARIO = """orchestrator:
  name: export-payroll
  description: "Payroll export by period"
  runner: tdtpcli              # optional — omit to use the configured default
  permissions: [etl, enc]      # must be covered by license ∩ Mercury env
  params:
    - name: period
      required: true
      pattern: '^\\d{4}-\\d{2}$'

# Below: normal pipeline YAML; {{.period}} substituted before tdtpcli runs.
sources:
  - name: payroll
    type: mssql
    query: "SELECT * FROM Payroll WHERE Period = '{{.period}}'"
"""

# Seed 004 "Runners": runners.yaml, verbatim but for the binaries (one that exists here).
SEED_RUNNERS = f"""# runners.yaml
runners:
  tdtpcli:
    binary: {PY}
    args: ["--pipeline", "{{{{.tmpfile}}}}"]
  python-etl:
    binary: {PY}
    args: ["etl_runner.py", "--config", "{{{{.tmpfile}}}}", "--period", "{{{{.period}}}}"]
  powershell:
    binary: {PY}
    args: ["-File", "{{{{.tmpfile}}}}"]
"""

# Seed 004 "Schedule seed file", verbatim.
SEED_SCHEDULES = """schedules:
  - id: monthly-payroll
    scenario: export-payroll
    schedule: "0 2 1 * *"        # 1st of month, 02:00
    params:
      period: "{{current_month}}"   # → 2026-06 at run time
"""

UNREGISTERED = SEED_SCENARIO.replace("runner: tdtpcli", "runner: nope").replace("export-payroll", "bad-runner")


def seed_config(base: Path, **overrides: object) -> JobgateConfig:
    """The test configuration with the seed's runners file and ``base/scenarios`` loaded at start."""
    (base / "runners.yaml").write_text(SEED_RUNNERS)
    return make_config(base, runners_file="runners.yaml", definitions=["scenarios"], **overrides)


def scenario(base: Path, name: str, text: str) -> Path:
    path = base / "scenarios" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def stored_versions(engine: Engine, job: str) -> list[int]:
    with engine.store.read() as tx:
        return [v.version for v in tx.definition_versions("default", job)]


def stored_ids(engine: Engine) -> list[str]:
    with engine.store.read() as tx:
        return [d.job_definition_id for d in tx.definitions_list("default")]


# ---------------------------------------------------------------------------- runners
def test_seed_runners_file_is_accepted_as_written(tmp_path: Path) -> None:
    config = seed_config(tmp_path)
    assert {"powershell", "python-etl", "tdtpcli"} <= set(config.runners)
    etl = config.runners["python-etl"]
    assert etl.args == ("etl_runner.py", "--config", "{{.tmpfile}}", "--period", "{{.period}}")
    # Handed the body through seed 004's dotted {{.tmpfile}}: taken to execute it (deny by default).
    assert all(config.runners[name].executes_body for name in ("powershell", "python-etl", "tdtpcli"))


def test_seed_runners_inline_in_jobgate_yaml(tmp_path: Path) -> None:
    (tmp_path / "jobgate.yaml").write_text(SEED_RUNNERS.replace("# runners.yaml\n", ""))
    config = load_config(tmp_path)
    assert config.runners["tdtpcli"].args == ("--pipeline", "{{.tmpfile}}")
    assert config.runners["tdtpcli"].executes_body


def test_a_runner_named_in_both_places_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runners.yaml").write_text(SEED_RUNNERS)
    with pytest.raises(ConfigurationError) as err:
        build_config(
            {"runners_file": "runners.yaml", "runners": {"tdtpcli": {"binary": PY}}}, base_dir=tmp_path, path=None
        )
    assert err.value.field == "runners.tdtpcli"
    assert "runners.yaml" in err.value.message


def test_the_runners_file_is_read_strictly(tmp_path: Path) -> None:
    (tmp_path / "runners.yaml").write_text(SEED_RUNNERS.replace("    binary:", "    binray:", 1))
    with pytest.raises(ConfigurationError) as err:
        build_config({"runners_file": "runners.yaml"}, base_dir=tmp_path, path=None)
    assert err.value.source == str(tmp_path / "runners.yaml")
    assert err.value.field == "runners.tdtpcli.binray"
    with pytest.raises(ConfigurationError) as missing:
        build_config({"runners_file": "absent.yaml"}, base_dir=tmp_path, path=None)
    assert "absent.yaml" in str(missing.value)


# ---------------------------------------------------------------------------- schedule seed file
def seed_schedule_entry() -> dict[str, object]:
    from jobgate.documents import parse_yaml

    document = parse_yaml(SEED_SCHEDULES, source="schedules.yaml")
    entry = document["schedules"][0]
    assert isinstance(entry, dict)
    return entry


def test_seed_schedule_entry_reads_scenario_and_schedule_as_job_and_cron() -> None:
    now = datetime(2026, 5, 20, tzinfo=UTC)
    s = schedule_from_document(seed_schedule_entry(), now=now, source="schedules.yaml")
    assert (s.schedule_id, s.job_definition_id, s.cron) == ("monthly-payroll", "export-payroll", "0 2 1 * *")
    assert s.params == {"period": "{{current_month}}"}
    fire = datetime(2026, 6, 1, 2, 0, tzinfo=UTC)
    assert magic.render(s.params, fire, ZoneInfo("UTC"), None) == {"period": "2026-06"}
    both = {"current_date": "{{current_date}}", "yesterday": "{{yesterday}}"}
    assert magic.render(both, fire, ZoneInfo("UTC"), None) == {"current_date": "2026-06-01", "yesterday": "2026-05-31"}


@pytest.mark.parametrize(("alias", "original", "value"), [("scenario", "job", "x"), ("schedule", "cron", "* * * * *")])
def test_an_alias_beside_its_original_is_refused_naming_both(alias: str, original: str, value: str) -> None:
    entry = {**seed_schedule_entry(), original: value}
    with pytest.raises(ValidationError) as err:
        schedule_from_document(entry, now=datetime(2026, 5, 20, tzinfo=UTC), source="schedules.yaml")
    assert err.value.field == f"{original}, {alias}"
    assert alias in err.value.message and original in err.value.message
    assert err.value.source == "monthly-payroll"


def test_seed_schedule_file_is_stored_for_the_seed_scenario(engine: Engine, tmp_path: Path) -> None:
    engine = Engine(engine.store, seed_config(tmp_path))
    scenario(tmp_path, "export-payroll.yaml", SEED_SCENARIO)  # both files as the seed writes them
    load_at_startup(engine, applied_by="ops")
    approvals.approve(engine, "default", "export-payroll", actor="admin")
    now = engine.clock.now()
    item = schedule_from_document(seed_schedule_entry(), now=now, source="schedules.yaml")
    assert put_schedules(engine, [item], source="schedules.yaml", now=now, actor="ops") == [PutOutcome.CREATED]
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "monthly-payroll")
    assert stored is not None
    assert (stored.schedule.job_definition_id, stored.schedule.cron) == ("export-payroll", "0 2 1 * *")
    assert stored.schedule.params == {"period": "{{current_month}}"}


# ---------------------------------------------------------------------------- start-up load
def test_startup_load_is_apply_once_per_content(engine: Engine, tmp_path: Path) -> None:
    engine = Engine(engine.store, seed_config(tmp_path))
    path = scenario(tmp_path, "export-payroll.yaml", SEED_SCENARIO)
    first = load_at_startup(engine, applied_by="ops")
    assert (len(first.results), first.created, first.unchanged) == (1, 1, 0)
    assert "1 (1 new versions awaiting approval, 0 unchanged)" in first.summary()
    assert not approvals.status(engine, "default", "export-payroll").approved  # loading is not approving
    approvals.approve(engine, "default", "export-payroll", actor="admin")
    again = load_at_startup(engine, applied_by="ops")
    assert (again.created, again.unchanged) == (0, 1)
    assert stored_versions(engine, "export-payroll") == [1]
    assert approvals.status(engine, "default", "export-payroll").approved
    path.write_text(SEED_SCENARIO.replace("Payroll export by period", "Payroll export, by period"))
    changed = load_at_startup(engine, applied_by="ops")
    assert changed.created == 1
    assert stored_versions(engine, "export-payroll") == [1, 2]
    assert not approvals.status(engine, "default", "export-payroll").approved  # edited: approve again
    # v2 approved, then the first content back, as a host whose folder was not updated has it:
    # found by a review, its restart made v1 current again for the whole cluster, approved code
    # and all. The approved current version stays, and the load says so; an apply rolls back.
    approvals.approve(engine, "default", "export-payroll", actor="admin")
    path.write_text(SEED_SCENARIO)
    back = load_at_startup(engine, applied_by="ops")
    assert (back.created, len(back.reverted), len(back.stale), back.unchanged) == (0, 0, 1, 0)
    assert (
        "1 (0 new versions awaiting approval, 0 unchanged, 1 older than the current version (kept))" in back.summary()
    )
    (warning,) = back.warnings()
    assert "holds version 1's content; version 2 stays current" in warning and "jobgate apply" in warning
    with engine.store.read() as tx:
        head = tx.definition_get("default", "export-payroll")
    assert head is not None and head.version == 2
    (rolled,) = engine.apply_definitions(load_definitions([path.parent], engine.config), applied_by="ops")
    assert (rolled.version, rolled.reverted) == (1, True)
    assert approvals.status(engine, "default", "export-payroll").approved


def test_a_file_restored_after_an_edit_nobody_approved_is_current_again_at_start_up(
    engine: Engine, tmp_path: Path
) -> None:
    """Found by a regression review of the rule above: an edit nobody approved (v2), then the
    file restored to the approved v1, left v2 current and the definition refused until someone
    applied by hand. Nothing approved is displaced by going back to v1: it is current again."""
    engine = Engine(engine.store, seed_config(tmp_path))
    path = scenario(tmp_path, "export-payroll.yaml", SEED_SCENARIO)
    load_at_startup(engine, applied_by="ops")
    approvals.approve(engine, "default", "export-payroll", actor="admin")
    path.write_text(SEED_SCENARIO.replace("Payroll export by period", "Payroll export, by period"))
    assert load_at_startup(engine, applied_by="ops").created == 1  # v2, never approved
    path.write_text(SEED_SCENARIO)
    back = load_at_startup(engine, applied_by="ops")
    assert (len(back.reverted), len(back.stale), back.warnings()) == (1, 0, [])
    assert approvals.status(engine, "default", "export-payroll").approved  # v1, as approved


def test_an_unregistered_runner_refuses_the_whole_load(engine: Engine, tmp_path: Path) -> None:
    engine = Engine(engine.store, seed_config(tmp_path))
    scenario(tmp_path, "a-export-payroll.yaml", SEED_SCENARIO)  # valid, and read first
    bad = scenario(tmp_path, "b-bad-runner.yaml", UNREGISTERED)
    with pytest.raises(ValidationError) as err:
        load_at_startup(engine, applied_by="ops")
    assert (err.value.source, err.value.field) == (str(bad), "orchestrator.runner")  # as the author wrote it
    assert "nope" in err.value.message
    assert stored_ids(engine) == []  # all or nothing


def test_a_configured_folder_that_is_missing_refuses(engine: Engine, tmp_path: Path) -> None:
    engine = Engine(engine.store, seed_config(tmp_path))  # definitions: [scenarios], never created
    with pytest.raises(ValidationError) as err:
        load_at_startup(engine, applied_by="ops")
    assert err.value.field == "definitions"
    assert str(tmp_path / "scenarios") in err.value.message


def test_the_default_folder_absent_loads_nothing(engine: Engine, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    assert not config.definitions_configured and not (tmp_path / "definitions").exists()
    loaded = load_at_startup(Engine(engine.store, config), applied_by="ops")
    assert loaded.results == () and loaded.folders == ()


def test_a_runner_gone_since_the_load_is_refused_at_request_time(engine: Engine, tmp_path: Path) -> None:
    loading = Engine(engine.store, seed_config(tmp_path))
    scenario(tmp_path, "export-payroll.yaml", SEED_SCENARIO)
    load_at_startup(loading, applied_by="ops")
    approvals.approve(loading, "default", "export-payroll", actor="admin")
    (tmp_path / "runners.yaml").write_text(SEED_RUNNERS.replace("  tdtpcli:", "  tdtp-other:"))
    today = Engine(engine.store, make_config(tmp_path, runners_file="runners.yaml"))
    with pytest.raises(ValidationError) as err:
        today.submit(SubmitRequest("export-payroll", params={"period": "2026-06"}), actor="ada")
    assert err.value.field == "runner"
    assert count(engine, "job_runs") == 0  # refused before touching the database


def test_two_processes_starting_at_once_store_each_version_once(database_url: str, tmp_path: Path) -> None:
    config = seed_config(tmp_path)
    for i in range(3):
        scenario(tmp_path, f"s{i}.yaml", SEED_SCENARIO.replace("export-payroll", f"export-{i}"))
    stores = [Store(database_url), Store(database_url)]
    barrier = threading.Barrier(2)
    results: list[int] = []
    errors: list[BaseException] = []

    def start(store: Store) -> None:
        try:
            engine = Engine(store, config)
            barrier.wait(timeout=30)
            results.append(load_at_startup(engine, applied_by="ops").created)
        except BaseException as exc:  # reported below, with the other thread's outcome
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert errors == []
        assert sum(results) == 3  # each version created by exactly one of the two
        engine = Engine(stores[0], config)
        for i in range(3):
            assert stored_versions(engine, f"export-{i}") == [1]
    finally:
        for s in stores:
            s.dispose()


# ---------------------------------------------------------------------------- real processes
def site(tmp_path: Path, database_url: str, *scenarios: tuple[str, str]) -> Path:
    """A deployment folder as seed 004 "Run" has it: scenarios, runners.yaml, the database."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "runners.yaml").write_text(SEED_RUNNERS)
    (folder / "jobgate.yaml").write_text(
        f"database: '{database_url}'\n"
        "definitions: [scenarios]\n"
        "runners_file: runners.yaml\n"
        "default_runner: tdtpcli\n"
        "events: {log: false}\n"
    )
    for name, text in scenarios:
        scenario(folder, name, text)
    return folder


def run_jobgate(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", *args], cwd=folder, env=ENV, capture_output=True, text=True, timeout=120
    )


def test_jobgate_serve_loads_the_scenarios_folder(database_url: str, tmp_path: Path) -> None:
    folder = site(tmp_path, database_url, ("export-payroll.yaml", SEED_SCENARIO))
    port = free_port()
    log = folder / "serve.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobgate", "serve", "--port", str(port), "--no-auth"],
            cwd=folder,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log)
        text = log.read_text()
        assert "definitions loaded at start-up from" in text
        assert "1 (1 new versions awaiting approval, 0 unchanged)" in text
        listed = httpx.get(f"{url}/api/v1/definitions", timeout=10)
        assert listed.status_code == 200, listed.text
        assert "export-payroll" in listed.text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0, log.read_text()
    # The separate scheduler process loads through the same door: unchanged now, then a new version.
    again = run_jobgate(folder, "scheduler", "--once")
    assert again.returncode == 0, again.stderr
    assert "0 new versions awaiting approval, 1 unchanged" in again.stderr
    path = folder / "scenarios" / "export-payroll.yaml"
    path.write_text(path.read_text().replace("by period", "per period"))
    edited = run_jobgate(folder, "scheduler", "--once")
    assert "1 new versions awaiting approval, 0 unchanged" in edited.stderr, edited.stderr
    # The seed's schedule seed file, as written, for the scenario just loaded (not yet approved).
    (folder / "schedules.yaml").write_text(SEED_SCHEDULES)
    seeded = run_jobgate(folder, "schedules", "apply", "schedules.yaml", "--allow-pending")
    assert seeded.returncode == 0, seeded.stderr
    assert "1 schedules applied (1 new)" in seeded.stdout
    store = Store(database_url)
    try:
        with store.read() as tx:
            assert [v.version for v in tx.definition_versions("default", "export-payroll")] == [1, 2]
            stored = tx.schedule_get("default", "monthly-payroll")
        assert stored is not None and stored.schedule.job_definition_id == "export-payroll"
        assert stored.schedule.paused  # until an admin approves the scenario
    finally:
        store.dispose()


def test_jobgate_serve_refuses_an_unregistered_runner_storing_nothing(database_url: str, tmp_path: Path) -> None:
    folder = site(tmp_path, database_url, ("a-export-payroll.yaml", SEED_SCENARIO), ("b-bad-runner.yaml", UNREGISTERED))
    token_file = folder / "admin.token"
    refused = run_jobgate(folder, "serve", "--port", str(free_port()), "--bootstrap-token-file", str(token_file))
    assert refused.returncode != 0
    assert "scenarios/b-bad-runner.yaml" in refused.stderr and "runner" in refused.stderr, refused.stderr
    assert not token_file.exists()  # refused before the first token
    store = Store(database_url)
    try:
        with store.read() as tx:
            assert tx.definitions_list("default") == []
    finally:
        store.dispose()
    # A configured folder that is missing refuses the start too, naming it.
    (folder / "jobgate.yaml").write_text((folder / "jobgate.yaml").read_text().replace("[scenarios]", "[absent]"))
    missing = run_jobgate(folder, "scheduler", "--once")
    assert missing.returncode != 0
    assert "definitions" in missing.stderr and "absent" in missing.stderr, missing.stderr
