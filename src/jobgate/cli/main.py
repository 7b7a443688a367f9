"""Commands. Each parses its arguments, calls one service function and renders the answer."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import click

from jobgate.cli import render
from jobgate.cli.args import PERSON, FiniteFloat, given, os_user, parse_params, tenant_option
from jobgate.cli.context import NO_CONFIG, AppContext, pass_app
from jobgate.client.runs import Submission
from jobgate.config import CONFIG_FILENAME
from jobgate.core.errors import NotFoundError, NotReadyError, ValidationError
from jobgate.core.models import DEFAULT_TENANT
from jobgate.core.states import RunStatus
from jobgate.plugins.admission import admit as admit_plugins

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------------------- set-up
@click.command()
@click.option("--check", is_flag=True, help="change nothing: exit 1 when the database is behind this version")
@pass_app
def migrate(app: AppContext, check: bool) -> None:
    """Bring the database's schema to this version (creating a SQLite file if there is none).
    Nothing else migrates implicitly: other commands refuse an older database."""
    from jobgate.config import DATABASE_ENV, resolve_database_url
    from jobgate.store.migrate import HEAD
    from jobgate.store.opening import database_url, open_store, revision_of

    config = app.config()
    if config.path is None and not app.database and not os.environ.get(DATABASE_ENV):
        # no folder, no database named: a database made here would be one nothing else opens
        raise NotReadyError(f"{NO_CONFIG}, or name the database (--db or ${DATABASE_ENV})", field="config")
    url = database_url(resolve_database_url(config, app.database))
    if check:
        try:
            store = open_store(url, synchronous=config.sqlite.synchronous)
        except NotReadyError as exc:
            _say(app, {"current": False, "needs": HEAD, "detail": exc.message}, exc.message)
            raise SystemExit(1) from None
        before = revision_of(store)
        store.dispose()
        _say(app, {"current": True, "revision": before}, f"{store.safe_url} is at schema {before}: current")
        return
    from jobgate.store.opening import sqlite_file

    file = sqlite_file(url)
    created = file is not None and not file.exists()  # a mistyped path makes a new, empty database: said
    app.may_create = True
    engine = app.engine()
    after = revision_of(engine.store)
    said = f"created a new database {engine.store.safe_url}: schema {after}" if created else None
    _say(app, {"revision": after, "created": created}, said or f"{engine.store.safe_url} is at schema {after}")


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="overwrite an existing jobgate.yaml and demo definitions")
@click.option(
    "--production",
    is_flag=True,
    help="a production folder: governance.four_eyes on, no demo definitions, nothing applied or approved",
)
@click.pass_context
def init(ctx: click.Context, directory: Path, force: bool, production: bool) -> None:
    """Create a jobgate folder: configuration, demo definitions, database (migrated), definitions applied.
    With --production: the production configuration (four eyes on) and an empty definitions folder."""
    from jobgate.cli import shipped

    app: AppContext = ctx.obj
    app.may_create = True
    target = directory / CONFIG_FILENAME
    if target.exists() and not force:
        raise ValidationError(f"{target} exists; use --force to overwrite", field="directory")
    if target.exists() and not production:
        shipped.refuse_four_eyes_folder(
            target, "`init --force` would replace it with the demo's configuration, which has four eyes off"
        )
    written = [target] if production else shipped.written_by_init(directory)
    shipped.refuse_links(directory, written)
    with shipped.restored_on_failure(directory, written):
        report = _init(app, directory, target, production)
    report()


def _init(app: AppContext, directory: Path, target: Path, production: bool) -> Callable[[], None]:
    """Make the folder; what to print once it is made (printed after: an output pipe closed
    while printing must not undo a folder that was made, as a review's ``| head -1`` did)."""
    from jobgate.cli import shipped
    from jobgate.evidence import keys as evidence_keys

    directory.mkdir(parents=True, exist_ok=True)
    demo = resources.files("jobgate") / "demo"
    if production:
        with resources.as_file(demo) as src:
            shutil.copy(src / "jobgate.production.yaml", target)
        _name_database(target, app.database)
        (directory / "definitions").mkdir(exist_ok=True)
        app.config_path = str(target)
        engine = app.engine()
        key = evidence_keys.ensure(engine.config)

        def production_report() -> None:
            if app.json_output:
                made = {"directory": str(directory.resolve()), "database": engine.store.safe_url, "applied": []}
                render.emit_json(made)
                return
            render.out.print(f"initialised {directory.resolve()} (production: four eyes on, nothing applied)")
            render.out.print(f"  database   {engine.store.safe_url}")
            render.out.print(
                f"  evidence   key {key.key_id} at {engine.config.evidence_key_path} (signs anchors and bundles)"
            )
            render.out.print("next: put definitions in definitions/, `jobgate apply definitions/ --by YOU`, and have")
            render.out.print("      a second person run `jobgate definitions approve JOB --by THEM`")

        return production_report
    with resources.as_file(demo) as src:
        shutil.copy(src / CONFIG_FILENAME, target)
        _name_database(target, app.database)
        _pin_interpreter(target)
        shutil.copy(src / "demo-runs.yaml", directory / "demo-runs.yaml")
        shutil.copy(src / "schedules.yaml", directory / "schedules.yaml")
        shutil.copytree(src / "definitions", directory / "definitions", dirs_exist_ok=True)
    app.config_path = str(target)
    # Whoever creates the folder is its first admin: the demo definitions (the shipped files,
    # nothing else of the folder's) are approved in their name (recorded in the audit log), so
    # the demo runs, unless an admin of an existing database decided otherwise; anything applied
    # later needs approving.
    files, _ = shipped.unchanged_definitions(directory)
    applied = _apply(app, files, approve_as=_actor(None), applied_by=SHIPPED, spare_decisions=True)
    engine = app.engine()
    key = evidence_keys.ensure(engine.config)  # anchors and bundles are signed from the start

    def report() -> None:
        if app.json_output:
            made = {"directory": str(directory.resolve()), "database": engine.store.safe_url, "applied": applied}
            render.emit_json(made)
            return
        render.out.print(f"initialised {directory.resolve()}")
        render.out.print(f"  database   {engine.store.safe_url}")
        spared = [a["job_definition_id"] for a in applied if not a["approved"]]
        approved = len(applied) - len(spared)
        render.out.print(f"  applied    {len(applied)} definitions, {approved} approved by {_actor(None)}")
        if spared:
            render.out.print(f"  left as an admin decided (revoked, suspended or retired): {', '.join(spared)}")
        where = engine.config.evidence_key_path
        render.out.print(f"  evidence   key {key.key_id} at {where} (signs anchors and bundles)")
        render.out.print(f"next: cd {directory} && jobgate submit demo-hello --param name=you && jobgate worker")

    return report


def _name_database(config_file: Path, url: str | None) -> None:
    """Write the database ``init`` was given (``--db``) into the new folder's configuration, so
    every later command in the folder opens the database ``init`` set up, not a new SQLite file."""
    if not url:
        return
    from jobgate.store.opening import database_url, sqlite_file

    url = database_url(url)  # a file path as its URL, from where init ran
    found = sqlite_file(url)
    if found is not None and not found.is_absolute():
        url = f"sqlite:///{found.resolve().as_posix()}"
    lines = config_file.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("# database:"):
            lines[i] = f"database: {json.dumps(url)}   # given to `jobgate init --db`\n"
            break
    else:
        lines.insert(0, f"database: {json.dumps(url)}   # given to `jobgate init --db`\n")
    config_file.write_text("".join(lines), encoding="utf-8")


def _pin_interpreter(config_file: Path) -> None:
    """Name the Python that runs jobgate as the demo's runners' binary. A bare ``python3`` is
    looked up on the ``PATH`` of whoever runs a worker, and its bytes are bound into the code
    digest the definitions are approved with: activating a virtual environment (or any other
    ``PATH``) after ``init`` would then hold every runner run as ``code_changed``."""
    if not sys.executable or not Path(sys.executable).is_absolute():
        return
    pinned = f"binary: {json.dumps(sys.executable)}   # the Python that ran `jobgate init`"
    text = config_file.read_text(encoding="utf-8")
    config_file.write_text(text.replace("binary: python3\n", pinned + "\n"), encoding="utf-8")


# Who applies the definitions jobgate ships (the demo's): the package, not the person approving.
SHIPPED = "jobgate:shipped-files"


def _apply(
    app: AppContext,
    paths: list[Path],
    *,
    modules: Sequence[str] = (),
    approve_as: str | None = None,
    applied_by: str | None = None,
    spare_decisions: bool = False,
) -> list[dict[str, Any]]:
    """Apply ``paths`` and ``modules`` (all or none), approving each as ``approve_as`` if given.
    ``spare_decisions`` (the demo's shortcut): a definition an admin decided against (an
    approval revoked, suspended or retired) is applied but not approved."""
    from rich.progress import Progress

    from jobgate.definitions import load_definitions
    from jobgate.definitions.loader import refuse_duplicates
    from jobgate.definitions.modules import load_module_definitions
    from jobgate.service import approvals

    engine = app.engine()
    try:
        loaded = load_definitions(paths, engine.config) if paths else []
        loaded += load_module_definitions(modules, engine.config)
        refuse_duplicates(loaded)
    except ValidationError as exc:
        approvals.record_load_refusal(engine, DEFAULT_TENANT, exc, actor=approve_as or _actor(None))
        raise
    applier = applied_by or _actor(None)
    if approve_as is not None:
        # Refused before anything is stored: the shortcut cannot give a second person's approval.
        # A version already stored keeps the applier who stored it.
        with engine.store.read() as tx:
            for item in loaded:
                d = item.definition
                stored = tx.definition_get(d.tenant_id, d.job_definition_id)
                kept = stored.applied_by if stored is not None and stored.digest == d.digest else None
                approvals.check_may_approve(engine, d, approver=approve_as, applier=kept or applier)
    if len(loaded) > 20 and not app.json_output:
        with Progress(transient=True) as bar:
            task = bar.add_task("applying definitions", total=len(loaded))
            results = engine.apply_definitions(loaded, progress=lambda n: bar.advance(task, n), applied_by=applier)
    else:
        results = engine.apply_definitions(loaded, applied_by=applier)
    approved: set[str] = set()
    if approve_as is not None:
        decided = _decided_against(engine, loaded) if spare_decisions else set()
        for item, result in zip(loaded, results, strict=True):
            if (item.definition.tenant_id, result.job_definition_id) in decided:
                continue
            approvals.approve(engine, item.definition.tenant_id, result.job_definition_id, actor=approve_as)
            approved.add(result.job_definition_id)
    return [
        {
            "job_definition_id": r.job_definition_id,
            "tenant_id": item.definition.tenant_id,
            "version": r.version,
            "digest": r.digest,
            "created": r.created,
            "reverted": r.reverted,
            "source": r.source,
            "approved": r.job_definition_id in approved,
        }
        for item, r in zip(loaded, results, strict=True)
    ]


def _decided_against(engine: Any, loaded: Sequence[Any]) -> set[tuple[str, str]]:
    """The definitions of ``loaded`` an admin decided against: an approval revoked (of any
    version), or the definition suspended or retired."""
    from jobgate.core.models import DefinitionStatus

    out: set[tuple[str, str]] = set()
    with engine.store.read() as tx:
        for item in loaded:
            key = (item.definition.tenant_id, item.definition.job_definition_id)
            stored = tx.definition_get(*key)
            set_aside = stored is not None and stored.status in (DefinitionStatus.SUSPENDED, DefinitionStatus.RETIRED)
            if set_aside or any(not a.active for a in tx.approvals_list(*key)):
                out.add(key)
    return out


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--module",
    "modules",
    multiple=True,
    metavar="MODULE",
    help="an importable module (or package) whose @jobgate.job functions to apply; repeatable",
)
@click.option("--approve", is_flag=True, help="also approve each definition's content and code, as you (an admin)")
@click.option(
    "--by", "by", type=PERSON, help="who applies (default: the OS user); four eyes keeps them from approving it"
)
@pass_app
def apply(app: AppContext, paths: tuple[Path, ...], modules: tuple[str, ...], approve: bool, by: str | None) -> None:
    """Load definition files or folders, and jobs declared in Python modules (--module); all
    are stored, or none if one is invalid. A new or changed definition runs only once an admin
    approved its content and code (--approve, or `jobgate definitions approve`); --approve is
    refused, with nothing stored, for definitions that need a second person
    (governance.four_eyes, or a runner that executes its body)."""
    if not paths and not modules:
        raise click.UsageError("name definition files or folders, or --module MODULE")
    admit_plugins(app.config().plugins)  # a definition may name an admitted plugin's handler
    applied = _apply(
        app, list(paths), modules=modules, approve_as=_actor(by) if approve else None, applied_by=_actor(by)
    )
    for a in applied:
        a["approval"] = _approval_state(app, a)
    if app.json_output:
        render.emit_json(applied)
        return
    render.table(
        "applied",
        ["definition", "version", "digest", "change", "approval", "source"],
        [
            (
                a["job_definition_id"],
                a["version"],
                a["digest"][:23] + "…",
                "new version" if a["created"] else f"v{a['version']} current again" if a["reverted"] else "unchanged",
                a["approval"],
                a["source"],
            )
            for a in applied
        ],
    )


