"""Schedule commands as a user runs them: add, list, next, pause/resume, apply a seed file, fire."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.cli.test_cli import jobgate


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    jobgate(tmp_path, "init", "demo")
    return tmp_path / "demo"


def typed(folder: Path, name: str, trigger_type: str, expression: str | None = None) -> str:
    """Apply (and approve) a small definition started by ``trigger_type`` (which is enforced);
    with ``expression``, the schedule it keeps."""
    when = f"schedule_expression: '{expression}'\n" if expression else ""
    (folder / f"{name}.yaml").write_text(
        f"job_definition_id: {name}\njob_class: MAINTENANCE_JOB\ntrigger_type: {trigger_type}\n{when}"
        "handler: jobgate.standins:hello\nparams:\n  - {name: name, pattern: '[A-Za-z][A-Za-z0-9 _.-]{0,63}'}\n"
    )
    jobgate(folder, "apply", f"{name}.yaml", "--approve")
    return name


def listed(folder: Path) -> dict[str, dict[str, object]]:
    """The schedules added here (not those the demo's definitions keep)."""
    rows = json.loads(jobgate(folder, "--json", "schedules", "list").stdout)
    return {s["schedule_id"]: s for s in rows if s["owner"] != "definition"}


def test_add_list_next_pause_resume_delete(folder: Path) -> None:
    job = typed(folder, "t-cron", "cron", "0 4 * * *")
    jobgate(folder, "schedules", "add", "hello-9", job, "--cron", "0 9 * * *", "--tz", "America/New_York")
    item = listed(folder)["hello-9"]
    assert (item["kind"], item["timezone"], item["state"]) == ("cron", "America/New_York", "active")
    fires = json.loads(jobgate(folder, "--json", "next", job, "--count", "2").stdout)
    mine = [f for f in fires if f["schedule_id"] == "hello-9"]
    assert [f["local"][11:16] for f in mine] == ["09:00", "09:00"]
    assert all(f["utc"][11:13] in ("13", "14") for f in mine)  # 09:00 EDT or EST
    assert {f["schedule_id"] for f in fires} == {"hello-9", "t-cron"}  # and the one the definition keeps
    assert {f["state"] for f in mine} == {"active"}
    jobgate(folder, "schedules", "pause", "hello-9")
    assert listed(folder)["hello-9"]["state"] == "paused"
    paused = json.loads(jobgate(folder, "--json", "next", job, "--count", "2").stdout)
    assert {f["state"] for f in paused if f["schedule_id"] == "hello-9"} == {"paused: not run"}
    jobgate(folder, "schedules", "resume", "hello-9")
    assert listed(folder)["hello-9"]["state"] == "active"
    jobgate(folder, "schedules", "delete", "hello-9")
    assert listed(folder) == {}
    gone = jobgate(folder, "schedules", "delete", "hello-9", check=False)
    assert gone.returncode == 1 and "no schedule" in gone.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cron", "0 25 * * *"], "cron: '0 25 * * *': bad hour"),
        (["--cron", "0 * * * *", "--tz", "Nowhere/City"], "timezone"),
        (["--cron", "0 * * * *", "--every", "60"], "exactly one of"),
        (["--every", "60", "-p", "day={{tomorrow}}"], "unknown magic param"),
        (["--window", "60", "-p", "nobody=1"], "params.nobody: not a declared parameter"),
        (["--window", "60", "-p", "name=1; rm -rf /"], "params.name: value does not match"),
        (["--cron", "0 * * * *"], "trigger_type batch_window: a cron trigger may not start it"),
    ],
)
def test_a_refused_schedule_names_the_field_and_stores_nothing(folder: Path, args: list[str], words: str) -> None:
    proc = jobgate(folder, "schedules", "add", "bad", "demo-window", *args, check=False)
    assert proc.returncode == 1 and words in proc.stderr and "Traceback" not in proc.stderr
    assert listed(folder) == {}


def test_a_schedule_for_a_missing_definition_is_refused(folder: Path) -> None:
    proc = jobgate(folder, "schedules", "add", "s", "no-such-job", "--cron", "@daily", check=False)
    assert proc.returncode == 1 and "no job definition 'no-such-job'" in proc.stderr
    assert listed(folder) == {}


