"""The ``jobgate`` command's root: its global options, the table of its commands, and the entry
point that turns errors into exit codes.

Commands are loaded when they are asked for (``LazyGroup``): ``jobgate --help`` lists them from
the table without importing any, and ``jobgate runs list`` imports the runs commands and what
they need, not the server, the worker or the evidence tools. Start-up stays well under half a
second (``python -X importtime -m jobgate --help``).
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from jobgate.cli.context import AppContext
from jobgate.core.errors import JobgateError, UnavailableError

EX_UNAVAILABLE = 69  # sysexits.h: a service needed (the database) cannot be reached

# name -> (module, attribute, the first words of its help: kept in step by a test)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "alerts": ("jobgate.cli.schedules", "alerts", "Alerts: recorded as facts (alert.NAME is 1 while firing)"),
    "apply": ("jobgate.cli.main", "apply", "Load definition files or folders, and jobs declared in Python modules"),
    "audit": ("jobgate.cli.governance", "audit_group", "The audit log: every material action and every refusal"),
    "backfill": ("jobgate.cli.schedules", "backfill_command", "One run per slot of JOB's schedule in [--from, --to)"),
    "contracts": ("jobgate.cli.contracts", "contracts_group", "The CSI contracts (JSON Schemas)"),
    "definitions": ("jobgate.cli.governance", "definitions_group", "Stored job definitions."),
    "demo": ("jobgate.cli.demo", "demo", "Initialise a demo folder, submit the demo runs, execute them"),
    "dlq": ("jobgate.cli.main", "dlq", "Dead letters: runs that could not safely complete."),
    "doctor": ("jobgate.cli.serve", "doctor_command", "Check the deployment: database, schema, queue, workers"),
    "events": ("jobgate.cli.schedules", "events", "Events posted to jobgate: they fire the schedules"),
    "evidence": ("jobgate.cli.evidence", "evidence_group", "Evidence bundles: export a run's record, verify one"),
    "export": ("jobgate.cli.packs", "export_command", "Write the tenant's pack registry as an offline seed"),
    "facts": ("jobgate.cli.schedules", "facts", "Recorded facts: numeric observations"),
    "import": ("jobgate.cli.packs", "import_command", "Import a verified offline seed into the tenant"),
    "init": ("jobgate.cli.main", "init", "Create a jobgate folder: configuration, demo definitions, database"),
    "keys": ("jobgate.cli.keys", "keys", "Ed25519 keys: signed definitions, and the deployment's evidence key."),
    "locks": ("jobgate.cli.cluster", "locks_command", "Named, fenced locks"),
    "metrics": ("jobgate.cli.metrics", "metrics_command", "Print the Prometheus exposition"),
    "migrate": ("jobgate.cli.main", "migrate", "Bring the database's schema to this version"),
    "next": ("jobgate.cli.schedules", "next_command", "The next fire times of JOB's schedules"),
    "packs": ("jobgate.cli.packs", "packs_group", "Versioned packs of definitions and their approvals"),
    "plugins": ("jobgate.cli.plugins", "plugins", "Optional plugins: sign, verify, list (with the job kinds)"),
    "replay": ("jobgate.cli.governance", "replay_command", "Rebuild RUN_ID's record"),
    "requests": ("jobgate.cli.requests", "requests_group", "Runs proposed for review"),
    "retention": ("jobgate.cli.governance", "retention_group", "Retention of finished runs"),
    "runs": ("jobgate.cli.main", "runs", "Job runs: list, show, log, cancel, stop, retry"),
    "safe-mode": ("jobgate.cli.safemode", "safe_mode", "Safe mode: an emergency state"),
    "scheduler": ("jobgate.cli.schedules", "scheduler_command", "Fire due schedules while leading"),
    "schedules": ("jobgate.cli.schedules", "schedules", "Schedules attached to job definitions"),
    "serve": ("jobgate.cli.serve", "serve", "Serve the HTTP API with the scheduler and an embedded worker"),
    "sla": ("jobgate.cli.sla", "sla_group", "SLA monitoring (seed 000 §22-23)"),
    "submit": ("jobgate.cli.main", "submit", "Submit a manual trigger for JOB; prints the run id."),
    "tokens": ("jobgate.cli.tokens", "tokens", "API tokens: shown once at creation, stored only as a hash."),
    "worker": ("jobgate.cli.main", "worker", "Claim and execute due runs until SIGTERM (graceful) or SIGINT."),
    "workers": ("jobgate.cli.cluster", "workers_command", "Registered workers: host, pid, concurrency, queues"),
    "workflows": ("jobgate.cli.workflows", "workflows_group", "Workflow runs: start, list, show"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, listed from ``COMMANDS`` meanwhile."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in COMMANDS:
            return found
        module, attribute, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}.{attribute} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        # Shortened as click shortens a loaded command's help, without loading it.
        rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from jobgate.buildinfo import version_line

        click.echo(version_line())
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="the version and exit"
)
@click.option(
    "--config", "config_path", metavar="PATH", help="jobgate.yaml (default: ./jobgate.yaml or $JOBGATE_CONFIG)"
)
@click.option(
    "--db",
    "database",
    metavar="URL|PATH",
    help="database URL or SQLite file (overrides $JOBGATE_DATABASE_URL and the config)",
)
@click.option("--json", "json_output", is_flag=True, help="machine-readable JSON output")
@click.option(
    "--server", metavar="URL", envvar="JOBGATE_SERVER", help="act through a jobgate server (submit and runs commands)"
)
@click.option("--token", metavar="TOKEN", envvar="JOBGATE_TOKEN", help="the bearer token for --server")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="JOBGATE_LOG_FORMAT",
    help="log lines of worker, scheduler and serve: text, or one JSON object per line (default: config, text)",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    envvar="JOBGATE_LOG_LEVEL",
    help="lowest level logged (default: config, info); debug adds a line per run started and completed",
)
@click.pass_context
def cli(
    ctx: click.Context,
    config_path: str | None,
    database: str | None,
    json_output: bool,
    server: str | None,
    token: str | None,
    log_format: str | None,
    log_level: str | None,
) -> None:
    """jobgate: a governed job scheduler. Every run explainable, every transition recorded."""
    app = AppContext(
        config_path, database, json_output, server=server, token=token, log_format=log_format, log_level=log_level
    )
    if ctx.get_parameter_source("server") is click.core.ParameterSource.ENVIRONMENT:
        app.server_named_as = "$JOBGATE_SERVER"  # never typed on this command line: say where it came from
    ctx.obj = app
    ctx.call_on_close(app.close)


def undecodable_argument(argv: list[str]) -> str | None:
    """What to say of the first argument that is not UTF-8 text (a Latin-1 terminal's
    "Störung"), or None. Python hands such bytes over as lone surrogates, which no record can
    store: refused before anything runs, naming the option it was given to. A path to a file
    that exists is left alone (file names may be any bytes)."""
    for i, arg in enumerate(argv):
        if not any("\ud800" <= ch <= "\udfff" for ch in arg) or os.path.lexists(arg):
            continue
        option, equals, value = arg.partition("=")
        if arg.startswith("--") and equals:
            named, arg = option, value
        elif i > 0 and argv[i - 1].startswith("-") and not arg.startswith("-"):
            named = argv[i - 1]
        else:
            named = f"argument {i + 1}"
        shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        return f"{named}: '{shown}' is not UTF-8 text (set the terminal to UTF-8, or give the value in UTF-8)"
    return None


def main() -> None:
    from jobgate.cli import render
    from jobgate.logs import escape_last_resort

    escape_last_resort()

    refused = undecodable_argument(sys.argv[1:])
    if refused is not None:
        render.err.print(f"error: validation_error: {refused}", markup=False)
        sys.exit(1)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        render.err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except JobgateError as exc:
        render.err.print(f"error: {exc.code}: {exc}", markup=False)
        sys.exit(EX_UNAVAILABLE if isinstance(exc, UnavailableError) else 1)
    except Exception as exc:  # no stack trace for users; the type and first line are enough to report
        from jobgate.store.errors import driver_says, is_transient

        if is_transient(exc):  # a locked file, a database away: try again later, not a bug
            render.err.print(f"error: unavailable: database: {driver_says(exc)}", markup=False)
            sys.exit(EX_UNAVAILABLE)
        first = (str(exc).splitlines() or [""])[0]
        render.err.print(f"error: internal: {type(exc).__name__}: {first}", markup=False)
        sys.exit(70)
