"""``jobgate tokens create|list|revoke``: API tokens, administered on the server's host."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import os_user, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.core.records import StoredToken
from jobgate.core.tokens import Role
from jobgate.service import tokens as service


@click.group("tokens")
def tokens() -> None:
    """API tokens: shown once at creation, stored only as a hash."""


def _record(t: StoredToken) -> dict[str, Any]:
    return {
        "token_id": t.token_id,
        "tenant": t.tenant_id,
        "role": t.role,
        "jobs": None if t.jobs is None else list(t.jobs),
        "label": t.label,
        "principal": t.principal_name,
        "minted_by": list(t.minted_by),
        "created_by": t.created_by,
        "created_at": isoformat_utc(t.created_at),
        "expires_at": None if t.expires_at is None else isoformat_utc(t.expires_at),
        "revoked_at": None if t.revoked_at is None else isoformat_utc(t.revoked_at),
    }


@tokens.command("create")
@tenant_option()
@click.option("--role", required=True, type=click.Choice([r.value for r in Role]), help="what the token may do")
@click.option("--job", "jobs", multiple=True, help="limit the token to this definition (repeatable)")
@click.option("--label", default="", help="what the token is for")
@click.option(
    "--expires-in-days",
    type=click.FloatRange(min=0, min_open=True, max=service.MAX_LIFETIME.days),
    help=f"default: never; at most {service.MAX_LIFETIME.days} (ten years)",
)
@click.option(
    "--principal",
    help="the person or service account the token belongs to (four eyes compares principals); "
    "default: the token is a principal of its own",
)
@pass_app
def create(
    app: AppContext,
    tenant: str,
    role: str,
    jobs: tuple[str, ...],
    label: str,
    expires_in_days: float | None,
    principal: str | None,
) -> None:
    """Create a token and print it once; it cannot be shown again."""
    made = service.create(
        app.engine(),
        tenant_id=tenant,
        role=role,
        actor=os_user(),
        label=label,
        jobs=list(jobs) or None,
        expires_in=None if expires_in_days is None else timedelta(days=expires_in_days),
        principal=principal,
    )
    if app.json_output:
        render.emit_json({**_record(made.stored), "token": made.token})
    else:
        render.out.print(made.token, highlight=False, soft_wrap=True)
        click.echo(f"token {made.stored.token_id} ({role}, tenant {tenant}): shown once, store it now", err=True)


@tokens.command("list")
@tenant_option(default=None, help="only this tenant's tokens")
@pass_app
def list_tokens(app: AppContext, tenant: str | None) -> None:
    """Every token without its secret: id, tenant, role, limits, dates."""
    records = [_record(t) for t in service.listed(app.engine(), tenant)]
    if not app.json_output:  # the table says "all" where --json says null: a limit is never left out
        records = [{**r, "jobs": "all" if r["jobs"] is None else r["jobs"]} for r in records]
    columns = ["token_id", "tenant", "role", "jobs", "principal", "label", "created_at", "expires_at", "revoked_at"]
    render.records(app.json_output, "tokens", records, columns)


@tokens.command("revoke")
@click.argument("token_id", required=False)
@tenant_option()
@click.option(
    "--principal",
    help="instead of one token: every token of this person and every token they minted (someone who left)",
)
@pass_app
def revoke(app: AppContext, token_id: str | None, tenant: str, principal: str | None) -> None:
    """Revoke a token, and every token minted with it: every request with them is refused from
    now on."""
    if token_id is None and principal is None:
        raise ValidationError("give a token id, or --principal NAME", field="token_id")
    if token_id is not None and principal is not None:
        raise ValidationError("give a token id or --principal, not both", field="token_id")
    actor = os_user()
    if principal is not None:
        gone = service.revoke_principal(app.engine(), tenant, principal, actor=actor)
        if not gone:  # exit 1: a script off-boarding someone must see that nothing was revoked
            raise NotFoundError(
                f"no valid token of tenant {tenant!r} belongs to {principal} or was minted by them", field="--principal"
            )
        render.out.print(f"{len(gone)} token(s) revoked: {', '.join(gone)}")
        return
    assert token_id is not None
    try:
        gone = service.revoke(app.engine(), tenant, token_id, actor=actor)
    except NotFoundError as exc:
        raise NotFoundError(f"{exc.message} in tenant {tenant!r} (--tenant names another)", field=exc.field) from None
    minted = [t for t in gone if t != token_id]
    render.out.print(
        f"token {token_id} revoked" + (f", and the tokens minted with it: {', '.join(minted)}" if minted else "")
    )