def test_apply_a_seed_file_all_or_nothing(folder: Path) -> None:
    seed = folder / "schedules.yaml"
    seed.write_text(
        "schedules:\n"
        "  - id: monthly\n"
        f"    job: {typed(folder, 't-monthly', 'cron', '0 1 1 * *')}\n"
        '    cron: "0 2 1 * *"\n'
        "    timezone: Europe/Oslo\n"
        '    params: {name: "month {{current_month}}"}\n'
        "  - id: hourly-window\n"
        "    job: demo-window\n"
        "    window_seconds: 3600\n"
    )
    out = jobgate(folder, "schedules", "apply", str(seed)).stdout
    assert "2 schedules applied (2 new)" in out
    assert set(listed(folder)) == {"monthly", "hourly-window"}
    # Re-applying updates, never duplicates (as given: nothing written); a bad entry refuses the
    # whole file.
    assert "(0 new, 2 unchanged)" in jobgate(folder, "schedules", "apply", str(seed)).stdout
    seed.write_text(seed.read_text() + "  - id: broken\n    job: demo-window\n    cron: nonsense\n")
    proc = jobgate(folder, "schedules", "apply", str(seed), check=False)
    assert proc.returncode == 1 and "broken" in proc.stderr and "cron" in proc.stderr
    assert set(listed(folder)) == {"monthly", "hourly-window"}


def test_scheduler_once_fires_what_is_due_and_nothing_twice(folder: Path) -> None:
    job = typed(folder, "t-every", "interval", "3600")
    jobgate(folder, "schedules", "add", "tick", job, "--every", "1", "--grace-seconds", "0")
    # A new schedule owes nothing from before it existed; two seconds later it owes two or three
    # slots, all late (grace 0), which fire_once coalesces into one run.
    assert json.loads(jobgate(folder, "--json", "scheduler", "--once").stdout)["fired"] in (0, 1)
    # real time: the CLI is another process on the host's clock (no clock to inject): 1 s slots must pass
    time.sleep(2.2)
    jobgate(folder, "--json", "scheduler", "--once")
    runs = json.loads(jobgate(folder, "--json", "runs", "list", "--job", job).stdout)
    assert 1 <= len(runs) <= 2
    assert all(r["trigger_id"].startswith("TGTRIG-tick@") for r in runs)
    assert len({r["trigger_id"] for r in runs}) == len(runs)


def test_backfill_dry_run_then_run_then_nothing_new(folder: Path) -> None:
    (folder / "nightly.yaml").write_text(
        "job_definition_id: nightly\njob_class: MAINTENANCE_JOB\ntrigger_type: cron\n"
        "schedule_expression: '30 2 * * *'\nschedule_timezone: Europe/Oslo\nhandler: jobgate.standins:hello\n"
    )
    jobgate(folder, "apply", "nightly.yaml", "--approve")
    span = ["--from", "2026-03-27T00:00:00Z", "--to", "2026-04-01T00:00:00Z"]
    dry = json.loads(jobgate(folder, "--json", "backfill", "nightly", *span, "--dry-run").stdout)
    # 27-31 March, one fire a day; on the 29th 02:30 does not exist in Oslo and it fires at 03:00 CEST.
    assert [s["fire_at"] for s in dry][1:3] == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z"]
    assert len(dry) == 5 and not any(s["job_run_id"] for s in dry)
    assert "5 runs created" in jobgate(folder, "backfill", "nightly", *span).stdout
    assert "0 runs created, 5 already had one" in jobgate(folder, "backfill", "nightly", *span).stdout
    shown = json.loads(jobgate(folder, "--json", "runs", "show", _run_of(folder, "nightly")).stdout)
    assert shown["run"]["schedule_id"] == "nightly" and shown["run"]["slot_at"] is not None
    bad = jobgate(folder, "backfill", "nightly", "--from", "2026-03-27", "--to", "2026-04-01T00:00:00Z", check=False)
    assert bad.returncode == 1 and "--from" in bad.stderr and "timezone" in bad.stderr


def _run_of(folder: Path, job: str) -> str:
    runs = json.loads(jobgate(folder, "--json", "runs", "list", "--job", job).stdout)
    return str(runs[0]["job_run_id"])