def _approval_state(app: AppContext, applied: dict[str, Any]) -> str:
    """Whether the version just applied may run, as a newcomer reads it: ``approved now`` (by
    this ``--approve``), ``approved`` (content and code approved before), ``code changed``
    (content approved, its code since edited) or ``needs approval``."""
    from jobgate.service import approvals

    if applied["approved"]:
        return "approved now"
    found = approvals.status(app.engine(), applied["tenant_id"], applied["job_definition_id"])
    if not found.approved:
        return "needs approval"
    return "approved" if found.code_matches else "code changed"


@click.group()
def definitions() -> None:
    """Stored job definitions."""


@definitions.command("list")
@tenant_option()
@pass_app
def definitions_list(app: AppContext, tenant: str) -> None:
    """List the definitions: current version, class, status and digest (`definitions approval JOB`: its approval)."""
    with app.engine().store.read() as tx:
        items = tx.definitions_list(tenant)
    if app.json_output:
        render.emit_json(
            [
                {
                    "job_definition_id": d.job_definition_id,
                    "version": d.version,
                    "digest": d.digest,
                    "job_class": d.job_class,
                    "status": d.status,
                }
                for d in items
            ]
        )
        return
    render.table(
        "definitions",
        ["definition", "version", "class", "status", "digest"],
        [(d.job_definition_id, d.version, d.job_class, d.status.value, d.digest) for d in items],
    )


