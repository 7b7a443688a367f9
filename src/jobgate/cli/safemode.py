"""``jobgate safe-mode status|on|off|history``: the tenant's emergency state (seed 000 §39-40)."""

from __future__ import annotations

from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import PERSON, os_user, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.records import SafeModePeriod
from jobgate.service import safemode


@click.group("safe-mode")
def safe_mode() -> None:
    """Safe mode: an emergency state; while it is on, the tenant's safe-mode schedules fire."""


def _period(p: SafeModePeriod | None) -> dict[str, Any]:
    if p is None:
        return {"active": False, "activation": None}
    return {
        "active": p.active,
        "activation": p.activation,
        "since": isoformat_utc(p.activated_at) if p.active else isoformat_utc(p.deactivated_at or p.activated_at),
        "activated_at": isoformat_utc(p.activated_at),
        "activated_by": p.activated_by,
        "reason": p.reason,
        "deactivated_at": None if p.deactivated_at is None else isoformat_utc(p.deactivated_at),
        "deactivated_by": p.deactivated_by,
        "deactivation_reason": p.deactivation_reason,
    }


def _line(p: SafeModePeriod | None) -> str:
    if p is None:
        return "safe mode: off (never activated)"
    if p.active:
        return f"safe mode: ON since {isoformat_utc(p.activated_at)} by {p.activated_by}: {p.reason}"
    assert p.deactivated_at is not None
    return f"safe mode: off since {isoformat_utc(p.deactivated_at)} by {p.deactivated_by}: {p.deactivation_reason}"


@safe_mode.command("status")
@tenant_option()
@pass_app
def status(app: AppContext, tenant: str) -> None:
    """Whether safe mode is on, since when, by whom and why."""
    _say(app, safemode.status(app.engine(), tenant))


@safe_mode.command("on")
@click.option("--reason", required=True, help="why (recorded with the activation)")
@click.option("--by", "actor", type=PERSON, help="who (default: the OS user)")
@tenant_option()
@pass_app
def on(app: AppContext, reason: str, actor: str | None, tenant: str) -> None:
    """Activate safe mode (refused if it is on already)."""
    _say(app, safemode.activate(app.engine(), tenant, actor=actor or os_user(), reason=reason))


@safe_mode.command("off")
@click.option("--reason", required=True, help="why (recorded with the deactivation)")
@click.option("--by", "actor", type=PERSON, help="who (default: the OS user)")
@tenant_option()
@pass_app
def off(app: AppContext, reason: str, actor: str | None, tenant: str) -> None:
    """Deactivate safe mode (refused if it is off)."""
    _say(app, safemode.deactivate(app.engine(), tenant, actor=actor or os_user(), reason=reason))


@safe_mode.command("history")
@tenant_option()
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1, 10_000), help="at most this many periods"
)
@pass_app
def history(app: AppContext, tenant: str, limit: int) -> None:
    """Every activation and deactivation, oldest first."""
    rows = [_period(p) for p in safemode.history(app.engine(), tenant, limit)]
    columns = ["activation", "activated_at", "activated_by", "reason", "deactivated_at", "deactivated_by"]
    render.records(app.json_output, "safe mode periods", rows, columns)


def _say(app: AppContext, p: SafeModePeriod | None) -> None:
    if app.json_output:
        render.emit_json(_period(p))
    else:
        render.out.print(_line(p))
