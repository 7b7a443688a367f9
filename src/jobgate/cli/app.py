"""The ``jobgate`` command, assembled: the root group and its own commands (``main``), then every
area's commands registered on it, and the entry point that turns errors into exit codes."""

from __future__ import annotations

import sys

import click

from jobgate.cli import (
    cluster,
    contracts,
    demo,
    evidence,
    governance,
    keys,
    metrics,
    render,
    requests,
    safemode,
    schedules,
    serve,
    sla,
    tokens,
    workflows,
)
from jobgate.cli.main import cli as cli
from jobgate.cli.main import definitions
from jobgate.core.errors import JobgateError, UnavailableError

EX_UNAVAILABLE = 69  # sysexits.h: a service needed (the database) cannot be reached

cli.add_command(demo.demo)
schedules.register(cli)
cli.add_command(safemode.safe_mode)
cli.add_command(cluster.workers_command)
cli.add_command(cluster.locks_command)
cli.add_command(tokens.tokens)
cli.add_command(serve.serve)
cli.add_command(serve.doctor_command)
governance.register(definitions, cli)
cli.add_command(requests.requests_group)
cli.add_command(keys.keys)
cli.add_command(evidence.evidence_group)
cli.add_command(metrics.metrics_command)
cli.add_command(contracts.contracts_group)
cli.add_command(workflows.workflows_group)
cli.add_command(sla.sla_group)


def main() -> None:
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
        first = (str(exc).splitlines() or [""])[0]
        render.err.print(f"error: internal: {type(exc).__name__}: {first}", markup=False)
        sys.exit(70)
