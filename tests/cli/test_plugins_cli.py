"""``jobgate plugins sign|verify|list`` through the real command line, and a plugin that fails
admission stopping ``worker``, ``scheduler`` and ``serve`` before they start, naming the file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers import config_document
from plugin_kit import Kit, forgetting_plugins, make_kit

ENV = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG"}}


def jobgate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with forgetting_plugins():
        yield make_kit(tmp_path)


def _deployment(tmp_path: Path, kit: Kit, *enabled: str) -> None:
    """A jobgate.yaml whose trust root is a key made by ``jobgate keys generate``."""
    made = jobgate(tmp_path, "keys", "generate", "--key-id", "release", "--out", "release.key")
    assert made.returncode == 0, made.stderr
    public = yaml.safe_load(made.stdout)["signing"]["trust_roots"]["release"]
    section = {"enabled": list(enabled), "directory": str(kit.directory), "trust_roots": {"release": public}}
    doc = config_document(tmp_path, plugins=section, database=f"sqlite:///{tmp_path}/jobgate.db")
    (tmp_path / "jobgate.yaml").write_text(yaml.safe_dump(doc))


def _sign(tmp_path: Path, kit: Kit, name: str) -> subprocess.CompletedProcess[str]:
    return jobgate(
        tmp_path, "plugins", "sign", str(kit.directory / name), "--key-id", "release", "--key", "release.key"
    )


def test_sign_verify_and_list(tmp_path: Path, kit: Kit) -> None:
    name, marker = kit.plugin()
    other, _ = kit.plugin()
    _deployment(tmp_path, kit, name)
    signed = jobgate(
        tmp_path, "plugins", "sign", str(kit.directory / name), "--key-id", "release", "--key", "release.key"
    )
    assert signed.returncode == 0 and f"signed 4 files of plugin {name} with release" in signed.stdout
    ok = jobgate(tmp_path, "plugins", "verify")
    assert ok.returncode == 0 and f"ok      {name}: 4 files signed by release" in ok.stdout
    unsigned = jobgate(tmp_path, "plugins", "verify", other)
    assert unsigned.returncode == 1 and f"plugin {other!r}, file '__init__.py': has no signature" in unsigned.stdout
    listed = jobgate(tmp_path, "--json", "plugins", "list")
    rows = {r["name"]: (r["class"], r["state"]) for r in yaml.safe_load(listed.stdout)}
    assert rows[name] == ("optional-plugin", "enabled") and rows[other] == ("optional-plugin", "disabled")
    assert rows["python"][0] == "built-in" and rows["scan"][0] == "placeholder"
    assert not marker.exists()  # none of this imports a plugin


@pytest.mark.parametrize("command", [["worker", "--exit-when-idle"], ["scheduler", "--once"], ["serve", "--port", "9"]])
def test_a_plugin_failing_admission_stops_startup_naming_the_file(tmp_path: Path, kit: Kit, command: list[str]) -> None:
    name, marker = kit.plugin()
    _deployment(tmp_path, kit, name)
    assert _sign(tmp_path, kit, name).returncode == 0
    (kit.directory / name / "util" / "late.py").write_text("X = 1\n")  # carried, never signed
    proc = jobgate(tmp_path, *command, "--migrate")
    assert proc.returncode != 0
    assert f"plugin {name!r}, file 'util/late.py': has no signature" in proc.stderr
    assert "Traceback" not in proc.stderr and not marker.exists()
    assert not (tmp_path / "jobgate.db").exists()  # refused before the database was touched


def test_a_signed_plugin_runs_end_to_end_through_the_command_line(tmp_path: Path, kit: Kit) -> None:
    name, _ = kit.plugin()
    _deployment(tmp_path, kit, name)
    assert _sign(tmp_path, kit, name).returncode == 0
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "echo.yaml").write_text(
        f"job_definition_id: echo\njob_class: MAINTENANCE_JOB\nhandler: {name}.jobs:run\n"
    )
    assert jobgate(tmp_path, "migrate").returncode == 0
    applied = jobgate(tmp_path, "apply", "defs", "--approve")
    assert applied.returncode == 0, applied.stderr
    run_id = jobgate(tmp_path, "submit", "echo").stdout.strip()
    worked = jobgate(tmp_path, "worker", "--exit-when-idle")
    assert worked.returncode == 0, worked.stderr
    shown = yaml.safe_load(jobgate(tmp_path, "--json", "runs", "show", run_id).stdout)
    assert shown["run"]["status"] == "COMPLETED" and shown["run"]["result"] == {"plugin": name, "answer": 42}
    # found by a review: the commands that read a definition's code besides apply did not admit
    # plugins first, and said a verified, enabled plugin's handler was not importable
    (tmp_path / "defs" / "echo.yaml").write_text(
        f"job_definition_id: echo\njob_class: MAINTENANCE_JOB\nhandler: {name}.jobs:run\n"
        "canonical_name: Echo, second version\n"
    )
    assert jobgate(tmp_path, "apply", "defs").returncode == 0
    status = jobgate(tmp_path, "definitions", "approval", "echo")
    assert status.returncode == 0 and "not importable" not in status.stdout + status.stderr, status.stderr
    approved = jobgate(tmp_path, "definitions", "approve", "echo", "--by", "reviewer")
    assert approved.returncode == 0, approved.stderr
