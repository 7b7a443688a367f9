"""``jobgate serve`` as a real process (uvicorn, embedded worker and scheduler, SQLite file):
first-start token, SSE from submit to terminal, a reconnect with ``Last-Event-ID`` mid-run,
graceful shutdown, and the refusals at start."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.cli.test_cli import ENV, jobgate
from tests.runtime.runtime_support import wait_until

HERE = Path(__file__).resolve().parent
SERVE_ENV = {**ENV, "PYTHONPATH": os.pathsep.join([str(HERE), ENV.get("PYTHONPATH", "")])}
DEFINITION = """\
job_definition_id: count-up
job_class: MAINTENANCE_JOB
trigger_type: manual
handler: api_handlers:count_up
params:
  - {name: steps, pattern: '[0-9]{1,3}', default: "5"}
  - {name: pause, pattern: '[0-9.]{1,5}', default: "0.2"}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    folder: Path
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, **params: str) -> str:
        r = httpx.post(
            f"{self.url}/api/v1/runs", json={"job_definition_id": "count-up", "params": params}, headers=self.headers
        )
        assert r.status_code == 201, r.text
        return str(r.json()["run"]["job_run_id"])


def start(folder: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    log = folder / "serve.log"
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobgate", "serve", "--port", str(port), *extra],
            cwd=folder,
            env=SERVE_ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    """Until the server process answers ``/readyz`` (another process: its answer is the signal)."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, timeout=timeout, what="the server to be ready", last=log.read_text, poll=0.1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "definitions" / "count-up.yaml").write_text(DEFINITION)
    (folder / "jobgate.yaml").write_text(
        (folder / "jobgate.yaml").read_text() + "\nserver:\n  stream_poll_ms: 50\n  stream_heartbeat_seconds: 1\n"
    )
    subprocess.run(
        [sys.executable, "-m", "jobgate", "apply", "definitions", "--approve"], cwd=folder, env=SERVE_ENV, check=True,
        capture_output=True,
    )  # fmt: skip
    port = free_port()
    token_file = folder / "admin.token"
    proc = start(folder, port, "--bootstrap-token-file", str(token_file))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, folder / "serve.log")
        yield Served(proc, url, token_file.read_text().strip(), folder, folder / "serve.log")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def read_events(response: httpx.Response, *, stop_after_id: int | None = None) -> list[dict[str, Any]]:
    """Parse an SSE response into events ({event, id, data} or {retry}); stop early if asked."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if line == "":
            if current:
                events.append(current)
                if stop_after_id is not None and current.get("id") is not None and current["id"] >= stop_after_id:
                    return events
            current = {}
            continue
        key, _, value = line.partition(": ")
        if key == "data":
            current["data"] = json.loads(value)
        elif key == "id":
            current["id"] = int(value)
        else:
            current[key] = value
    if current:
        events.append(current)
    return events


@pytest.mark.slow
def test_first_start_writes_the_admin_token_once_owner_only(served: Served) -> None:
    token_file = served.folder / "admin.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert served.token.startswith("jgt_")
    log = served.log.read_text()
    assert served.token not in log and "written to" in log  # a supervisor's log never keeps the secret
    me = httpx.get(f"{served.url}/api/v1/tokens", headers=served.headers)
    assert me.status_code == 200 and me.json()["items"][0]["role"] == "admin"
    assert httpx.get(f"{served.url}/healthz").json() == {"status": "ok", "pubsub": "skip"}  # seed 004
    ready = httpx.get(f"{served.url}/readyz").json()
    assert ready["ready"] and {c["name"] for c in ready["checks"]} >= {"database", "worker", "scheduler"}
    assert httpx.get(f"{served.url}/openapi.json").json()["info"]["title"] == "jobgate"


@pytest.mark.slow
def test_a_run_is_streamed_from_submit_to_terminal(served: Served) -> None:
    run_id = served.submit(steps="4", pause="0.15")
    with httpx.stream("GET", f"{served.url}/api/v1/runs/{run_id}/stream", headers=served.headers, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = read_events(r)
    kinds = [e.get("event", "retry" if "retry" in e else "?") for e in events]
    assert kinds[:4] == ["retry", "snapshot", "queue", "heartbeat"]
    assert kinds[-1] == "terminal" and events[-1]["data"]["status"] == "COMPLETED"
    states = [e for e in events if e.get("event") == "state"]
    assert [e["id"] for e in states] == list(range(1, len(states) + 1))
    assert [e["data"]["to_status"] for e in states][-1] == "COMPLETED"
    assert "RUNNING" in [e["data"]["to_status"] for e in states]
    assert any(e.get("event") == "progress" for e in events)


@pytest.mark.slow
def test_a_reconnect_with_last_event_id_loses_and_repeats_nothing(served: Served) -> None:
    run_id = served.submit(steps="10", pause="0.2")
    url = f"{served.url}/api/v1/runs/{run_id}/stream"
    with httpx.stream("GET", url, headers=served.headers, timeout=30) as r:
        first = read_events(r, stop_after_id=3)  # cut the connection mid-run
    last = max(e["id"] for e in first if "id" in e)
    with httpx.stream("GET", url, headers={**served.headers, "Last-Event-ID": str(last)}, timeout=30) as r:
        rest = read_events(r)
    ids = [e["id"] for e in first + rest if "id" in e]
    assert ids == list(range(1, len(ids) + 1))  # every transition once, in order
    assert rest[-1]["event"] == "terminal"
    detail = httpx.get(f"{served.url}/api/v1/runs/{run_id}", headers=served.headers).json()
    assert len(detail["transitions"]) == len(ids)


@pytest.mark.slow
def test_sigterm_lets_the_running_job_finish_and_exits_cleanly(served: Served) -> None:
    run_id = served.submit(steps="5", pause="0.3")

    def status() -> str:
        return str(httpx.get(f"{served.url}/api/v1/runs/{run_id}", headers=served.headers).json()["run"]["status"])

    wait_until(lambda: status() == "RUNNING", timeout=10, what="the run to be running", last=status, poll=0.05)
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(30) == 0
    out = jobgate(served.folder, "--json", "runs", "show", run_id)
    assert json.loads(out.stdout)["run"]["status"] == "COMPLETED"


def test_no_auth_refuses_a_non_loopback_address_and_touches_nothing(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    before = sorted(p.name for p in folder.iterdir())
    proc = jobgate(folder, "serve", "--no-auth", "--host", "0.0.0.0", "--port", str(free_port()), check=False)
    assert proc.returncode == 1 and "--host" in proc.stderr and "loopback" in proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == before


def test_an_existing_bootstrap_token_file_is_refused(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "admin.token").write_text("keep me")
    proc = jobgate(
        folder, "serve", "--port", str(free_port()), "--bootstrap-token-file", "admin.token", check=False, timeout=30
    )
    assert proc.returncode == 1 and "refusing to overwrite" in proc.stderr
    assert (folder / "admin.token").read_text() == "keep me"
    tokens = json.loads(jobgate(folder, "--json", "tokens", "list").stdout)
    assert tokens == []  # nothing created by the refused start


def test_a_bootstrap_token_file_on_a_database_with_tokens_is_answered(tmp_path: Path) -> None:
    """Found by a review: on a database that had tokens, ``--bootstrap-token-file`` wrote nothing
    and said nothing, and whoever polled for the file waited for ever."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    jobgate(folder, "tokens", "create", "--role", "admin")
    log = folder / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "jobgate", "serve", "--port", str(free_port()), "--bootstrap-token-file", "t"],
            cwd=folder, env=ENV, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until(lambda: "not a first start" in log.read_text(), timeout=60, what="the notice", poll=0.1)
    finally:
        server.terminate()
        server.wait(30)
    assert "no admin token was written to t" in log.read_text() and not (folder / "t").exists()


def test_a_dangling_symlink_at_the_bootstrap_token_file_is_refused_before_any_token(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "admin.token").symlink_to(folder / "nowhere" / "token")
    proc = jobgate(
        folder, "serve", "--port", str(free_port()), "--bootstrap-token-file", "admin.token", check=False, timeout=30
    )
    assert proc.returncode == 1 and "refusing to overwrite" in proc.stderr, proc.stderr
    assert not (folder / "nowhere").exists() and (folder / "admin.token").is_symlink()
    assert json.loads(jobgate(folder, "--json", "tokens", "list").stdout) == []  # no admin token nobody can see


@pytest.mark.slow
def test_the_cli_through_a_server_prints_what_it_prints_locally(served: Served) -> None:
    remote = ("--server", served.url, "--token", served.token)
    run_id = jobgate(served.folder, *remote, "submit", "count-up", "-p", "steps=1", "--request-id", "cli-1").stdout
    run_id = run_id.strip()
    again = jobgate(served.folder, *remote, "submit", "count-up", "-p", "steps=1", "--request-id", "cli-1")
    assert again.stdout.strip() == run_id and "already submitted" in again.stderr

    def status() -> str:
        return str(json.loads(jobgate(served.folder, "--json", "runs", "show", run_id).stdout)["run"]["status"])

    wait_until(lambda: status() == "COMPLETED", timeout=20, what="the run to complete", last=status, poll=0.1)
    for command in (("runs", "show", run_id), ("runs", "list")):
        local = jobgate(served.folder, "--json", *command).stdout
        assert jobgate(served.folder, *remote, "--json", *command).stdout == local
        assert jobgate(served.folder, *remote, *command).stdout == jobgate(served.folder, *command).stdout
    refused = jobgate(served.folder, *remote, "runs", "cancel", run_id, check=False)
    assert refused.returncode == 1 and "only a pending run can be cancelled" in refused.stderr
    # a refusal naming what it is about and the field reads the same line (found by a review:
    # through the server the definition came after the field)
    bad = ("submit", "count-up", "-p", "steps=x/y")
    there, here = jobgate(served.folder, *remote, *bad, check=False), jobgate(served.folder, *bad, check=False)
    assert there.returncode == here.returncode == 1
    assert there.stderr == here.stderr and "count-up: params.steps: " in here.stderr
    missing = jobgate(served.folder, *remote, "runs", "show", "TGJOBRUN-nope", check=False)
    assert missing.returncode == 1 and "not_found" in missing.stderr
    local_only = jobgate(served.folder, *remote, "dlq", "list", check=False)
    assert local_only.returncode == 1 and "--server" in local_only.stderr
    bad_token = jobgate(served.folder, "--server", served.url, "--token", "nope", "runs", "list", check=False)
    assert bad_token.returncode == 1 and "unauthenticated" in bad_token.stderr


@pytest.mark.parametrize("trusted", [False, True])
def test_a_tls_proxy_on_another_host_is_believed_only_when_named(tmp_path: Path, trusted: bool) -> None:
    """Found by a review: behind a TLS proxy that was not on this machine (deploy/'s Compose and
    Kubernetes set-ups), the session cookie was never Secure: uvicorn believes X-Forwarded-Proto
    from 127.0.0.1 alone. ``server.trusted_proxies`` names the proxies whose word counts. The
    "other host" here is 127.0.0.2 (a loopback address, so the test stays on this machine)."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    if trusted:
        (folder / "jobgate.yaml").write_text(
            (folder / "jobgate.yaml").read_text() + "\nserver:\n  trusted_proxies: ['127.0.0.2']\n"
        )
    port = free_port()
    proc = start(folder, port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, folder / "serve.log")
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as proxy:
            page = proxy.get(f"{url}/login", headers={"X-Forwarded-Proto": "https"})
        cookie = page.headers.get("set-cookie", "")
        assert cookie and (("Secure" in cookie) is trusted), cookie
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
