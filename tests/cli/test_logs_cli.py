"""Logs and traces of a real `jobgate worker` process: JSON lines with the stable keys and each
run's trace id, TRACEPARENT in a command's environment, and spans exported over OTLP/HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_cli import jobgate

from jobgate.core.trace import attempt_trace
from jobgate.logs import STABLE_KEYS

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
TRACE_ENV_SCENARIO = """\
orchestrator: {"name": "trace-env", "runner": "python-script", "params": []}

import json, os
from pathlib import Path

Path("report.json").write_text(json.dumps({"traceparent": os.environ.get("TRACEPARENT")}))
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    jobgate(tmp_path, "init", "demo")
    return tmp_path / "demo"


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every line of ``stderr``, each of which must be one JSON object with the stable keys."""
    out = []
    for line in stderr.splitlines():
        doc = json.loads(line)  # a line that is not JSON fails the test here
        assert isinstance(doc, dict) and all(key in doc for key in STABLE_KEYS), line
        assert TS.fullmatch(doc["ts"]) and doc["level"] in {"debug", "info", "warning", "error", "critical"}, line
        assert isinstance(doc["action"], str) and doc["action"], line
        out.append(doc)
    return out


def test_a_worker_logs_json_lines_carrying_each_runs_id_and_trace(folder: Path) -> None:
    hello = jobgate(folder, "submit", "demo-hello", "-p", "name=ada").stdout.strip()
    flaky = jobgate(folder, "submit", "demo-flaky").stdout.strip()  # fails once, then succeeds
    (folder / "trace-env.yaml").write_text(TRACE_ENV_SCENARIO)
    jobgate(folder, "apply", "trace-env.yaml", "--by", "author")  # its body is a program: a second person approves
    jobgate(folder, "definitions", "approve", "trace-env", "--by", "reviewer")
    command = jobgate(folder, "submit", "trace-env").stdout.strip()

    proc = jobgate(folder, "--log-format", "json", "--log-level", "debug", "worker", "--exit-when-idle")
    lines = json_lines(proc.stderr)

    assert any(d["action"] == "worker_started" for d in lines)
    assert any(d["action"] == "worker_stopped" for d in lines)
    for run_id in (hello, flaky, command):
        mine = [d for d in lines if d.get("job_run_id") == run_id]
        trace_id = attempt_trace(run_id, 1).trace_id
        worker_lines = [d for d in mine if d["logger"] == "jobgate.worker"]
        assert worker_lines and all(d["trace_id"] == trace_id for d in worker_lines), worker_lines
        assert all(d["tenant_id"] == "default" for d in mine)
        assert {"run_started", "run_completed"} <= {d["action"] for d in worker_lines}
        started = [d for d in worker_lines if d["action"] == "run_started"]
        assert [d["span_id"] for d in started] == [attempt_trace(run_id, d["attempt"]).span_id for d in started]
        assert {"job_started", "job_completed"} <= {d["action"] for d in mine if d["logger"] == "jobgate.events"}
    retry = [d for d in lines if d["action"] == "run_retry_scheduled"]
    assert [(d["job_run_id"], d["level"], d["attempt"], d["error_code"]) for d in retry] == [
        (flaky, "info", 1, "DEMO_TRANSIENT_FAILURE")
    ]

    # The command ran with its attempt's traceparent in its environment.
    report = json.loads((folder / "data" / "runs" / command / "attempt-1" / "report.json").read_text())
    assert report == {"traceparent": attempt_trace(command, 1).traceparent}


def test_the_default_is_text_and_nothing_of_opentelemetry_is_imported(folder: Path) -> None:
    jobgate(folder, "submit", "demo-hello", "-p", "name=ada")
    proc = jobgate(folder, "worker", "--exit-when-idle")
    assert proc.stderr and not proc.stderr.lstrip().startswith("{")
    assert re.search(r"INFO jobgate\.cli worker \S+ \(pid \d+\) on sqlite", proc.stderr)
    probe = (
        "import sys\n"
        "from jobgate.cli import cli\n"
        "from jobgate.config import load_config\n"
        "from jobgate.runtime.worker import Worker\n"
        "from jobgate.service.engine import Engine\n"
        "from jobgate.store.sqlstore import Store\n"
        "config = load_config('jobgate.yaml')\n"
        "Worker(Engine(Store(config.database), config))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=folder, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    """An OTLP/HTTP receiver on the loopback: the trace export requests it was sent."""
    handler: type[_Collector] = type("Collector", (_Collector,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", handler.bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_spans_are_exported_over_otlp_when_the_config_asks(folder: Path, collector: tuple[str, list[bytes]]) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    url, bodies = collector
    config = folder / "jobgate.yaml"
    config.write_text(
        config.read_text()
        + f"\nlogging: {{format: json, level: info}}\ntracing: {{otel: true, exporter: otlp, endpoint: '{url}'}}\n"
    )
    run_id = jobgate(folder, "submit", "demo-hello", "-p", "name=otel").stdout.strip()
    proc = jobgate(folder, "worker", "--exit-when-idle")
    json_lines(proc.stderr)  # the configuration's format, without a flag

    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
            spans += [(service, s) for scope in resource.scope_spans for s in scope.spans]
    (service, span), *_ = [(svc, s) for svc, s in spans if s.name == "demo-hello"]
    attributes = {a.key: a.value for a in span.attributes}
    derived = attempt_trace(run_id, 1)
    assert service == "jobgate"
    assert attributes["jobgate.job_run_id"].string_value == run_id
    assert attributes["jobgate.attempt"].int_value == 1
    assert attributes["jobgate.outcome"].string_value == "COMPLETED"
    assert span.trace_id.hex() == derived.trace_id and span.parent_span_id.hex() == derived.parent_span_id
