"""Run every example end to end: ``python examples/run_all.py`` (see ``examples/README.md``).

1. a fresh folder: the stand-in engines' data (``world.seed``), and a ``jobgate.yaml`` whose
   profile names that folder and the stand-in endpoint's URL (127.0.0.1, a free port chosen
   when the endpoint starts: the URL comes from here, never from a request);
2. the endpoint started in a thread; the database migrated (SQLite in the folder, or ``--db``);
3. every definition under ``examples/*/`` applied and approved, as ``jobgate apply --approve``
   does for a local admin;
4. a worker process's loops in-process (worker, workflow coordinator, outbox publisher);
5. each case's workflow started once the cases it comes ``after`` have ended; a bounded wait;
6. each case checked against its expected status and outcome; a table; exit 1 if any differs.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from jobgate.config import CONFIG_FILENAME, load_config
from jobgate.core.errors import JobgateError, ValidationError
from jobgate.core.states import RunStatus
from jobgate.definitions import load_definitions
from jobgate.runtime.process import WorkerProcess, worker_settings
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.service.workflows import StartWorkflow, WorkflowView, start_workflow, workflow_view
from jobgate.store.sqlstore import Store
from jobgate.workflows.plan import WORKFLOW_ACTIVE
from jobgate_examples import world
from jobgate_examples.cases import CASES, Case, Finished, Unexpected
from jobgate_examples.standin_server import StandinServer

EXAMPLES = Path(__file__).resolve().parent.parent  # the examples/ folder
ACTOR = "examples-admin"
POLL = 0.05


@dataclass(frozen=True)
class Options:
    directory: Path | None = None  # None: a new temporary folder, removed at the end unless keep
    database: str | None = None  # None: SQLite in the folder
    timeout: float = 60.0
    keep: bool = False
    only: tuple[str, ...] = ()  # example folder names; empty: all


@dataclass(frozen=True)
class CaseResult:
    case: Case
    workflow_run_id: str | None
    status: RunStatus | None
    steps: str
    outcome: str
    ok: bool


@dataclass(frozen=True)
class Report:
    directory: Path
    results: list[CaseResult]
    seconds: float

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)


def example_folders() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def write_config(directory: Path, home: Path, url: str, database: str | None) -> Path:
    """The examples' ``jobgate.yaml``: what the names in the definitions mean on this host."""
    doc: dict[str, Any] = {
        "data_dir": "data",
        "definitions": [str(p) for p in example_folders()],
        "runners": {
            "replay-pipeline": {
                "binary": sys.executable,
                "args": ["-m", "jobgate_examples.replay_execute", "{{replay_id}}"],
                "non_retryable_exit_codes": [2, 3],
                "stop_grace_seconds": 2,
                "env": {
                    "PYTHONPATH": str(EXAMPLES),
                    "JOBGATE_EXAMPLES_HOME": str(home),
                    "PYTHONDONTWRITEBYTECODE": "1",
                },
            }
        },
        "targets": {
            "MEID_AII_PUBLISHER": {
                "cmi": "vera.TG-AII.ENGINE.PUBLISHER.1_0_0",
                "http": {"url": f"{url}/aii/publications", "timeout_seconds": 5},
                "description": "The AII stand-in: one publication per ECO and period.",
            }
        },
        "profiles": {
            "default": {"examples_home": str(home), "standin_url": url, "quarantine_review_hours": 48},
        },
        "retry_policies": [
            {
                "retry_policy_id": "examples_quick_retry_v1",
                "strategy": "fixed_delay",
                "max_attempts": 3,
                "initial_delay_seconds": 0.2,
                "max_delay_seconds": 0.2,
            },
            {  # a check whose failure is a decision (a sick canary, a case awaiting its reviewer):
                # the run ends FAILED for its workflow to act on, not in the dead-letter queue
                "retry_policy_id": "examples_check_v1",
                "strategy": "none",
                "max_attempts": 1,
                "dead_letter_non_retryable": False,
            },
        ],
        "worker": {
            "concurrency": 8,
            "poll_interval_ms": 20,
            "lease_seconds": 30,
            "shutdown_grace_seconds": 5,
            # The audit-integrity and AII steps read jobgate's own database (host jobs).
            "trusted_handlers": ["jobgate_examples.audit_integrity", "jobgate_examples.aii"],
        },
        "events": {"log": False},
        "sqlite": {"synchronous": "NORMAL"},
    }
    if database:
        doc["database"] = database
    path = directory / CONFIG_FILENAME
    header = (
        "# Written by examples/run_all.py: the stand-in engines' folder and endpoint for this run.\n"
        "# Handlers are imported from examples/: run jobgate with PYTHONPATH=examples.\n"
    )
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def apply_and_approve(engine: Engine) -> int:
    """Store every example definition and approve its exact content, as a local admin would."""
    loaded = load_definitions(example_folders(), engine.config)
    engine.apply_definitions(loaded)
    for item in loaded:
        approvals.approve(
            engine, item.definition.tenant_id, item.job_definition_id, actor=ACTOR, note="examples/run_all.py"
        )
    return len(loaded)


