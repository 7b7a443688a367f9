"""The local stand-in for the seed's external engines, as one HTTP endpoint on 127.0.0.1.

Each route does, on local files under its root folder, what the engine it stands for would do:

========================================  ===========================================================
``POST /dal/anchors``                     DAL: anchor an artifact hash in the hash-chained ledger
``GET  /dal/anchors/{ref}``, ``/dal/ledger``  DAL: one ledger entry, or the whole ledger
``POST /federation/inbox/{eco}``          partner ECO gateway: receive a package, answer a receipt
``GET  /federation/receipts/{eco}/{id}``  partner ECO gateway: what it received (size, SHA-256)
``POST /dsail/feedback``                  DSAIL: accept a redacted feedback batch (refuses PII)
``POST /aii/publications``                AII: accept one telemetry publication per ECO and period
``POST /notifications``                   notification service: reminders and escalations
``GET  /fleet/health/{node}``             a fleet node's health: its active config on a golden set
========================================  ===========================================================

DSAIL answers the first request of each idempotency key with 503 (a warming-up service), so
the AI Feedback example shows its publish step retried under its retry policy. Nothing here
takes a URL, a path or a file name from a request: ids in paths are checked against a pattern.
``python -m jobgate_examples.standin_server CONFIG`` serves the folder and port that a
``jobgate.yaml`` written by ``run_all.py`` names, for running one example with ``jobgate``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jobgate.core.canonical import canonical_json, digest
from jobgate_examples.ledger import Ledger, LedgerConflict, chain_problems
from jobgate_examples.pipeline import agreement

HEALTHY_AGREEMENT = 0.9  # a node is healthy when at least 90 % of the golden set keeps its decision
FORBIDDEN_FEEDBACK_FIELDS = frozenset({"subject_email", "subject_name", "reviewer_notes"})
AII_FIELDS = (
    "eco_number",
    "period",
    "jobs_scheduled",
    "jobs_completed",
    "job_success_rate",
    "retry_rate",
    "dead_letter_rate",
    "avg_workflow_latency_ms",
    "replay_backlog",
    "dal_batch_success_rate",
)
_ID = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"
MAX_BODY = 1 << 20


class Reply(Exception):
    """An answer other than 2xx, raised from deep inside a route."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Route = Callable[["Standins", re.Match[str], bytes, str], tuple[int, dict[str, Any]]]


