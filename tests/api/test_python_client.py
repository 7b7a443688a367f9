"""jobgate from application code: ``jobgate.Client`` against a real server on a socket, and
``jobgate.connect`` into the database itself; the same answers, the same refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.api.test_console_browser import served  # noqa: F401  (the served fixture)
from tests.runtime.runtime_support import running_worker

import jobgate
from jobgate.client.api import RunEvent
from jobgate.core.errors import ConflictError, NotFoundError, ValidationError
from jobgate.core.tokens import Role


def test_a_client_submits_waits_on_the_stream_and_gets_the_servers_refusals(
    world: World,
    served: str,  # noqa: F811
) -> None:
    with jobgate.Client(served, world.tokens[("acme", Role.OPERATOR)]) as jg:
        run = jg.submit(ACME_JOB, {"n": 5}, idempotency_key="month-end-1")
        assert run.status == "SCHEDULED" and run.params == {"n": "5"}
        assert jg.submit(ACME_JOB, {"n": 5}, idempotency_key="month-end-1").job_run_id == run.job_run_id
        with pytest.raises(ConflictError):
            jg.submit(ACME_JOB, {"n": 6}, idempotency_key="month-end-1")
        with pytest.raises(ValidationError) as bad:
            jg.submit(ACME_JOB, {"n": "five"})
        assert bad.value.field is not None and "n" in bad.value.field
        assert run.job_run_id in [r.job_run_id for r in jg.list(job=ACME_JOB)]
        with running_worker(world.engine):
            done = jg.wait(run.job_run_id)
        assert done.status == "COMPLETED"
        events = [e.event for e in jg.stream(run.job_run_id)]  # a finished run's stream: its story, then its end
        assert "state" in events and events[-1] == "terminal"
        detail = jg.get(run.job_run_id)
        assert [t.to_status for t in detail.transitions][-1] == "COMPLETED"
        pending = jg.submit(ACME_JOB, {"n": 7})
        assert jg.cancel(pending.job_run_id, reason="not needed").status == "CANCELLED"
        theirs = world.new_run("other", job="shared-job")
        with pytest.raises(NotFoundError):
            jg.get(theirs.job_run_id)
    with jobgate.Client(served, world.tokens[("acme", Role.CONSUMER)]) as consumer, pytest.raises(Exception) as denied:
        consumer.submit(ACME_JOB, {"n": 1})
    assert "role" in str(denied.value)


@pytest.mark.filterwarnings("ignore:no jobgate.yaml beside the database")  # the defaults, as meant
def test_connect_submits_into_the_database_and_waits_for_a_worker(world: World) -> None:
    url = world.engine.store.url
    with jobgate.connect(url, tenant="acme", actor="app:billing") as jg:
        run = jg.submit(ACME_JOB, {"n": 3}, idempotency_key="embedded-1")
        assert run.requested_by == "app:billing"
        assert jg.submit(ACME_JOB, {"n": 3}, idempotency_key="embedded-1").job_run_id == run.job_run_id
        with pytest.raises(TimeoutError):
            jg.wait(run.job_run_id, timeout=0.05)  # no worker yet
        with running_worker(world.engine):
            assert jg.wait(run.job_run_id, timeout=30).status == "COMPLETED"
        with pytest.raises(ValidationError):
            jg.submit(ACME_JOB, {"n": None})
    with pytest.raises(Exception, match="no database at"):
        jobgate.connect(str(world.engine.config.data_dir) + "/missing.db")


def test_wait_follows_the_stream_again_when_it_ends_before_the_run(
    world: World,
    served: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server ends a stream at ``server.stream_max_seconds`` or when it stops: ``wait`` returned
    the run as it then stood (RUNNING), and ``result`` refused it."""
    with jobgate.Client(served, world.tokens[("acme", Role.OPERATOR)]) as jg:
        run = jg.submit(ACME_JOB, {"n": 8})
        real = jg.stream
        cut: list[str] = []

        def ended_early(run_id: str) -> Iterator[RunEvent]:
            if not cut:  # the first stream ends at once, before the run
                cut.append(run_id)
                return iter(())
            return real(run_id)

        monkeypatch.setattr(jg, "stream", ended_early)
        with running_worker(world.engine):
            done = jg.wait(run.job_run_id)
        assert done.status == "COMPLETED" and cut == [run.job_run_id]