@definitions.command("show")
@click.argument("job")
@tenant_option()
@pass_app
def definitions_show(app: AppContext, job: str, tenant: str) -> None:
    """Show a definition: its content, digests, versions and approval."""
    with app.engine().store.read() as tx:
        versions = tx.definition_versions(tenant, job)
    if not versions:
        raise NotFoundError(f"no job definition {job!r}", field="job_definition_id")
    current = next(v for v in versions if v.is_current)
    if app.json_output:
        render.emit_json(
            {
                "current": current.content,
                "version": current.version,
                "digest": current.digest,
                "status": current.status,
                "versions": [{"version": v.version, "digest": v.digest, "created_at": v.created_at} for v in versions],
            }
        )
        return
    render.out.print_json(data=current.content)
    render.table(
        f"{job} versions",
        ["version", "digest", "created", "current"],
        [(v.version, v.digest, render.when(v.created_at), "*" if v.is_current else "") for v in versions],
    )


# ---------------------------------------------------------------------------- runs
@click.command()
@click.argument("job")
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE", help="a declared parameter")
@click.option("--request-id", help="idempotency: the same request id always maps to the same run")
@click.option("--reason", help="why this run is requested (recorded with the trigger)")
@click.option("--by", "requested_by", type=PERSON, default=None, help="who requests it (default: $USER)")
@tenant_option()
@click.option(
    "--count",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="submit this many runs (distinct request ids), in batches",
)
@pass_app
def submit(
    app: AppContext,
    job: str,
    params: tuple[str, ...],
    request_id: str | None,
    reason: str | None,
    requested_by: str | None,
    tenant: str,
    count: int,
) -> None:
    """Submit a manual trigger for JOB; prints the run id."""
    from rich.progress import Progress

    client = app.runs_client(requested_by=requested_by, tenant_given=given("tenant"))
    who = _actor(requested_by)
    values = parse_params(params)
    if count == 1:
        made = client.submit(Submission(job, values, reason, request_id), tenant=tenant, actor=who)
        if app.json_output:
            render.emit_json(
                {
                    "job_run_id": made.run.job_run_id,
                    "created": made.created,
                    "status": made.run.status,
                    "idempotency_key": made.run.idempotency_key,
                }
            )
        else:
            print(made.run.job_run_id)
            if not made.created:
                render.err.print("(already submitted: existing run returned)")
        return
    ids: list[str] = []
    with Progress(transient=True, disable=app.json_output) as bar:
        task = bar.add_task(f"submitting {count} runs", total=count)
        for start in range(0, count, 1000):
            n = min(1000, count - start)
            batch = [
                Submission(job, values, reason, f"{request_id}-{start + i}" if request_id else None) for i in range(n)
            ]
            ids.extend(r.run.job_run_id for r in client.submit_many(batch, tenant=tenant, actor=who))
            bar.advance(task, n)
    if app.json_output:
        render.emit_json(ids)
    else:
        print("\n".join(ids))


