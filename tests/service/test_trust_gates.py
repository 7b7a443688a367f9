"""Trust gates (seed 004): permissions covered by a signed licence and a live environment check,
fail closed, and the licence's concurrency limit held at creation. Every refusal: nothing
stored, an audit entry naming the rule."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import count, define, make_config

from jobgate.core.errors import GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.governance import signing, trust
from jobgate.service import audit, control, schedules, triggers
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

VENDOR = signing.generate("vendor")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def licence_document(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "licence_id": "LIC-7",
        "holder": "acme",
        "permissions": ["etl", "enc"],
        "expires_at": "2099-01-01T00:00:00Z",
        "max_concurrent_runs": 2,
    }
    doc.update(overrides)
    doc["signature"] = signing.sign(trust.licence_digest(doc), VENDOR.key_id, VENDOR.private_b64)
    return doc


def state(**overrides: Any) -> trust.LicenceState:
    return trust.LicenceState(trust.parse_licence(licence_document(**overrides), {"vendor": _root()}))


def _root() -> Any:
    return signing.public_key(VENDOR.public_b64, field="root")


@pytest.mark.parametrize(
    ("permissions", "licence", "environment", "rule"),
    [
        ((), trust.LicenceState(None, "none"), None, None),  # nothing needed: nothing checked
        (("etl",), trust.LicenceState(None, "no file"), frozenset({"etl"}), "licence_missing"),
        (("etl",), state(expires_at="2026-01-01T00:00:00Z"), frozenset({"etl"}), "licence_expired"),
        (("etl", "ml"), state(), frozenset({"etl", "ml"}), "licence_permission:ml"),
        (("etl",), state(), None, "environment_unreachable"),
        (("enc",), state(), frozenset({"etl"}), "environment_permission:enc"),
        (("etl", "enc"), state(), frozenset({"etl", "enc", "x"}), None),
    ],
)
def test_the_verdict_names_the_first_rule_that_refuses(
    permissions: tuple[str, ...], licence: trust.LicenceState, environment: frozenset[str] | None, rule: str | None
) -> None:
    refusal = trust.verdict(permissions, licence, environment, NOW)
    assert (None if refusal is None else refusal.rule) == rule


def test_a_tampered_or_foreign_licence_covers_nothing() -> None:
    tampered = {**licence_document(), "permissions": ["etl", "enc", "everything"]}
    with pytest.raises(signing.SignatureRefused):
        trust.parse_licence(tampered, {"vendor": _root()})
    other = signing.generate("vendor")
    foreign = {**licence_document()}
    foreign["signature"] = signing.sign(trust.licence_digest(foreign), "vendor", other.private_b64)
    with pytest.raises(signing.SignatureRefused):
        trust.parse_licence(foreign, {"vendor": _root()})


class Environment:
    """A local stand-in for the environment endpoint (Mercury ``/status``)."""

    def __init__(self) -> None:
        self.permissions = ["etl", "enc"]
        self.up = True
        env = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if not env.up:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps({"permissions": env.permissions}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/status"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@pytest.fixture
def gated(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, Environment, Path]]:
    env = Environment()
    licence = tmp_path / "licence.json"
    licence.write_text(json.dumps(licence_document()))
    config = make_config(
        tmp_path,
        trust_gates={
            "licence": str(licence),
            "licence_trust_roots": {"vendor": VENDOR.public_b64},
            "environment": {"url": env.url, "ttl_seconds": 0.001, "timeout_seconds": 2},
        },
    )
    store = Store(database_url)
    engine = Engine(store, config)
    define(engine, job_definition_id="etl-job", permissions=["etl"])
    define(engine, job_definition_id="plain-job")
    yield engine, env, licence
    env.server.shutdown()
    env.server.server_close()
    store.dispose()


def submit(engine: Engine, job: str = "etl-job") -> str:
    return engine.submit(SubmitRequest(job, scope=Scope(), requested_by="ada"), actor="ada").run.job_run_id


def refused_rules(engine: Engine) -> list[str]:
    entries = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
    return [str(e.event.payload["rule"]) for e in entries]


def test_covered_permissions_run_and_each_gate_refuses_alone(gated: tuple[Engine, Environment, Path]) -> None:
    engine, env, licence = gated
    submit(engine)
    env.up = False
    with pytest.raises(GovernanceRefusal):
        submit(engine)
    submit(engine, "plain-job")  # a definition without permissions does not depend on the check
    env.up = True
    env.permissions = ["enc"]
    with pytest.raises(GovernanceRefusal):
        submit(engine)
    env.permissions = ["etl", "enc"]
    licence.write_text(json.dumps(licence_document(permissions=["enc"], licence_id="LIC-8")))
    with pytest.raises(GovernanceRefusal):
        submit(engine)
    licence.write_text(json.dumps(licence_document(expires_at="2020-01-01T00:00:00Z", licence_id="LIC-9")))
    with pytest.raises(GovernanceRefusal):
        submit(engine)
    licence.unlink()
    with pytest.raises(GovernanceRefusal):
        submit(engine)
    assert refused_rules(engine) == [
        "environment_unreachable",
        "environment_permission:etl",
        "licence_permission:etl",
        "licence_expired",
        "licence_missing",
    ]
    assert count(engine, "job_runs") == 2  # the first licensed run and the plain one


def test_the_licence_concurrency_limit_holds_until_a_run_ends(gated: tuple[Engine, Environment, Path]) -> None:
    engine, _, _ = gated
    first, _second = submit(engine), submit(engine)
    with pytest.raises(GovernanceRefusal) as refused:
        submit(engine)
    assert refused.value.rule == "licence_concurrency" and count(engine, "job_runs") == 2
    control.cancel_run(engine, first, actor="ops")  # terminal: its slot is free again
    submit(engine)
    assert refused_rules(engine) == ["licence_concurrency"]


def test_concurrent_creations_never_exceed_the_licence(gated: tuple[Engine, Environment, Path]) -> None:
    engine, _, _ = gated
    outcomes: list[str] = []

    def attempt() -> None:
        try:
            submit(engine)
            outcomes.append("ok")
        except GovernanceRefusal:
            outcomes.append("refused")

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 2 and outcomes.count("refused") == 4
    assert count(engine, "licence_slots") == 2


def test_paths_that_check_slots_only_under_the_lock_audit_the_refusal(gated: tuple[Engine, Environment, Path]) -> None:
    """Preparing never counts the licence's slots; creating does, under the lock. A backfill and
    a policy fire refused there store nothing, and the refusal is audited (a fire's with the
    observation, which is kept)."""
    engine, _, _ = gated
    submit(engine), submit(engine)  # both slots held
    now = engine.clock.now()
    define(
        engine, job_definition_id="etl-cron", permissions=["etl"], trigger_type="cron", schedule_expression="0 * * * *"
    )
    with pytest.raises(GovernanceRefusal):
        schedules.backfill(
            engine, tenant_id="default", job_definition_id="etl-cron", start=now - timedelta(hours=3), end=now
        )
    define(engine, job_definition_id="etl-watch", permissions=["etl"], trigger_type="policy")
    doc = {"id": "when-hot", "job": "etl-watch", "condition": "etl.lag > 5"}
    schedules.put_schedules(engine, [schedules.schedule_from_document(doc, now=now)], source="t", now=now)
    (fire,) = triggers.record_fact(engine, tenant_id="default", name="etl.lag", value=9, source="t", actor="t")
    assert not fire.fired and fire.refused is not None and count(engine, "job_runs") == 2
    assert refused_rules(engine) == ["licence_concurrency", "licence_concurrency"]
    with engine.store.read() as tx:
        assert [value for _, value, _ in tx.facts_list("default", "etl.lag")] == [9.0]


def test_a_schedule_refused_under_the_write_lock_is_failing_as_one_refused_before_it(
    gated: tuple[Engine, Environment, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a regression review: the licence's concurrency refused a schedule's fires at the
    write lock; the slots were recorded refused but the schedule stayed active, unlogged."""
    from jobgate.runtime.scheduler import Scheduler
    from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule

    engine, _, _ = gated
    caplog.set_level("DEBUG", logger="jobgate.scheduler")
    # a licensed definition a cron trigger may start (its own schedule never due in March)
    define(engine, job_definition_id="etl-cron", permissions=["etl"], trigger_type="cron",
           schedule_expression="0 0 29 2 *")  # fmt: skip
    submit(engine), submit(engine)  # the licence's two concurrent runs
    start = datetime(2026, 3, 1, tzinfo=UTC)
    every_minute = check_schedule(Schedule("each-minute", "etl-cron", ScheduleKind.CRON, start, cron="* * * * *"))
    with engine.store.write() as tx:
        tx.schedule_put(every_minute, watermark=start, source="test", now=start)
    scheduler = Scheduler(engine, owner="a")
    for k in range(1, 6):
        scheduler.tick(start + k * timedelta(minutes=1) + timedelta(seconds=1))
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "each-minute")
        misses = tx.misses_list("default", "each-minute")
    assert [r for _, r in misses] == ["refused"] * 5
    warned = [r for r in caplog.records if r.levelname == "WARNING" and r.name == "jobgate.scheduler"]
    assert len(warned) == 2, [r.getMessage() for r in warned]  # the streak's first refusal, failing
    assert stored is not None and stored.state == "failing" and "licence" in (stored.last_error or "")
    assert count(engine, "job_runs") == 2
