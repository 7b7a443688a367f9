"""``jobgate metrics``: the seed 000 §50 metrics of the local database, once."""

from __future__ import annotations

import sys

import click
from prometheus_client.parser import text_string_to_metric_families

from jobgate.cli import render
from jobgate.cli.args import tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.telemetry.metrics import exposition


@click.command("metrics")
@tenant_option(default=None, help="this tenant's series only (default: every tenant)")
@pass_app
def metrics_command(app: AppContext, tenant: str | None) -> None:
    """Print the Prometheus exposition the server's /metrics gives for the database figures
    (the tg_scheduler_* set), for every tenant or one; with the global --json (jobgate --json
    metrics), one record per sample."""
    text = exposition(app.engine(), tenant).decode("utf-8")
    if not app.json_output:
        sys.stdout.write(text)
        return
    render.emit_json(
        [
            {"name": sample.name, "labels": dict(sample.labels), "value": sample.value}
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    )