@click.group()
def runs() -> None:
    """Job runs: list, show, log, cancel, stop, retry (locally, or through --server)."""


@runs.command("list")
@click.option(
    "--status",
    multiple=True,
    type=click.Choice([s.value for s in RunStatus], case_sensitive=False),
    help="only runs in this status (repeatable)",
)
@click.option("--job", help="only runs of this definition")
@click.option("--class", "job_class", help="only runs of this job class")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="at most this many runs, newest first",
)
@tenant_option()
@click.option("--wide", is_flag=True, help="full run ids and every column (the default fits 80 columns)")
@pass_app
def runs_list(
    app: AppContext,
    status: tuple[str, ...],
    job: str | None,
    job_class: str | None,
    limit: int,
    tenant: str,
    wide: bool,
) -> None:
    """Runs, newest first. Tables show the end of each run id; every command taking a RUN_ID
    takes that end too (through --server, looked for among the newest 1,000 runs)."""
    items = app.runs_client(tenant_given=given("tenant")).list(
        tenant=tenant,
        statuses=[RunStatus(s.upper()) for s in status],
        job=job,
        job_class=job_class,
        limit=limit,
    )
    if app.json_output:
        render.emit_json([r.model_dump(mode="json") for r in items])
    else:
        render.runs_table(items, wide=wide)


