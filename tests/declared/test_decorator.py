"""``@jobgate.job``: the decorator writes the definition a YAML file would (same digest, same
approval), declares typed params from annotations, refuses what a worker could not call, and a
worker runs it with typed values; ``jobgate apply --module`` stores all of a module's jobs or
none of them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from tests.cli.test_cli import ENV
from tests.cli.test_cli import jobgate as run_cli
from tests.declared.shop import jobs as shop
from tests.declared.shop import more
from tests.helpers import count
from tests.runtime.runtime_support import running_worker

import jobgate
from jobgate.client.api import Embedded
from jobgate.core.errors import ValidationError
from jobgate.decorator import DeclarationError
from jobgate.definitions import parse_definition, parse_definition_text
from jobgate.definitions.modules import declared_jobs, load_module_definitions
from jobgate.service import approvals
from jobgate.service.engine import Engine

SETTLE_YAML = """
job_definition_id: SHOP-SETTLE
job_class: MAINTENANCE_JOB
priority: high
retry_policy: fixed_delay_v1
description: Settle one order
code: ["package:tests.declared.shop"]
handler: tests.declared.shop.jobs:settle
params:
  - {name: order, required: true, pattern: "ORD-[0-9]{4}", description: the order number}
  - {name: total, type: decimal, required: true, minimum: "0", maximum: "100000"}
  - {name: day, type: date, required: true}
  - {name: at, type: datetime, required: true}
  - {name: rush, type: boolean, default: "false"}
  - {name: count, type: integer, default: "1"}
  - {name: region, choices: [eu, us], default: eu}
  - {name: level, type: integer, choices: [1, 2], default: "1"}
  - {name: channel, choices: [web, phone], default: web}
  - {name: note}
