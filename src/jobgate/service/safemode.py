"""Safe mode (seed 000 §39-40): an emergency state of a tenant, switched on and off by a person
with a reason, and never twice in a row. While it is on, the actions configured under
``safe_mode`` (recorded with the period, so later edits of the file do not change a running
period) bind every trigger: suspended job classes are refused with ``safe_mode_active``,
direct manual runs must go through the request workflow when ``manual_review`` is set, and
new runs bind a configuration with the tightened ``profile_overrides``. The tenant's
safe-mode schedules fire (at the activation, then on their cron or interval), and the
configured SAFE_MODE_JOB runs at each switch. Each switch is a period row, an outbox event
and an audit entry, written in one transaction; deactivation restores the ordinary state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobgate.core import events
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ConflictError, JobgateError, ValidationError
from jobgate.core.models import Scope, TriggerType
from jobgate.core.params import check_text
from jobgate.core.records import SafeModePeriod
from jobgate.core.settle import ACTIVATES_SAFE_MODE
from jobgate.core.transitions import RunChange
from jobgate.evidence import anchors, sinks
from jobgate.evidence.keys import signer_for
from jobgate.governance.code import host_job
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

if TYPE_CHECKING:
    from jobgate.service.host import Host

log = logging.getLogger("jobgate.safemode")

MAX_REASON = 2000


def status(engine: Engine, tenant_id: str) -> SafeModePeriod | None:
    """The latest period (``active`` while safe mode is on); None if it was never activated."""
    with engine.store.read() as tx:
        return tx.safe_mode_current(tenant_id)


def history(engine: Engine, tenant_id: str, limit: int = 100) -> list[SafeModePeriod]:
    with engine.store.read() as tx:
        return tx.safe_mode_periods(tenant_id, limit=limit)


def activate(
    engine: Engine, tenant_id: str, *, actor: str, reason: str, now: datetime | None = None, patient: bool = False
) -> SafeModePeriod:
    """``patient``: wait for the admission gates as long as a worker's transaction holds them
    (an automatic switch, which nobody is there to repeat); a person's is refused after
    ``claims.GATES_PATIENCE_S`` and may try again."""
    return switch(engine, tenant_id, True, actor=actor, reason=reason, now=now, patient=patient)[0]


def deactivate(
    engine: Engine, tenant_id: str, *, actor: str, reason: str, now: datetime | None = None
) -> SafeModePeriod:
    return switch(engine, tenant_id, False, actor=actor, reason=reason, now=now)[0]


def switch(
    engine: Engine,
    tenant_id: str,
    on: bool,
    *,
    actor: str,
    reason: str,
    now: datetime | None = None,
    patient: bool = False,
) -> tuple[SafeModePeriod, str | None]:
    """Switch safe mode on (the configured actions, recorded with the period, bind every
    trigger from this commit on) or off (they stop binding); then the configured
    SAFE_MODE_JOB runs for the switch. Returns the period and that run's id."""
    period = _switch(engine, tenant_id, on, actor=actor, reason=reason, now=now, patient=patient)
    return period, run_safe_mode_job(engine, period, "activate" if on else "deactivate", actor=actor)


def run_safe_mode_job(engine: Engine, period: SafeModePeriod, phase: str, *, actor: str) -> str | None:
    """Submit the configured SAFE_MODE_JOB for this switch; its run id, or None when none is
    configured or a gate refused it (the refusal is in the audit log; the switch stands, since
    safety must not wait on a job)."""
    job = engine.config.safe_mode.job
    if job is None:
        return None
    request = SubmitRequest(
        job,
        trigger_type=TriggerType.SAFE_MODE,
        params={"phase": phase, "activation": str(period.activation)},
        scope=Scope(tenant_id=period.tenant_id),
        requested_by=actor,
        reason=f"safe mode {phase} (activation {period.activation})",
        trigger_id=f"safe-mode-{period.tenant_id}-{period.activation}-{phase}",
    )
    try:
        return engine.submit(request, actor=actor).run.job_run_id
    except JobgateError as exc:
        log.error("safe mode %s: the SAFE_MODE_JOB %s was refused: %s", phase, job, exc)
        return None