@runs.command("show")
@click.argument("run_id")
@pass_app
def runs_show(app: AppContext, run_id: str) -> None:
    """One run: its definition version and digests, configuration snapshot, params, status,
    attempts, every transition, dead letter and result (RUN_ID: the id, or its end as the
    tables show it)."""
    detail = app.runs_client().detail(run_id)
    if app.json_output:
        render.emit_json(detail.model_dump(mode="json"))
    else:
        render.run_detail(detail)


@runs.command("log")
@click.argument("run_id")
@click.option("--tail", type=click.IntRange(1, 10_000), help="only the last N lines")
@click.option("--follow", "-f", is_flag=True, help="keep printing what is written until the run ends")
@pass_app
def runs_log(app: AppContext, run_id: str, tail: int | None, follow: bool) -> None:
    """The run's log: its handler's output (print, logging, ctx.log) or its runner's, attempt by
    attempt; --follow prints what is written until the run ends (locally, or through --server)."""
    import time

    from jobgate.core.errors import NotFoundError

    client = app.runs_client()
    offset, first = 0, True
    while True:
        try:
            part = client.log(run_id, tail=tail if first else None, offset=offset)
            sys.stdout.write(part.text)
            sys.stdout.flush()
            offset, first = part.end, False
            wrote = bool(part.text)
        except NotFoundError as exc:
            if exc.field != "log" or not follow:
                raise
            wrote = False  # no output yet: the run has not written any
        if not follow:
            if wrote and tail is None:
                continue  # a log is read a slice (1 MiB) at a time: the rest, up to its end now
            return
        if not wrote:
            if RunStatus(client.detail(run_id).run.status).is_terminal:
                if not first:  # what came between the last read and the end
                    sys.stdout.write(client.log(run_id, tail=None, offset=offset).text)
                return
            time.sleep(1.0)  # a person watching: one look a second is enough


def _actor(requested_by: str | None) -> str:

    return requested_by or os_user()