def _finished(engine: Engine, view: WorkflowView, home: Path) -> Finished:
    ids = {s.step_id: s.job_run_id for s in view.steps if s.job_run_id}
    ids |= {f"{s.step_id}:compensate": s.compensation_run_id for s in view.steps if s.compensation_run_id}
    with engine.store.read() as tx:
        runs = {r.job_run_id: r for r in tx.runs_get([i for i in ids.values() if i])}
    return Finished(view, {step: runs[i] for step, i in ids.items() if i in runs}, home, engine)


def _steps(view: WorkflowView) -> str:
    done = len(view.completed_steps)
    skipped = sum(1 for s in view.steps if s.status == "SKIPPED")
    text = f"{done}/{len(view.steps)}"
    return text + (f" ({skipped} skipped)" if skipped else "")


def _judge(engine: Engine, case: Case, view: WorkflowView | None, home: Path) -> CaseResult:
    if view is None:
        return CaseResult(case, None, None, "-", "not started (a case it comes after did not end)", False)
    status = view.record.status
    wid = view.record.workflow_run_id
    if status in WORKFLOW_ACTIVE:
        return CaseResult(case, wid, status, _steps(view), f"still {status.value} at the deadline", False)
    if status is not case.expected:
        why = f": {view.record.error_message}" if view.record.error_message else ""
        return CaseResult(
            case, wid, status, _steps(view), f"expected {case.expected.value}, ended {status.value}{why}", False
        )
    try:
        outcome, ok = case.check(_finished(engine, view, home)), True
    except Unexpected as exc:
        outcome, ok = f"unexpected: {exc}", False
    except Exception as exc:  # a check that breaks is a failed case, not a crashed runner
        outcome, ok = f"check failed: {type(exc).__name__}: {exc}", False
    return CaseResult(case, wid, status, _steps(view), outcome, ok)


def prepare(directory: Path, url: str, database: str | None) -> Engine:
    """A fresh folder: the stand-ins' data, ``jobgate.yaml``, the database migrated, every
    example definition applied and approved. The caller owns the engine (``store.dispose``)."""
    if (directory / CONFIG_FILENAME).exists():
        raise ValidationError(f"{directory} already holds a {CONFIG_FILENAME}: give a new folder", field="--dir")
    home = directory / "engines"
    world.seed(home)
    config = load_config(write_config(directory, home, url, database))
    engine = Engine(Store(database or config.database, synchronous=config.sqlite.synchronous), config)
    try:
        apply_and_approve(engine)
    except BaseException:
        engine.store.dispose()
        raise
    return engine


def run(options: Options) -> Report:
    """Prepare, run every case, judge; the stand-ins and the worker are stopped however it ends."""
    began = time.monotonic()
    directory = options.directory or Path(tempfile.mkdtemp(prefix="jobgate-examples-"))
    directory.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if not options.only or c.example in options.only]
    home = directory / "engines"
    server = StandinServer(home).start()
    engine: Engine | None = None
    proc: WorkerProcess | None = None
    try:
        engine = prepare(directory, server.url, options.database)
        proc = WorkerProcess(engine, worker_settings(engine))
        proc.start()
        results = _drive(engine, proc, cases, began + options.timeout, home)
    finally:
        if proc is not None:
            proc.stop()
            proc.join()
        server.stop()
        if engine is not None:
            engine.store.dispose()
    report = Report(directory, results, time.monotonic() - began)
    if options.directory is None and not options.keep and report.ok:  # a failed run's folder is kept to look at
        shutil.rmtree(directory, ignore_errors=True)
    return report