class Standins:
    """The engines' state: files under ``root``; one lock keeps read-modify-write steps whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ledger = Ledger(root / "dal" / "ledger.jsonl")
        self.lock = threading.Lock()
        self.dsail_seen: set[str] = set()
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status): what was asked

    # ------------------------------------------------------------------------------- DAL
    def dal_anchor(self, _m: re.Match[str], body: bytes, key: str) -> tuple[int, dict[str, Any]]:
        doc = _object(body)
        for field in ("artifact_type", "artifact_id", "artifact_hash"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                raise Reply(422, f"{field} is required")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", doc["artifact_hash"]):
            raise Reply(422, "artifact_hash must be sha256:<64 hex>")
        if not key:
            raise Reply(422, "an Idempotency-Key header is required")
        try:
            entry, created = self.ledger.append(doc["artifact_type"], doc["artifact_id"], doc["artifact_hash"], key)
        except LedgerConflict as exc:
            raise Reply(409, str(exc)) from None
        return (201 if created else 200), entry

    def dal_entry(self, m: re.Match[str], _b: bytes, _k: str) -> tuple[int, dict[str, Any]]:
        entry = self.ledger.get(m.group(1))
        if entry is None:
            raise Reply(404, f"no ledger entry {m.group(1)}")
        return 200, entry

    def dal_ledger(self, _m: re.Match[str], _b: bytes, _k: str) -> tuple[int, dict[str, Any]]:
        entries = self.ledger.entries()
        return 200, {"entries": entries, "problems": chain_problems(entries)}

    # ------------------------------------------------------------------------ federation
    def federation_receive(self, m: re.Match[str], body: bytes, _k: str) -> tuple[int, dict[str, Any]]:
        envelope = _object(body)
        if not isinstance(envelope.get("package"), dict) or "signature" not in envelope:
            raise Reply(422, "a federation envelope has a package and a signature")
        eco = m.group(1)
        if envelope["package"].get("target_eco") != eco:
            raise Reply(422, f"this package is not addressed to {eco}")
        sha = "sha256:" + _sha256(body)
        receipt_id = "RCPT-" + sha[7:23].upper()
        path = self.root / "partners" / eco / "received" / f"{receipt_id}.json"
        with self.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        return 201, {"receipt_id": receipt_id, "sha256": sha, "size": len(body), "target_eco": eco}

    def federation_receipt(self, m: re.Match[str], _b: bytes, _k: str) -> tuple[int, dict[str, Any]]:
        path = self.root / "partners" / m.group(1) / "received" / f"{m.group(2)}.json"
        if not path.is_file():
            raise Reply(404, f"no receipt {m.group(2)}")
        data = path.read_bytes()
        return 200, {"receipt_id": m.group(2), "sha256": "sha256:" + _sha256(data), "size": len(data)}

    # ------------------------------------------------------------------------------ DSAIL
    def dsail_feedback(self, _m: re.Match[str], body: bytes, key: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            first = key not in self.dsail_seen
            self.dsail_seen.add(key)
        if first:
            raise Reply(503, "DSAIL is warming up; try again")
        doc = _object(body)
        items = doc.get("items")
        if not isinstance(doc.get("batch_id"), str) or not re.fullmatch(_ID, doc["batch_id"]):
            raise Reply(422, "batch_id is required")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise Reply(422, "items must be a list of objects")
        leaked = sorted({k for i in items for k in i if k in FORBIDDEN_FEEDBACK_FIELDS})
        if leaked:
            raise Reply(422, f"unredacted personal fields: {', '.join(leaked)}")
        path = self.root / "dsail" / "batches" / f"{doc['batch_id']}.json"
        with self.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        return 202, {"receipt_id": "DSAIL-" + _sha256(body)[:12].upper(), "accepted": len(items)}

    # -------------------------------------------------------------------------------- AII
    def aii_publish(self, _m: re.Match[str], body: bytes, key: str) -> tuple[int, dict[str, Any]]:
        """The body is jobgate's dispatch payload (an HTTP target step): the figures are in params."""
        params = _object(body).get("params")
        if not isinstance(params, dict):
            raise Reply(422, "params missing")
        try:
            payload = json.loads(str(params.get("payload")))
        except ValueError:
            raise Reply(422, "params.payload is not JSON") from None
        if not isinstance(payload, dict) or sorted(payload) != sorted(AII_FIELDS):
            raise Reply(422, f"payload fields must be exactly: {', '.join(AII_FIELDS)}")
        if digest(payload) != params.get("payload_sha256"):
            raise Reply(422, "payload_sha256 does not match the payload")
        path = self.root / "aii" / "publications.jsonl"
        with self.lock:
            existing = _lines(path)
            for p in existing:
                if (p["eco_number"], p["period"]) == (payload["eco_number"], payload["period"]):
                    if p["payload_sha256"] == params["payload_sha256"]:  # the same publication again
                        return 200, {**_publication(p), "duplicate": True}
                    raise Reply(409, f"{payload['period']} of {payload['eco_number']} is already published")
            record = {
                "publication_id": f"AII-{len(existing) + 1:05d}",
                "eco_number": payload["eco_number"],
                "period": payload["period"],
                "payload_sha256": params["payload_sha256"],
                "payload": payload,
                "idempotency_key": key,
            }
            _append(path, record)
        return 201, {**_publication(record), "duplicate": False}

    # ---------------------------------------------------------------------- notifications
    def notify(self, _m: re.Match[str], body: bytes, key: str) -> tuple[int, dict[str, Any]]:
        doc = _object(body)
        for field in ("kind", "to", "subject", "ref"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                raise Reply(422, f"{field} is required")
        path = self.root / "notifications" / "outbox.jsonl"
        with self.lock:
            existing = _lines(path)
            for n in existing:
                if n["idempotency_key"] == key:
                    return 200, {"notification_id": n["notification_id"], "duplicate": True}
            record = {**doc, "notification_id": f"NTF-{len(existing) + 1:05d}", "idempotency_key": key}
            _append(path, record)
        return 202, {"notification_id": record["notification_id"], "duplicate": False}

    # ------------------------------------------------------------------------------ fleet
    def node_health(self, m: re.Match[str], _b: bytes, _k: str) -> tuple[int, dict[str, Any]]:
        node = m.group(1)
        path = self.root / "fleet" / "nodes" / f"{node}.json"
        if not path.is_file():
            raise Reply(404, f"no node {node}")
        config = json.loads(path.read_text(encoding="utf-8"))
        golden = json.loads((self.root / "fleet" / "golden-set.json").read_text(encoding="utf-8"))
        share = agreement(golden, config["weights"], config["score_threshold"])
        healthy = share >= HEALTHY_AGREEMENT
        return 200, {"node": node, "version": config["version"], "agreement": share, "healthy": healthy}


ROUTES: list[tuple[str, re.Pattern[str], Route]] = [
    ("POST", re.compile(r"/dal/anchors"), Standins.dal_anchor),
    ("GET", re.compile(rf"/dal/anchors/({_ID})"), Standins.dal_entry),
    ("GET", re.compile(r"/dal/ledger"), Standins.dal_ledger),
    ("POST", re.compile(r"/federation/inbox/(ECO-[A-Z0-9]{1,16})"), Standins.federation_receive),
    ("GET", re.compile(rf"/federation/receipts/(ECO-[A-Z0-9]{{1,16}})/({_ID})"), Standins.federation_receipt),
    ("POST", re.compile(r"/dsail/feedback"), Standins.dsail_feedback),
    ("POST", re.compile(r"/aii/publications"), Standins.aii_publish),
    ("POST", re.compile(r"/notifications"), Standins.notify),
    ("GET", re.compile(r"/fleet/health/(node-[0-9]{1,3})"), Standins.node_health),
]


class StandinServer:
    """The endpoint on 127.0.0.1 (a free port unless one is given), served from a thread."""

    def __init__(self, root: Path, port: int = 0) -> None:
        self.state = Standins(root)
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                path = urlsplit(self.path).path
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
                key = self.headers.get("Idempotency-Key") or ""
                status, answer = 404, {"error": f"no route {method} {path}"}
                for route_method, pattern, route in ROUTES:
                    match = pattern.fullmatch(path)
                    if match is None or route_method != method:
                        continue
                    try:
                        status, answer = route(state, match, body, key)
                    except Reply as reply:
                        status, answer = reply.status, {"error": str(reply)}
                    break
                with state.lock:
                    state.requests.append((method, path, status))
                data = canonical_json(answer)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the runner prints the outcome
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> StandinServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="standins", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _object(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body or b"null")
    except ValueError:
        raise Reply(400, "the body is not JSON") from None
    if not isinstance(doc, dict):
        raise Reply(400, "the body must be a JSON object")
    return doc


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(canonical_json(record).decode("utf-8") + "\n")


def _publication(p: dict[str, Any]) -> dict[str, Any]:
    return {"publication_id": p["publication_id"], "status": "PUBLISHED", "period": p["period"]}


def main(argv: list[str]) -> int:
    """Serve the folder and port that an examples ``jobgate.yaml`` names, until interrupted."""
    import yaml

    if len(argv) != 1:
        print("usage: python -m jobgate_examples.standin_server PATH/TO/jobgate.yaml", file=sys.stderr)
        return 2
    values = yaml.safe_load(Path(argv[0]).read_text(encoding="utf-8"))["profiles"]["default"]
    port = urlsplit(values["standin_url"]).port or 0
    server = StandinServer(Path(values["examples_home"]), port).start()
    print(f"stand-in engines at {server.url} (root {values['examples_home']}); Ctrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