@runs.command("cancel")
@click.argument("run_id")
@click.option("--reason", help="why, recorded with the cancellation")
@click.option(
    "--by", "requested_by", type=PERSON, help="who asks (default: your login name), recorded with the cancellation"
)
@pass_app
def runs_cancel(app: AppContext, run_id: str, reason: str | None, requested_by: str | None) -> None:
    """Cancel a pending run (not yet started)."""
    run = app.runs_client(requested_by=requested_by).cancel(run_id, actor=_actor(requested_by), reason=reason)
    _say(app, {"job_run_id": run.job_run_id, "status": run.status}, f"{run.job_run_id} {run.status}")


@runs.command("stop")
@click.argument("run_id")
@click.option("--reason", help="why, recorded with the stop")
@click.option("--by", "requested_by", type=PERSON, help="who asks (default: your login name), recorded with the stop")
@pass_app
def runs_stop(app: AppContext, run_id: str, reason: str | None, requested_by: str | None) -> None:
    """Stop a running run: SIGTERM, then kill after the runner's grace period."""
    run = app.runs_client(requested_by=requested_by).stop(run_id, actor=_actor(requested_by), reason=reason)
    _say(
        app,
        {"job_run_id": run.job_run_id, "status": run.status, "stop_requested": True},
        f"{run.job_run_id} stop requested",
    )


@runs.command("retry")
@click.argument("run_id")
@click.option("--by", "requested_by", type=PERSON, help="who asks (default: your login name), recorded with the retry")
@pass_app
def runs_retry(app: AppContext, run_id: str, requested_by: str | None) -> None:
    """A new run for a terminal run (at most one per source run; asking again returns it).

    Its id is derived from the tenant and the source run, and it names the source in
    ``retry_of``; a further retry is a retry of the retry run."""
    made = app.runs_client(requested_by=requested_by).retry(run_id, actor=_actor(requested_by))
    retry_of = made.run.retry_of or run_id
    _say(
        app,
        {"job_run_id": made.run.job_run_id, "retry_of": retry_of, "created": made.created},
        f"{made.run.job_run_id} retry of {retry_of}{'' if made.created else ' (existing retry)'}",
    )


@runs.command("children")
@click.argument("run_id")
@click.option("--parents", is_flag=True, help="the run it retries instead of the runs that retry it")
@pass_app
def runs_children(app: AppContext, run_id: str, parents: bool) -> None:
    """The runs that retry RUN_ID (or, with --parents, the run it retries): lineage derived
    only from ``retry_of``."""
    found = app.runs_client().lineage(run_id, "parents" if parents else "children")
    if app.json_output:
        render.emit_json(found.model_dump(mode="json"))
        return
    if not found.edges and not found.retired:
        print(f"{found.job_run_id}: no {found.direction}")
    for edge in found.edges:
        source = f"\tretry of {edge.run.retry_of}" if edge.run.retry_of else ""
        print(f"{edge.kind}\t{edge.run.job_run_id}\t{edge.run.status}{source}")
    for gone in found.retired:
        print(f"{gone.kind}\t{gone.job_run_id}\t{gone.status}\tretired by retention at {gone.retired_at.isoformat()}")


def _say(app: AppContext, data: dict[str, Any], text: str) -> None:
    if app.json_output:
        render.emit_json(data)
    else:
        print(text)


@click.group()
def dlq() -> None:
    """Dead letters: runs that could not safely complete."""


@dlq.command("list")
@click.option("--all", "show_all", is_flag=True, help="include resolved dead letters")
@tenant_option()
@click.option("--wide", is_flag=True, help="full run ids and every column (the default fits 80 columns)")
@pass_app
def dlq_list(app: AppContext, show_all: bool, tenant: str, wide: bool) -> None:
    """List the dead letters still open (--all: resolved ones too)."""
    with app.engine().store.read() as tx:
        letters = tx.dead_letters_list(tenant, open_only=not show_all)
    if app.json_output:
        from dataclasses import asdict

        render.emit_json([asdict(d) for d in letters])
    else:
        render.dead_letters_table(letters, wide=wide, resolved=show_all)


@dlq.command("requeue")
@click.argument("run_id")
@click.option(
    "--by", "requested_by", type=PERSON, help="who requeues (default: your login name), recorded with the requeue"
)
@pass_app
def dlq_requeue(app: AppContext, run_id: str, requested_by: str | None) -> None:
    """One more attempt for a dead-lettered or escalated run (same idempotency key)."""
    from jobgate.client.runs import LocalRuns
    from jobgate.service import control

    run_id = LocalRuns(app.engine()).resolve(run_id)
    run = control.requeue_run(app.engine(), run_id, actor=_actor(requested_by))
    _say(app, {"job_run_id": run.job_run_id, "status": run.status}, f"{run.job_run_id} {run.status.value}")


