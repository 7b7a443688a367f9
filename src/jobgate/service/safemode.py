"""Safe mode (seed 000 §39-40): an emergency state of a tenant, switched on and off by a person
with a reason, and never twice in a row. While it is on, the tenant's safe-mode schedules fire
(at the activation, then on their cron or interval); each switch is a period row and an event
in the outbox, written in one transaction.
"""

from __future__ import annotations

import logging
from datetime import datetime

from jobgate.core import events
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ConflictError, ValidationError
from jobgate.service.engine import Engine
from jobgate.store.sql.safemode import SafeModePeriod

log = logging.getLogger("jobgate.safemode")

MAX_REASON = 2000


def status(engine: Engine, tenant_id: str) -> SafeModePeriod | None:
    """The latest period (``active`` while safe mode is on); None if it was never activated."""
    with engine.store.read() as tx:
        return tx.safe_mode_current(tenant_id)


def history(engine: Engine, tenant_id: str, limit: int = 100) -> list[SafeModePeriod]:
    with engine.store.read() as tx:
        return tx.safe_mode_periods(tenant_id, limit=limit)


def activate(engine: Engine, tenant_id: str, *, actor: str, reason: str, now: datetime | None = None) -> SafeModePeriod:
    return _switch(engine, tenant_id, True, actor=actor, reason=reason, now=now)


def deactivate(
    engine: Engine, tenant_id: str, *, actor: str, reason: str, now: datetime | None = None
) -> SafeModePeriod:
    return _switch(engine, tenant_id, False, actor=actor, reason=reason, now=now)


def _switch(
    engine: Engine, tenant_id: str, on: bool, *, actor: str, reason: str, now: datetime | None
) -> SafeModePeriod:
    reason = reason.strip()
    if not reason:
        raise ValidationError("say why safe mode is switched", field="reason")
    if len(reason) > MAX_REASON:
        raise ValidationError(f"at most {MAX_REASON} characters", field="reason")
    if not actor.strip():
        raise ValidationError("name who switches safe mode", field="actor")
    now = now or engine.clock.now()
    with engine.store.write() as tx:
        if on:
            period = tx.safe_mode_activate(tenant_id, actor, reason, now)
        else:
            period = tx.safe_mode_deactivate(tenant_id, actor, reason, now)
        if period is None:
            latest = tx.safe_mode_current(tenant_id)
            raise ConflictError(_already(on, latest), field="safe_mode")
        event = events.safe_mode_changed(
            tenant_id=tenant_id, activation=period.activation, active=on, actor=actor, reason=reason, now=now
        )
        tx.outbox_append([(None, tenant_id, event)], now)
    log.warning(
        "safe mode %s for tenant %s by %s: %s",
        "ON" if on else "off",
        tenant_id,
        actor,
        reason,
        extra={"action": "safe_mode_activated" if on else "safe_mode_deactivated", "tenant_id": tenant_id},
    )
    return period


def _already(on: bool, latest: SafeModePeriod | None) -> str:
    if on and latest is not None:
        return f"safe mode is already on since {isoformat_utc(latest.activated_at)} (by {latest.activated_by})"
    if latest is None or latest.deactivated_at is None:
        return "safe mode is not on"
    return f"safe mode is not on (switched off at {isoformat_utc(latest.deactivated_at)} by {latest.deactivated_by})"
