"""``jobgate sla check|breaches``: one SLA monitor pass by hand, and the recorded breaches."""

from __future__ import annotations

from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.records import BreachRecord
from jobgate.core.sla import DeadlineKind, Phase
from jobgate.service import sla


@click.group("sla")
def sla_group() -> None:
    """SLA monitoring (seed 000 §22-23): deadlines, reminders, breaches, escalations."""


@sla_group.command("check")
@pass_app
def check_command(app: AppContext) -> None:
    """One monitor pass now: record due reminders and breaches (each once), escalate.

    Running monitors (in every worker and server) do the same every second; this is for
    operators and scripts, and is safe beside them.
    """
    result = sla.check(app.engine())
    data = {
        "subjects": result.subjects,
        "reminders": result.reminders,
        "breaches": result.breaches,
        "escalations": result.escalations,
        "behind": result.behind,
    }
    if app.json_output:
        render.emit_json(data)
    else:
        more = " (more to check: run again)" if result.behind else ""
        render.out.print(
            f"{result.breaches} breaches, {result.reminders} reminders, {result.escalations} escalations "
            f"recorded ({result.subjects} subjects checked){more}"
        )


@sla_group.command("breaches")
@tenant_option()
@click.option("--phase", type=click.Choice([p.value for p in Phase]), help="only reminders or only breaches")
@click.option("--kind", type=click.Choice([k.value for k in DeadlineKind]), help="only this deadline kind")
@click.option("--subject", "subject_id", help="only this run or workflow run")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=100, show_default=True, help="at most this many breaches"
)
@pass_app
def breaches_command(
    app: AppContext, tenant: str, phase: str | None, kind: str | None, subject_id: str | None, limit: int
) -> None:
    """Recorded reminders and breaches, newest first."""
    found = sla.breaches(app.engine(), tenant, phase=phase, kind=kind, subject_id=subject_id, limit=limit)
    render.records(
        app.json_output,
        "sla breaches",
        [_record(b) for b in found],
        columns=("detected_at", "phase", "kind", "subject_id", "job_class", "deadline", "severity", "escalated"),
    )


def _record(b: BreachRecord) -> dict[str, Any]:
    return {
        "sla_breach_id": b.sla_breach_id,
        "subject_kind": b.subject_kind,
        "subject_id": b.subject_id,
        "job_class": b.job_class,
        "job_definition_id": b.job_definition_id,
        "eco_number": b.eco_number,
        "kind": b.kind,
        "phase": b.phase,
        "sla_policy": b.sla_policy,
        "deadline": isoformat_utc(b.deadline),
        "detected_at": isoformat_utc(b.detected_at),
        "severity": b.severity,
        "requires_escalation": b.requires_escalation,
        "escalated": b.escalated,
    }