@dlq.command("close")
@click.argument("run_id")
@click.option("--note", required=True, help="why nothing more is to run (recorded and audited)")
@click.option(
    "--by", "requested_by", type=PERSON, help="who closes it (default: your login name), recorded with the close"
)
@pass_app
def dlq_close(app: AppContext, run_id: str, note: str, requested_by: str | None) -> None:
    """Close a run's open dead letter without another attempt (its workflow ended, the work was
    done by hand): resolved with who and why, audited; the run stays as it ended."""
    from jobgate.client.runs import LocalRuns
    from jobgate.service import control

    run_id = LocalRuns(app.engine()).resolve(run_id)
    letter = control.close_dead_letter(app.engine(), run_id, actor=_actor(requested_by), note=note)
    _say(
        app,
        {"job_run_id": run_id, "dead_letter_id": letter.dead_letter_id, "resolution": letter.resolution},
        f"{letter.dead_letter_id} closed ({run_id})",
    )


# ---------------------------------------------------------------------------- processes
@click.command()
@click.option("--concurrency", type=click.IntRange(1, 1024), help="executor threads (default: config)")
@click.option("--queues", default="default", show_default=True, help="comma-separated queues to claim from")
@click.option("--batch-size", type=click.IntRange(1, 5000), help="most runs claimed per transaction")
@click.option(
    "--prefetch", type=click.IntRange(0, 5000), default=0, show_default=True, help="runs claimed beyond free threads"
)
@click.option("--lease-seconds", type=FiniteFloat(1, 3600), help="lease length (renewed every third)")
@click.option("--poll-ms", type=click.IntRange(1, 60_000), help="poll interval when idle")
@click.option("--no-publisher", is_flag=True, help="do not deliver outbox events from this process")
@click.option("--exit-when-idle", is_flag=True, help="stop once nothing is running or due")
@click.option("--migrate", "migrate_first", is_flag=True, help="bring an older database's schema up to date first")
@pass_app
def worker(
    app: AppContext,
    concurrency: int | None,
    queues: str,
    batch_size: int | None,
    prefetch: int,
    lease_seconds: float | None,
    poll_ms: int | None,
    no_publisher: bool,
    exit_when_idle: bool,
    migrate_first: bool,
) -> None:
    """Claim and execute due runs until SIGTERM (graceful) or SIGINT."""
    from jobgate.runtime.process import WorkerProcess, worker_settings

    app.setup_logging()
    admit_plugins(app.config().plugins)  # verified before anything starts; a refusal names the file
    app.may_create = migrate_first
    engine = app.engine()
    settings = worker_settings(
        engine,
        concurrency=concurrency,
        queues=tuple(q.strip() for q in queues.split(",") if q.strip()),
        batch_size=batch_size,
        prefetch=prefetch,
        lease=None if lease_seconds is None else timedelta(seconds=lease_seconds),
        poll_interval=None if poll_ms is None else timedelta(milliseconds=poll_ms),
    )
    proc = WorkerProcess(engine, settings, publish=not no_publisher)
    proc.install_signal_handlers()
    proc.start()
    logging.getLogger("jobgate.cli").info(
        "worker %s (pid %d) on %s (queues %s, concurrency %d)",
        proc.worker.worker_id,
        os.getpid(),
        engine.store.safe_url,
        ",".join(settings.queues),
        settings.concurrency,
        extra={"action": "worker_started", "worker_id": proc.worker.worker_id},
    )
    if exit_when_idle:
        proc.stop_when_idle()
    proc.join()
    left = proc.left_behind() if exit_when_idle else []
    if left:  # found by a review: it stopped in silence, as if nothing were due
        jobs = sorted({r.job_definition_id for r in left})
        render.err.print(
            f"{len(left)} run(s) of {', '.join(jobs)} still wait: this worker cannot run them here or a"
            " dependency they need is down (its log says which); start a worker where their code, runner or"
            " policy is, or bring the dependency back",
            markup=False,
        )
