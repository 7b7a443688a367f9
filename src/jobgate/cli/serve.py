"""``jobgate serve`` and ``jobgate doctor``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jobgate.cli import render
from jobgate.cli.args import tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.errors import NotReadyError
from jobgate.plugins.admission import admit as admit_plugins
from jobgate.service import doctor, startup

if TYPE_CHECKING:
    from jobgate.service.engine import Engine


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option(
    "--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="the TCP port to listen on"
)
@click.option("--db", "database", metavar="URL", help="database URL (same as the global --db)")
@click.option("--no-worker", is_flag=True, help="do not execute runs in this process")
@click.option("--no-scheduler", is_flag=True, help="do not fire schedules from this process")
@click.option("--no-auth", is_flag=True, help="local development only: no tokens, loopback addresses only")
@click.option(
    "--bootstrap-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="also write the first-start admin token here (created 0600; an existing file is refused)",
)
@click.option("--concurrency", type=click.IntRange(1, 1024), help="embedded worker threads (default: config)")
@click.option("--migrate", "migrate_first", is_flag=True, help="bring an older database's schema up to date first")
@click.option("--redis-url", metavar="URL", help="subscribe to pub/sub triggers here (over the config's pubsub.url)")
@pass_app
def serve(
    app: AppContext,
    host: str,
    port: int,
    database: str | None,
    no_worker: bool,
    no_scheduler: bool,
    no_auth: bool,
    bootstrap_token_file: Path | None,
    concurrency: int | None,
    migrate_first: bool,
    redis_url: str | None,
) -> None:
    """Serve the HTTP API with the scheduler and an embedded worker, until SIGTERM or Ctrl-C."""
    from jobgate.server import ApiServer, ServeOptions, check_options

    app.setup_logging()
    admit_plugins(app.config().plugins)  # verified before anything starts; a refusal names the file
    options = ServeOptions(
        host=host,
        port=port,
        auth=not no_auth,
        worker=not no_worker,
        scheduler=not no_scheduler,
        bootstrap_token_file=bootstrap_token_file,
        concurrency=concurrency,
        redis_url=redis_url,
    )
    check_options(options)  # before touching the database: a refused start changes nothing
    if database:
        app.database = database
    app.may_create = migrate_first
    engine = app.engine()
    load_definitions_at_start(engine)  # before the first token: a refused start stores nothing
    server = ApiServer(engine, options)
    made = server.bootstrap()
    if made is not None and bootstrap_token_file is not None:
        # Written to the file only: a supervisor's log of this output must not keep a secret.
        render.err.print(
            f"first start: admin token {made.stored.token_id} for tenant {made.stored.tenant_id} written to "
            f"{bootstrap_token_file} (readable by its owner only)",
            markup=False,
        )
    elif made is not None:
        render.err.print(
            f"first start: admin token for tenant {made.stored.tenant_id}; it is shown only this once:",
            markup=False,
        )
        render.err.print(made.token, markup=False)
    elif bootstrap_token_file is not None and not no_auth:
        # Only a first start (no token at all) makes one: say so, or whoever waits for the file
        # waits for ever.
        render.err.print(
            f"not a first start: tokens exist already, so no admin token was written to {bootstrap_token_file}"
            " (make one with `jobgate tokens create --role admin`)",
            markup=False,
        )
    loops = ", ".join(n for n, on in (("worker", options.worker), ("scheduler", options.scheduler)) if on) or "no loops"
    auth = "no auth (loopback only)" if no_auth else "bearer tokens"
    logging.getLogger("jobgate.cli").info(
        "jobgate serving http://%s:%d on %s (%s; %s)",
        host,
        port,
        engine.store.safe_url,
        loops,
        auth,
        extra={"action": "server_started"},
    )
    server.serve()


def load_definitions_at_start(engine: Engine) -> None:
    """The configured ``definitions:`` folders, applied once (``service.startup``); an invalid
    file or a missing configured folder raises, naming it, and the process exits non-zero."""
    loaded = startup.load_at_startup(engine)
    log = logging.getLogger("jobgate.cli")
    log.info(
        "%s",
        loaded.summary(),
        extra={
            "action": "definitions_loaded",
            "definitions": len(loaded.results),
            "new_versions": loaded.created,
            "unchanged_versions": loaded.unchanged,
            "stale_files": [f"{r.job_definition_id} v{r.older}" for r in loaded.stale],
        },
    )
    for line in loaded.warnings():
        log.warning("%s", line, extra={"action": "definition_file_stale"})


@click.command("doctor")
@tenant_option(default=None, help="count this tenant's queue and outbox only (default: every tenant)")
@pass_app
def doctor_command(app: AppContext, tenant: str | None) -> None:
    """Check the deployment: database, schema, queue, workers, scheduler leader, outbox."""
    checks = doctor.run_checks(app.engine(), tenant_id=tenant)
    render.records(
        app.json_output,
        "doctor",
        [{"check": c.name, "status": c.level.value, "detail": c.detail} for c in checks],
    )
    red = [c.name for c in checks if c.level is doctor.Level.RED]
    if red:  # the deployment is not ready (nothing the command was given is invalid)
        raise NotReadyError(f"red: {', '.join(red)} (each line above says why)", field="doctor")