def _drive(engine: Engine, proc: WorkerProcess, cases: Sequence[Case], deadline: float, home: Path) -> list[CaseResult]:
    """Start each case once the cases it comes after have ended; judge each case as soon as it
    ends (before any case after it changes the state it leaves); stop at the deadline."""
    keys = {c.key for c in cases}
    started: dict[str, str] = {}
    judged: dict[str, CaseResult] = {}
    while time.monotonic() < deadline and len(judged) < len(cases):
        for case in cases:
            if case.key in started or not all(a in judged or a not in keys for a in case.after):
                continue
            record, _ = start_workflow(
                engine,
                StartWorkflow(case.workflow, params=case.params(), requested_by=ACTOR, reason=f"example {case.key}"),
                actor=ACTOR,
            )
            started[case.key] = record.workflow_run_id
            proc.loops["workflows"].wake()
        for case in cases:
            if case.key in started and case.key not in judged:
                view = workflow_view(engine, started[case.key])
                if view.record.status not in WORKFLOW_ACTIVE:
                    judged[case.key] = _judge(engine, case, view, home)
        time.sleep(POLL)
    for case in cases:  # the deadline passed: what never ended (or never started) is reported as such
        if case.key not in judged:
            last = workflow_view(engine, started[case.key]) if case.key in started else None
            judged[case.key] = _judge(engine, case, last, home)
    return [judged[c.key] for c in cases]


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or Console(width=max(Console().width, 176))  # piped output: still one line a case
    table = Table(title="jobgate examples: seed 000 §8 workflow types", show_lines=False)
    for column in ("workflow", "case", "status", "expected", "steps done", "outcome", ""):
        table.add_column(column, overflow="fold")
    for r in report.results:
        table.add_row(
            r.case.workflow,
            r.case.label or "-",
            r.status.value if r.status else "-",
            r.case.expected.value,
            r.steps,
            r.outcome,
            "[green]ok[/green]" if r.ok else "[red]UNEXPECTED[/red]",
        )
    console.print(table)
    good = sum(1 for r in report.results if r.ok)
    verdict = "all as expected" if report.ok else f"{len(report.results) - good} NOT as expected"
    console.print(f"{good}/{len(report.results)} outcomes as expected ({verdict}) in {report.seconds:.1f} s")
    console.print(f"folder: {report.directory}" + ("" if report.directory.exists() else " (removed)"))


def _prepare_only(directory: Path, database: str | None) -> int:
    """Lay out the folder and reserve the endpoint's port (written into jobgate.yaml); the
    stand-in endpoint is then served by ``python -m jobgate_examples.standin_server``."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = StandinServer(directory / "engines")  # binds a free port on 127.0.0.1, then lets it go
    url = probe.url
    probe.httpd.server_close()
    try:
        prepare(directory, url, database).store.dispose()
    except JobgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = directory / CONFIG_FILENAME
    print(f"prepared {directory} (stand-in endpoint {url}); then, from the repository root:")
    print(f"  PYTHONPATH=examples python -m jobgate_examples.standin_server {config} &")
    print(f"  PYTHONPATH=examples jobgate --config {config} workflows start config-rollout -p config_id=cfg-2026-06-b")
    print(f"  PYTHONPATH=examples jobgate --config {config} worker --exit-when-idle")
    print(f"  jobgate --config {config} workflows list")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_all.py", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, help="folder to create and keep (default: a temporary one, removed)")
    parser.add_argument(
        "--db", help="database URL, e.g. postgresql://user@127.0.0.1/db (default: SQLite in the folder)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for everything (default: 60)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--only", action="append", default=[], metavar="EXAMPLE", help="only this example folder")
    parser.add_argument("--verbose", "-v", action="store_true", help="also the worker's and coordinator's log lines")
    parser.add_argument(
        "--prepare-only", action="store_true", help="with --dir: lay out the folder for running examples with jobgate"
    )
    args = parser.parse_args(argv)
    if args.prepare_only:
        if args.dir is None:
            parser.error("--prepare-only needs --dir")
        return _prepare_only(args.dir, args.db)
    unknown = sorted(set(args.only) - {c.example for c in CASES})
    if unknown:
        parser.error(f"unknown example(s): {', '.join(unknown)}")
    logger = logging.getLogger("jobgate")
    level = logger.level
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    else:  # the table says how each run ended; the worker's own lines are for --verbose
        logger.setLevel(logging.ERROR)
    try:
        report = run(Options(args.dir, args.db, args.timeout, args.keep, tuple(args.only)))
    except JobgateError as exc:  # a refused definition or configuration: named, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        logger.setLevel(level)
    print_report(report)
    return 0 if report.ok else 1
