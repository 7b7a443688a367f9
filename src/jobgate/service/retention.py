"""Retention (seed 000 §57): finished runs older than ``retention.finished_runs_days`` are
deleted — with their transitions, resolved dead letters and delivered events — by a
MAINTENANCE_JOB; a job class may have a retention of its own (``retention.job_classes``:
replay records, safe-mode jobs ...), and a dead-lettered run stays until its letter was resolved
``retention.resolved_dead_letters_days`` ago. Only what policy allows goes:

* never a run that is not finished, has an event not yet delivered or an open dead letter;
* never anything not yet anchored: a tenant's runs are retired only up to the end of its
  latest anchored window, so every audit entry about them is already under an anchor;
* never an audit entry: the audit log and its anchors are the permanent record (a run's
  entries keep naming it after its row is gone);
* every deletion is itself audited (``retention.deleted``: how many, up to when);
* a deleted run's work folder and log go with it.

With no retention configured nothing is ever deleted.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from jobgate.config import RetentionSettings
from jobgate.core.audit import AuditEvent
from jobgate.core.encoding import to_us
from jobgate.core.seal_trails import (
    RETENTION_DELETED,
    RETIRED_RECORDS,
    RETIRED_TRIGGERS,
    retired_record,
    retired_trigger,
)
from jobgate.service.engine import Engine
from jobgate.store.base import RetiredRun, RetireScope

BATCH = 1000
ACTOR = "retention"


@dataclass(frozen=True)
class RuleRetired:
    """What one rule of ``retention`` deleted (or would): its runs that ended before ``cutoff``."""

    rule: str
    cutoff: datetime
    deleted: int


@dataclass(frozen=True)
class Retired:
    tenant_id: str
    cutoff: datetime | None  # the last rule's (``finished_runs_days`` when set)
    deleted: int  # every rule's
    rules: tuple[RuleRetired, ...] = ()


@dataclass(frozen=True)
class RetentionPass:
    """One rule of ``retention``: the runs ``scope`` names that ended before ``cutoff`` go."""

    rule: str  # the configuration key that asks for it
    cutoff: datetime
    scope: RetireScope


def passes(
    settings: RetentionSettings,
    now: datetime,
    bound: datetime | None,
    anchored_through: tuple[int, int] | None = None,
) -> list[RetentionPass]:
    """The passes the configuration asks for (seed 000 §57 by record type): one per job class
    with a retention of its own, then every other class under ``finished_runs_days``; each
    cutoff no later than ``bound`` (what is already under an anchor), and each run's every audit
    entry and seal under it (``anchored_through``: the last entry and seal it covers). Pure."""
    letters = None if settings.resolved_dead_letters is None else now - settings.resolved_dead_letters

    def cutoff(keep: timedelta) -> datetime:
        return now - keep if bound is None else min(now - keep, bound)

    out = [
        RetentionPass(
            f"retention.job_classes.{name}", cutoff(keep), RetireScope((name,), (), letters, anchored_through)
        )
        for name, keep in sorted(settings.job_classes.items())
    ]
    if settings.finished_runs is not None:
        others = RetireScope(None, tuple(sorted(settings.job_classes)), letters, anchored_through)
        out.append(RetentionPass("retention.finished_runs_days", cutoff(settings.finished_runs), others))
    return out


@dataclass(frozen=True)
class AnchoredBound:
    """What retention may take of a tenant: whether anything yet (``allowed``), runs ended before
    ``bound`` (the end of its last anchored window, or the earliest entry not yet under an
    anchor: one stamped before the window's end may have committed after the anchor was taken),
    and whose every audit entry and seal the anchor covers (``through``: its last entry, the last
    seal chained by then; None without an anchor)."""

    allowed: bool
    bound: datetime | None
    through: tuple[int, int] | None = None


def anchored_bound(engine: Engine, tenant_id: str) -> AnchoredBound:
    """A tenant with a log and no anchor: nothing may go."""
    with engine.store.read() as tx:
        anchored = tx.anchors.last(tenant_id, "batch")
        has_log = tx.audit_head(tenant_id)[0] > 0
        pending = None if anchored is None else tx.anchors.first_after(tenant_id, anchored.last_seq)
        through = None
        if anchored is not None:
            through = (anchored.last_seq, tx.seals_chained_through(tenant_id, anchored.last_seq))
    if has_log and anchored is None:
        return AnchoredBound(False, None)
    bounds: list[datetime] = []
    if anchored is not None:
        bounds.append(anchored.window_end)
    if pending is not None:
        bounds.append(pending.event.at)
    return AnchoredBound(True, min(bounds) if bounds else None, through)


def retire(engine: Engine, tenant_id: str, *, now: datetime | None = None, dry_run: bool = False) -> Retired:
    """Every pass of the configured retention for ``tenant_id``; ``cutoff`` in the answer is the
    last pass's (the ``finished_runs_days`` pass when that is set), ``deleted`` the total."""
    now = now or engine.clock.now()
    anchored = anchored_bound(engine, tenant_id)
    planned = passes(engine.config.retention, now, anchored.bound, anchored.through) if anchored.allowed else []
    if not planned:
        return Retired(tenant_id, None, 0)
    rules = tuple(RuleRetired(p.rule, p.cutoff, _run_pass(engine, tenant_id, p, now, dry_run)) for p in planned)
    return Retired(tenant_id, planned[-1].cutoff, sum(r.deleted for r in rules), rules)


def _record_digest(gone: RetiredRun) -> str:
    return retired_record(
        gone.job_definition_id,
        gone.status,
        to_us(gone.created_at),
        None if gone.ended_at is None else to_us(gone.ended_at),
        to_us(gone.retired_at),
    )


def _run_pass(engine: Engine, tenant_id: str, p: RetentionPass, now: datetime, dry_run: bool) -> int:
    if dry_run:  # the deletion's own predicate, counted: the two agree
        with engine.store.read() as tx:
            return tx.runs_retirable_count(tenant_id, p.cutoff, p.scope)
    deleted = 0
    while True:
        with engine.store.write() as tx:
            ids = tx.runs_retire(tenant_id, p.cutoff, BATCH, p.scope, now=now)
            if ids:
                remembered = {r.job_run_id: r for r in tx.runs_retired_of(tenant_id, ids)}
                triggers = [retired_trigger(remembered[i].idempotency_key, remembered[i].slot) for i in ids]
                records = [_record_digest(remembered[i]) for i in ids]
                tx.audit_append(
                    [
                        AuditEvent(
                            tenant_id, ACTOR, RETENTION_DELETED, "runs", f"{len(ids)} runs", now,
                            reason=p.rule,
                            payload={
                                "ended_before": p.cutoff.isoformat(), "runs": ids,
                                RETIRED_TRIGGERS: triggers, RETIRED_RECORDS: records,
                            },
                        )
                    ]
                )  # fmt: skip
        deleted += len(ids)
        _remove_folders(engine, ids)
        if len(ids) < BATCH:
            return deleted


def _remove_folders(engine: Engine, job_run_ids: list[str]) -> None:
    """The deleted runs' work folders and logs (``data_dir/runs/<id>``), after their rows are gone:
    only a folder that is a direct child named exactly by the id, never through a link."""
    root = (Path(engine.config.data_dir) / "runs").resolve()
    for job_run_id in job_run_ids:
        folder = root / job_run_id
        if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != root:
            continue
        shutil.rmtree(folder, ignore_errors=True)
