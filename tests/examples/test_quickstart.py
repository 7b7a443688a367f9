"""``examples/quickstart/`` as a new user runs it, on SQLite and PostgreSQL: jobs declared with
``@jobgate.job`` → ``jobgate apply --module`` (approved) → a token → ``jobgate serve`` (its
embedded worker) → the application (``app.py``) submits through ``jobgate.Client``, waits and
reads the typed result. Every step is a separate process, as on a user's machine; the package
is importable through ``PYTHONPATH`` here (``pip install -e examples/quickstart`` in the
README, and in CI's clean-venv check)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.api.test_server_process import free_port, wait_ready
from tests.cli.test_cli import ENV
from tests.cli.test_cli import jobgate as run_cli

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_the_quickstart_from_decorator_to_typed_result(tmp_path: Path, database_url: str) -> None:
    run_cli(tmp_path, "init", "qs")
    folder = tmp_path / "qs"
    env = {**ENV, "PYTHONPATH": str(QUICKSTART / "src"), "JOBGATE_DATABASE_URL": database_url}

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "jobgate", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"jobgate {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    applied = json.loads(cli("--json", "apply", "--module", "quickstart.jobs", "--approve"))
    assert {a["job_definition_id"] for a in applied} == {"QS-RECONCILE-ACCOUNT", "QS-PURGE-EXPORTS"}
    token = cli("tokens", "create", "--role", "operator", "--label", "quickstart app").strip()
    port = free_port()
    log = folder / "serve.log"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "jobgate", "serve", "--port", str(port)],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server, log)
        app = subprocess.run(
            [sys.executable, str(QUICKSTART / "app.py")],
            env={**env, "JOBGATE_SERVER": url, "JOBGATE_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert app.returncode == 0, f"{app.stdout}\n{app.stderr}\n{log.read_text()}"
        assert "COMPLETED" in app.stdout
        assert "FR7630001 2026-12-01: booked 200.00 EUR, expected 200, matches=True" in app.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    runs = json.loads(cli("--json", "runs", "list", "--job", "QS-RECONCILE-ACCOUNT"))
    assert [r["status"] for r in runs] == ["COMPLETED"]
    run = runs[0]
    assert run["params"] == {
        "account": "FR7630001",
        "currency": "EUR",
        "day": "2026-12-01",
        "expected": "200",
        "mode": "strict",
    }
    assert "booked 200.00 EUR, expected 200" in cli("runs", "log", run["job_run_id"])