def test_events_emit_fires_subscribers_and_a_duplicate_does_nothing(folder: Path) -> None:
    jobgate(
        folder,
        "schedules",
        "add",
        "on-done",
        "demo-on-event",
        "--event",
        "pipeline.completed",
        "--payload-param",
        "name",
    )
    data = folder / "event.json"
    data.write_text('{"name": "Ada", "other": "ignored"}')
    first = json.loads(
        jobgate(folder, "--json", "events", "emit", "pipeline.completed", "--id", "e1", "--data", f"@{data}").stdout
    )
    again = json.loads(  # --event-id is --id's other name (the API's field is event_id)
        jobgate(
            folder, "--json", "events", "emit", "pipeline.completed", "--event-id", "e1", "--data", f"@{data}"
        ).stdout
    )
    assert [f["created"] for f in first] == [True] and [f["created"] for f in again] == [False]
    assert first[0]["job_run_id"] == again[0]["job_run_id"]
    run = json.loads(jobgate(folder, "--json", "runs", "show", first[0]["job_run_id"]).stdout)
    assert run["run"]["params"] == {"name": "Ada"}
    bad = jobgate(folder, "events", "emit", "pipeline.completed", "--id", "e2", "--data", "[1]", check=False)
    assert bad.returncode == 1 and "--data" in bad.stderr
    # every schedule refused its run: the command says so and fails (found by a review: exit 0)
    refused = jobgate(
        folder, "events", "emit", "pipeline.completed", "--id", "e3", "--data", '{"name": "a/b"}', check=False
    )
    assert refused.returncode == 1 and "schedule on-done refused:" in refused.stderr


def test_policy_and_alert_triggers_from_the_command_line(folder: Path) -> None:
    jobgate(folder, "schedules", "add", "drift", "demo-drift", "--condition", "replay.drift_ratio > 0.05")
    outputs = [jobgate(folder, "facts", "record", "replay.drift_ratio", v).stdout for v in ("0.01", "0.07", "0.08")]
    assert ["fired drift" in o for o in outputs] == [False, True, False]
    jobgate(
        folder,
        "schedules",
        "add",
        "page",
        typed(folder, "t-alert", "alert"),
        "--condition",
        "alert.disk == 1",
        "--alert",
    )
    fired = json.loads(jobgate(folder, "--json", "alerts", "post", "disk", "--data", '{"used": 0.97}').stdout)
    assert [f["schedule_id"] for f in fired if f["fired"]] == ["page"]
    bad = jobgate(folder, "schedules", "add", "b", "demo-drift", "--condition", "x >> 1", check=False)
    assert bad.returncode == 1 and "condition" in bad.stderr


def test_safe_mode_on_fires_its_schedules_and_off_stops_them(folder: Path) -> None:
    jobgate(
        folder, "schedules", "add", "emergency", typed(folder, "t-safe", "safe_mode"), "--safe-mode", "--every", "3600"
    )
    assert listed(folder)["emergency"]["when"] == "at safe-mode activation, then every 1h while on"
    assert "fired 0" in jobgate(folder, "scheduler", "--once").stdout
    status = json.loads(jobgate(folder, "--json", "safe-mode", "status").stdout)
    assert status == {"active": False, "activation": None}
    refused = jobgate(folder, "safe-mode", "on", "--reason", " ", check=False)
    assert refused.returncode == 1 and "reason" in refused.stderr
    assert "ON since" in jobgate(folder, "safe-mode", "on", "--reason", "replay drift spike", "--by", "ada").stdout
    twice = jobgate(folder, "safe-mode", "on", "--reason", "again", check=False)
    assert twice.returncode == 1 and "already on since" in twice.stderr and "Traceback" not in twice.stderr
    assert "fired 1" in jobgate(folder, "scheduler", "--once").stdout
    jobgate(folder, "safe-mode", "off", "--reason", "resolved", "--by", "bob")
    history = json.loads(jobgate(folder, "--json", "safe-mode", "history").stdout)
    assert [(h["activated_by"], h["deactivated_by"], h["active"]) for h in history] == [("ada", "bob", False)]
    off_again = jobgate(folder, "safe-mode", "off", "--reason", "again", check=False)
    assert off_again.returncode == 1 and "not on" in off_again.stderr


def test_schedule_changes_list_who_did_what(folder: Path) -> None:
    jobgate(folder, "schedules", "add", "h", typed(folder, "t-hourly", "cron", "@daily"), "--cron", "@hourly")
    jobgate(folder, "schedules", "pause", "h")
    assert "already paused" in jobgate(folder, "schedules", "pause", "h").stdout
    jobgate(folder, "schedules", "delete", "h")
    changes = json.loads(jobgate(folder, "--json", "schedules", "changes", "h").stdout)
    assert [c["field"] for c in changes] == ["created", "paused", "deleted"]
    assert all(c["source"] for c in changes)  # the OS user who ran the command


def test_locks_and_workers_are_listed(folder: Path) -> None:
    jobgate(folder, "scheduler", "--once")
    locks = {lock["name"]: lock for lock in json.loads(jobgate(folder, "--json", "locks").stdout)}
    assert locks["scheduler-leader"]["state"] == "released" and locks["scheduler-leader"]["token"] >= 1
    assert json.loads(jobgate(folder, "--json", "workers").stdout) == []  # none registered yet
