"""``jobgate workers`` and ``jobgate locks``: who works for the cluster, and who holds what."""

from __future__ import annotations

from datetime import timedelta

import click

from jobgate.cli import render
from jobgate.cli.args import FiniteFloat
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.capabilities import advertised
from jobgate.service import cluster


@click.command("workers")
@click.option(
    "--all", "include_stopped", is_flag=True, help="also the workers that stopped, or are gone (silent over 10 minutes)"
)
@click.option(
    "--stale-after",
    type=FiniteFloat(0, 1e9),
    default=cluster.STALE_AFTER.total_seconds(),
    show_default=True,
    help="seconds without a heartbeat before a worker is shown as stale",
)
@pass_app
def workers_command(app: AppContext, include_stopped: bool, stale_after: float) -> None:
    """Registered workers: host, pid, concurrency, queues, last heartbeat, alive/stale/gone/stopped,
    and the definitions each found it cannot execute on its host (their runs wait for another)."""
    rows = cluster.workers(app.engine(), include_stopped=include_stopped, stale_after=timedelta(seconds=stale_after))
    records = [
        {
            "worker_id": r.info.worker_id,
            "state": r.state,
            "host": r.info.host,
            "pid": r.info.pid,
            "concurrency": r.info.concurrency,
            "queues": list(r.info.queues),
            "started_at": isoformat_utc(r.info.started_at),
            "heartbeat_at": isoformat_utc(r.info.heartbeat_at),
            "heartbeat_age_s": round(r.heartbeat_age.total_seconds(), 1),
            "cannot_run": sorted(
                {c.job_definition_id for c in map(advertised, r.info.capabilities.values()) if not c.runnable}
            ),
        }
        for r in rows
    ]
    render.records(app.json_output, "workers", records)


@click.command("locks")
@click.option("--prefix", default="", help="only locks whose name starts with this")
@pass_app
def locks_command(app: AppContext, prefix: str) -> None:
    """Named, fenced locks (scheduler and rescuer leaders, handler locks): holder, token, expiry."""
    records = [
        {
            "name": r.info.name,
            "state": r.state,
            "owner": r.info.owner,
            "token": r.info.token,
            "acquired_at": isoformat_utc(r.info.acquired_at),
            "expires_at": isoformat_utc(r.info.expires_at),
        }
        for r in cluster.locks(app.engine(), prefix)
    ]
    render.records(app.json_output, "locks", records)