"""


def test_the_decorator_and_the_yaml_are_one_definition_with_one_digest(engine: Engine) -> None:
    from_code = parse_definition(shop.settle.document, shop.settle.handler, engine.config)
    from_yaml = parse_definition_text(SETTLE_YAML, "settle.yaml", engine.config)
    assert from_code.digest == from_yaml.digest
    assert from_code.definition.params == from_yaml.definition.params
    assert shop.settle.document["params"] == yaml.safe_load(SETTLE_YAML)["params"]
    assert shop.ping.document == {
        "job_definition_id": "SHOP-PING",
        "job_class": "MAINTENANCE_JOB",
        "code": ["package:tests.declared.shop"],
        "handler": "tests.declared.shop.jobs:ping",
    }


def _module_level(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__qualname__ = fn.__name__
    fn.__module__ = "tests.declared.elsewhere"
    return fn


def test_what_a_worker_could_not_call_is_refused_at_declaration() -> None:
    def amount(x: float) -> None: ...
    def untyped(x) -> None: ...  # type: ignore[no-untyped-def]
    def star(*args: str) -> None: ...
    def none_default(x: int = None) -> None: ...  # type: ignore[assignment]  # noqa: RUF013
    def optional_required(x: int | None) -> None: ...
    def mixed(x: Literal["a", 1]) -> None: ...
    def union(x: int | str) -> None: ...
    def bad_default(x: date = "yesterday") -> None: ...  # type: ignore[assignment]
    def listed(x: list[str]) -> None: ...

    cases = {
        amount: "use Decimal",
        untyped: "annotate it",
        star: "parameters are named",
        none_default: "int | None",
        optional_required: "needs a default",
        mixed: "all strings or all integers",
        union: "one type",
        bad_default: "YYYY-MM-DD",
        listed: "unsupported type",
    }
    for fn, reason in cases.items():
        with pytest.raises(DeclarationError, match=reason):
            jobgate.job("X", job_class="MAINTENANCE_JOB")(_module_level(fn))

    def nested() -> None: ...

    with pytest.raises(DeclarationError, match="module-level function"):
        jobgate.job("X", job_class="MAINTENANCE_JOB")(nested)
    with pytest.raises(DeclarationError, match="derived from the function"):
        jobgate.job("X", job_class="MAINTENANCE_JOB", handler="m:f")
    with pytest.raises(DeclarationError, match="not a definition field"):
        jobgate.job("X", job_class="MAINTENANCE_JOB", prority="high")


def test_a_module_and_its_package_are_read_once_each_job_where_it_is_defined(engine: Engine) -> None:
    assert [j.job_definition_id for j in declared_jobs(["tests.declared.shop.jobs"])] == ["SHOP-PING", "SHOP-SETTLE"]
    package = declared_jobs(["tests.declared.shop", "tests.declared.shop.jobs"])
    assert sorted(j.handler for j in package) == [
        "tests.declared.shop.jobs:ping",
        "tests.declared.shop.jobs:settle",
        "tests.declared.shop.more:tally",
    ]
    with pytest.raises(ValidationError, match="pip install -e"):
        load_module_definitions(["tests.declared.nowhere"], engine.config)
    with pytest.raises(ValidationError, match=r"no @jobgate\.job functions"):
        load_module_definitions(["tests.helpers"], engine.config)
    assert more.tally.document["queue"] == "reports"


def test_a_worker_runs_a_declared_job_with_typed_values_and_a_typed_result(engine: Engine) -> None:
    loaded = load_module_definitions(["tests.declared.shop.jobs"], engine.config)
    engine.apply_definitions(loaded)
    approvals.approve(engine, "default", "SHOP-SETTLE", actor="test-admin")
    with Embedded(engine, actor="app:shop") as jg:  # connect() with this test's configuration
        made = jg.submit(
            shop.settle,
            {
                "order": "ORD-0042",
                "total": Decimal("19.90"),
                "day": date(2026, 12, 4),
                "at": datetime(2026, 12, 4, 9, 30, tzinfo=UTC),
                "rush": True,
                "count": 2,
                "region": shop.Region.US,
                "level": shop.Level.HIGH,
            },
        )
        assert made.params["total"] == "19.9" and made.params["at"] == "2026-12-04T09:30:00Z"
        assert made.params["rush"] == "true" and made.params["level"] == "2"
        with pytest.raises(ValidationError) as refused:
            jg.submit(shop.settle, {"order": "ORD-1", "total": 1, "day": "2026-12-04", "at": "2026-12-04T09:00Z"})
        assert refused.value.field == "params.order"
        with running_worker(engine):
            done = jg.wait(made.job_run_id, timeout=30)
        assert done.status == "COMPLETED", jg.get(made.job_run_id)
        assert done.result == {"order": "ORD-0042", "total": "39.8", "day": "2026-12-04", "region": "us"}
        settled = jg.result(made.job_run_id, shop.Settled)
        assert settled == shop.Settled("ORD-0042", Decimal("39.80"), date(2026, 12, 4), shop.Region.US)
        assert "settling ORD-0042" in jg.log(made.job_run_id)


def _apply(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", "--json", "apply", *args],
        cwd=folder,
        env={**ENV, "PYTHONPATH": str(Path(__file__).parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_apply_module_stores_every_job_or_none(tmp_path: Path) -> None:
    run_cli(tmp_path, "init", "site")
    folder = tmp_path / "site"
    before = count_definitions(folder)
    (folder / "dup.yaml").write_text("job_definition_id: SHOP-PING\njob_class: MAINTENANCE_JOB\nhandler: m:f\n")
    refused = _apply(folder, "dup.yaml", "--module", "tests.declared.shop.jobs")
    assert refused.returncode != 0 and "duplicate id 'SHOP-PING'" in refused.stderr
    missing = _apply(folder, "--module", "tests.declared.shop.jobs", "--module", "no_such_jobs_module")
    assert missing.returncode != 0 and "no_such_jobs_module" in missing.stderr
    assert count_definitions(folder) == before  # nothing stored on a refusal
    usage = _apply(folder)
    assert usage.returncode == 2 and "--module" in usage.stderr
    applied = _apply(folder, "--module", "tests.declared.shop", "--approve")
    assert applied.returncode == 0, applied.stderr
    rows = json.loads(applied.stdout)
    assert {r["job_definition_id"] for r in rows} == {"SHOP-PING", "SHOP-SETTLE", "SHOP-TALLY"}
    assert all(r["approved"] and r["source"].startswith("tests.declared.shop.") for r in rows)
    again = json.loads(_apply(folder, "--module", "tests.declared.shop").stdout)
    assert not any(r["created"] for r in again)  # the same content: the same versions


def count_definitions(folder: Path) -> int:
    shown = json.loads(run_cli(folder, "--json", "definitions", "list").stdout)
    return len(shown)


def test_a_declared_job_is_checked_by_the_yaml_rules_and_nothing_is_stored(engine: Engine) -> None:
    def bad() -> None: ...

    declared = jobgate.job("SHOP-BAD", job_class="MAINTENANCE_JOB", retry_policy="no_such_policy")(_module_level(bad))
    with pytest.raises(ValidationError) as refused:
        engine.apply_definitions([parse_definition(declared.document, declared.handler, engine.config)])
    assert refused.value.field == "retry_policy" and refused.value.source == "tests.declared.elsewhere:bad"
    assert count(engine, "definitions") == 0
