"""Content approval (seed 004): an admin blesses one definition's exact content, by digest.

``approve`` always hashes what jobgate holds — the stored current version, re-read and
re-digested — so no digest can be submitted by hand, and an edited definition (a new version,
a new digest) has no approval until someone approves it. Revoking stops future runs: new
triggers are refused and runs not yet started are cancelled in the same transaction; runs
already executing continue unless stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobgate.core.errors import ConflictError, NotFoundError, ValidationError
from jobgate.core.states import PENDING
from jobgate.service import audit, control
from jobgate.service.engine import Engine
from jobgate.store.base import RunFilter, StoredDefinition
from jobgate.store.sql.governance import Approval
from jobgate.store.sqlstore import StoreTx

MAX_CANCELLED_PER_REVOKE = 100_000


@dataclass(frozen=True)
class ApprovalStatus:
    """What the definition is now, and whether what an admin approved still matches it."""

    job_definition_id: str
    current_version: int
    current_digest: str
    approval: Approval | None  # of the current content, active or revoked
    history: list[Approval]

    @property
    def approved(self) -> bool:
        return self.approval is not None and self.approval.active


@dataclass(frozen=True)
class Revoked:
    revoked: list[Approval]
    cancelled_runs: list[str]


def _current(engine: Engine, tx: StoreTx, tenant_id: str, job_definition_id: str) -> StoredDefinition:
    stored = tx.definition_get(tenant_id, job_definition_id)
    if stored is None:
        raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
    engine.build_definition(stored)  # re-digests the stored content: a tampered row is refused here
    return stored


def approve(engine: Engine, tenant_id: str, job_definition_id: str, *, actor: str, note: str | None = None) -> Approval:
    now = engine.clock.now()
    with engine.store.write() as tx:
        stored = _current(engine, tx, tenant_id, job_definition_id)
        approval = Approval(tenant_id, job_definition_id, stored.digest, stored.version, actor, now, note, None, None)
        tx.approval_put(approval)
        audit.record(
            tx,
            audit.event(
                tenant_id,
                actor,
                "definition.approved",
                "definition",
                job_definition_id,
                now,
                reason=note,
                payload={"digest": stored.digest, "version": stored.version},
            ),
        )
    return approval


def status(engine: Engine, tenant_id: str, job_definition_id: str) -> ApprovalStatus:
    with engine.store.read(tenant_id=tenant_id) as tx:
        stored = _current(engine, tx, tenant_id, job_definition_id)
        history = tx.approvals_list(tenant_id, job_definition_id)
    mine = next((a for a in history if a.digest == stored.digest), None)
    return ApprovalStatus(job_definition_id, stored.version, stored.digest, mine, history)


def revoke(engine: Engine, tenant_id: str, job_definition_id: str, *, actor: str, reason: str | None = None) -> Revoked:
    """Revoke every active approval of the definition and cancel its runs not yet started."""
    now = engine.clock.now()
    with engine.store.write() as tx:
        _current(engine, tx, tenant_id, job_definition_id)
        active = [a for a in tx.approvals_list(tenant_id, job_definition_id) if a.active]
        if not active:
            raise ConflictError("the definition has no active approval to revoke", field="approval")
        for a in active:
            tx.approval_revoke(tenant_id, job_definition_id, a.digest, actor, now)
        digests = {a.digest for a in active}
        pending = tx.runs_list(
            RunFilter(
                tenant_id=tenant_id,
                statuses=tuple(PENDING),
                job_definition_id=job_definition_id,
                limit=MAX_CANCELLED_PER_REVOKE,
            )
        )
        changes = [
            control.cancel_change(run, actor=actor, reason="approval_revoked", now=now)
            for run in pending
            if run.definition_digest in digests
        ]
        cancelled = [c.job_run_id for c in tx.runs_apply(changes)] if changes else []
        audit.record(
            tx,
            audit.event(
                tenant_id,
                actor,
                "definition.approval_revoked",
                "definition",
                job_definition_id,
                now,
                reason=reason,
                payload={"digests": sorted(digests), "cancelled_runs": cancelled},
            ),
        )
    return Revoked(active, cancelled)


def record_load_refusal(engine: Engine, tenant_id: str, exc: ValidationError, *, actor: str) -> None:
    """A definition refused at load for its signature is a governance fact: it goes to the
    audit log (nothing else was stored)."""
    if exc.field != "signature":
        return
    audit.record_now(
        engine,
        audit.event(
            tenant_id,
            actor,
            "definition.refused",
            "definition",
            exc.source or "unknown",
            engine.clock.now(),
            reason="definition_not_signed",
            payload={"message": exc.message},
        ),
    )