def after_settled(engine: Engine, changes: Iterable[RunChange], *, actor: str) -> None:
    """Switch safe mode on for each tenant a committed change asks it of: a run whose retry
    policy is ``safe_mode_on_failure`` failed its last attempt (seed 000 §20). Called by whoever
    applied the changes, after their commit; safe mode already on is left as it is. Best effort
    by design: the dead letter is recorded either way, and a failure to switch is logged as an
    error for the operator (who may switch it by hand)."""
    for change in changes:
        if not change.transition.detail.get(ACTIVATES_SAFE_MODE):
            continue
        reason = f"run {change.job_run_id} failed its last attempt (retry policy strategy safe_mode_on_failure)"
        try:
            activate(engine, change.tenant_id, actor=actor, reason=reason, patient=True)
        except ConflictError:
            continue  # already on: its period stands
        except Exception:
            log.exception("safe mode not switched on for tenant %s after %s", change.tenant_id, change.job_run_id)


def _switch(
    engine: Engine, tenant_id: str, on: bool, *, actor: str, reason: str, now: datetime | None, patient: bool = False
) -> SafeModePeriod:
    reason = reason.strip()
    if not reason:
        raise ValidationError("say why safe mode is switched", field="reason")
    if len(reason) > MAX_REASON:
        raise ValidationError(f"at most {MAX_REASON} characters", field="reason")
    check_text(reason, "reason", lines=True)
    if not actor.strip():
        raise ValidationError("name who switches safe mode", field="actor")
    now = now or engine.clock.now()
    with engine.store.write() as tx:
        if on:
            tx.gates_closing(patient=patient)  # no claim decides on the state before this switch meanwhile
            period = tx.safe_mode_activate(tenant_id, actor, reason, now, engine.config.safe_mode.actions())
        else:
            period = tx.safe_mode_deactivate(tenant_id, actor, reason, now)
        if period is None:
            latest = tx.safe_mode_current(tenant_id)
            raise ConflictError(_already(on, latest), field="safe_mode")
        event = events.safe_mode_changed(
            tenant_id=tenant_id, activation=period.activation, active=on, actor=actor, reason=reason, now=now
        )
        tx.outbox_append([(None, tenant_id, event)], now)
        recorded = audit.record(
            tx,
            audit.event(
                tenant_id,
                actor,
                "safe_mode.activated" if on else "safe_mode.deactivated",
                "safe_mode",
                tenant_id,
                now,
                reason=reason,
                payload={"activation": period.activation, "actions": period.actions},
            ),
        )
        # A critical artifact: anchored directly, not at the end of its window (seed §48).
        anchors.anchor_direct(
            tx, recorded[0], now=now, sink=sinks.sink_for(engine.config), signer=signer_for(engine.config)
        )
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


@host_job
def activate_automatically(ctx: Any, host: Host) -> dict[str, Any]:
    """Handler for a definition run by a policy or alert trigger (``handler:
    jobgate.service.safemode:activate_automatically``): switches the run's tenant into safe mode
    — only where ``safe_mode.allow_automatic`` says policy allows it, and only from a policy or
    alert trigger. Otherwise it refuses (non-retryable) and safe mode stays as it is; the
    refusal is in the run's record and the audit log."""
    from jobgate.core.errors import NonRetryableError

    engine = host.engine
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")
    with engine.store.read() as tx:
        run = tx.run_get(ctx.job_run_id)
    trigger = "unknown" if run is None else run.trigger_type.value
    reason = str(ctx.params.get("reason") or f"automatic: {trigger} trigger, run {ctx.job_run_id}")
    actor = f"automatic:{ctx.job_run_id}"
    refused = None
    if not engine.config.safe_mode.allow_automatic:
        refused = "policy does not allow automatic activation (safe_mode.allow_automatic)"
    elif trigger not in (TriggerType.POLICY.value, TriggerType.ALERT.value):
        refused = f"only a policy or alert trigger activates safe mode automatically, not {trigger}"
    if refused is not None:
        audit.record_now(
            engine,
            audit.event(tenant, actor, "safe_mode.refused", "safe_mode", tenant, engine.clock.now(), reason=refused),
        )
        raise NonRetryableError(refused, error_code="SAFE_MODE_AUTOMATIC_REFUSED")
    current = status(engine, tenant)
    if current is not None and current.active:
        return {"tenant_id": tenant, "activation": current.activation, "already_active": True}
    period, job_run = switch(engine, tenant, True, actor=actor, reason=reason, patient=True)
    return {"tenant_id": tenant, "activation": period.activation, "already_active": False, "safe_mode_job": job_run}
