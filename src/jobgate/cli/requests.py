"""``jobgate requests``: the four-eyes workflow from the host (who acts: ``--by``, default you)."""

from __future__ import annotations

from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import PERSON, os_user, parse_params, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.records import RunRequest
from jobgate.service import requests


def _row(r: RunRequest) -> dict[str, Any]:
    return {
        "request_id": r.request_id,
        "status": r.status,
        "job": r.job_definition_id,
        "title": r.title,
        "requested_by": r.requested_by,
        "created": isoformat_utc(r.created_at),
        "decided_by": r.decided_by,
        "job_run_id": r.job_run_id,
        "params": r.params,
        "reason": r.reason,
        "verdict": r.verdict,
        "decision_note": r.decision_note,
    }


@click.group("requests")
def requests_group() -> None:
    """Runs proposed for review: propose, list, show, test (dry run), approve, reject."""


@requests_group.command("propose")
@click.argument("job")
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE", help="a parameter of the run (repeatable)")
@click.option("--title", required=True, help="a short title, shown to the approver")
@click.option("--reason", required=True, help="why the run is needed, shown to the approver")
@click.option("--by", "actor", type=PERSON, help="who proposes (default: you)")
@tenant_option()
@pass_app
def propose(
    app: AppContext, job: str, params: tuple[str, ...], title: str, reason: str, actor: str | None, tenant: str
) -> None:
    """Propose a run for a second person to approve (four eyes); nothing runs until then."""
    made = requests.propose(
        app.engine(),
        tenant_id=tenant,
        requester=actor or os_user(),
        job_definition_id=job,
        params=parse_params(params),
        title=title,
        reason=reason,
    )
    render.emit_json(_row(made)) if app.json_output else print(made.request_id)


@requests_group.command("list")
@click.option("--status", type=click.Choice(["pending", "approved", "rejected"]), help="only requests in this state")
@tenant_option()
@pass_app
def list_requests(app: AppContext, status: str | None, tenant: str) -> None:
    """List run requests, newest first."""
    rows = [_row(r) for r in requests.listed(app.engine(), tenant, status=status)]
    render.records(
        app.json_output,
        "requests",
        rows,
        columns=["request_id", "status", "job", "title", "requested_by", "job_run_id"],
    )


@requests_group.command("show")
@click.argument("request_id")
@tenant_option()
@pass_app
def show(app: AppContext, request_id: str, tenant: str) -> None:
    """Show a run request: what it asks, who proposed and decided it."""
    row = _row(requests.get(app.engine(), tenant, request_id))
    render.emit_json(row) if app.json_output else render.table(request_id, ["field", "value"], list(row.items()))


@requests_group.command("test")
@click.argument("request_id")
@click.option("--by", "actor", type=PERSON, help="who reviews (default: you)")
@tenant_option()
@pass_app
def test(app: AppContext, request_id: str, actor: str | None, tenant: str) -> None:
    """Dry run: every admission check, nothing stored or executed."""
    _, verdict = requests.test(app.engine(), tenant, request_id, actor=actor or os_user())
    if app.json_output:
        render.emit_json(verdict.as_dict())
        return
    print("admissible" if verdict.admissible else "NOT admissible")
    render.records(False, "checks", [c.__dict__ for c in verdict.checks])


@requests_group.command("approve")
@click.argument("request_id")
@click.option("--note", help="why it is approved, recorded with the approval")
@click.option("--by", "actor", type=PERSON, help="who approves (default: you; never the proposer)")
@tenant_option()
@pass_app
def approve(app: AppContext, request_id: str, note: str | None, actor: str | None, tenant: str) -> None:
    """Approve a request as the second person: its run is created and admitted like any other."""
    done = requests.approve(app.engine(), tenant, request_id, actor=actor or os_user(), note=note)
    render.emit_json(_row(done)) if app.json_output else print(f"{request_id} approved: run {done.job_run_id}")


@requests_group.command("reject")
@click.argument("request_id")
@click.option("--note", required=True, help="what the proposer should know")
@click.option("--by", "actor", type=PERSON, help="who rejects (default: you)")
@tenant_option()
@pass_app
def reject(app: AppContext, request_id: str, note: str, actor: str | None, tenant: str) -> None:
    """Reject a request, saying why; nothing runs."""
    done = requests.reject(app.engine(), tenant, request_id, actor=actor or os_user(), note=note)
    render.emit_json(_row(done)) if app.json_output else print(f"{request_id} rejected")