@pytest.mark.filterwarnings("ignore:no jobgate.yaml beside the database")  # the defaults, as meant
def test_the_client_refuses_a_key_or_status_it_cannot_send_naming_it(world: World) -> None:
    """An empty key was dropped (every call a new run), a key with a newline or an accent failed
    inside the HTTP library; a status in lower case raised a bare ValueError."""
    with jobgate.connect(world.engine.store.url, tenant="acme") as jg:
        for key in ("", "a\nb", "clé", "x" * 201):
            with pytest.raises(ValidationError) as bad:
                jg.submit(ACME_JOB, {"n": 1}, idempotency_key=key)
            assert bad.value.field == "Idempotency-Key", key
        assert jg.list(status="completed") == []
        with pytest.raises(ValidationError) as bad:
            jg.list(status="finished")
        assert bad.value.field == "status"


def test_connect_reads_the_working_folders_configuration_as_the_commands_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``config=``, connect bound runs to the built-in defaults: another snapshot than
    ``jobgate submit`` in the same folder, and the folder's named policies unknown."""
    from tests.cli.test_cli import jobgate as cli

    cli(tmp_path, "init", "site")
    folder = tmp_path / "site"
    monkeypatch.chdir(folder)
    by_command = cli(folder, "--json", "submit", "demo-hello", "--param", "name=ada", "--request-id", "a").stdout
    with jobgate.connect("jobgate.db") as jg:
        assert jg.engine.config.path is not None and Path(jg.engine.config.path).name == "jobgate.yaml"
        run = jg.submit("demo-hello", {"name": "bob"})
    listed = {r["job_run_id"]: r for r in json.loads(cli(folder, "--json", "runs", "list", "--wide").stdout)}
    assert run.config_digest == listed[json.loads(by_command)["job_run_id"]]["config_digest"]


def test_connect_from_another_folder_reads_the_configuration_beside_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: ``jobgate.connect("first-job/jobgate.db")`` from the parent folder used
    the built-in defaults, silently: another snapshot than the folder's commands bind, and the
    folder's named retry policy refused as unknown. The file beside the database is read; with
    none anywhere, a warning says the defaults are used."""
    from tests.cli.test_cli import jobgate as cli

    cli(tmp_path, "init", "site")
    folder = tmp_path / "site"
    monkeypatch.chdir(tmp_path)
    by_command = cli(folder, "--json", "submit", "demo-hello", "--param", "name=ada", "--request-id", "a").stdout
    with jobgate.connect("site/jobgate.db") as jg:
        assert jg.engine.config.path is not None and Path(jg.engine.config.path) == folder / "jobgate.yaml"
        run = jg.submit("demo-hello", {"name": "bob"})
        jg.submit("demo-flaky", {})  # its retry policy is the folder's
    listed = {r["job_run_id"]: r for r in json.loads(cli(folder, "--json", "runs", "list", "--wide").stdout)}
    assert run.config_digest == listed[json.loads(by_command)["job_run_id"]]["config_digest"]
    (tmp_path / "bare").mkdir()
    (folder / "jobgate.db").rename(tmp_path / "bare" / "jobgate.db")
    with pytest.warns(UserWarning, match="built-in defaults"), jobgate.connect("bare/jobgate.db") as jg:
        assert jg.engine.config.path is None


def test_an_unreachable_server_is_named_as_the_python_api_calls_it() -> None:
    """Found by a review: the Python client's refusal named the CLI's ``--server`` option."""
    import socket

    import jobgate
    from jobgate.core.errors import UnavailableError

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = jobgate.Client(f"http://127.0.0.1:{port}", "jgt_" + "0" * 12 + "_" + "A" * 43, timeout=2)
    with pytest.raises(UnavailableError) as refused:
        client.submit("anything")
    assert refused.value.field == "url" and "--server" not in str(refused.value)
