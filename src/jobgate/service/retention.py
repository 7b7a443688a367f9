"""Retention (seed 000 §57): finished runs older than ``retention.finished_runs_days`` are
deleted — with their transitions, resolved dead letters and delivered events — by a
MAINTENANCE_JOB, and only what policy allows:

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
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from jobgate.core.audit import AuditEvent
from jobgate.service.engine import Engine

if TYPE_CHECKING:
    pass

BATCH = 1000
ACTOR = "retention"


@dataclass(frozen=True)
class Retired:
    tenant_id: str
    cutoff: datetime | None
    deleted: int


def cutoff_for(engine: Engine, tenant_id: str, now: datetime) -> datetime | None:
    """Runs that ended before this may go: the retention period, bounded by the last anchor's
    window and by the earliest entry not yet under an anchor (one stamped before the window's
    end may have committed after the anchor was taken)."""
    keep = engine.config.finished_runs_retention
    if keep is None:
        return None
    with engine.store.read() as tx:
        anchored = tx.anchors.last(tenant_id, "batch")
        has_log = tx.audit_head(tenant_id)[0] > 0
        pending = None if anchored is None else tx.anchors.first_after(tenant_id, anchored.last_seq)
    if has_log and anchored is None:
        return None  # its audit entries are not anchored yet: nothing may go
    bounds = [now - keep]
    if anchored is not None:
        bounds.append(anchored.window_end)
    if pending is not None:
        bounds.append(pending.event.at)
    return min(bounds)


def retire(engine: Engine, tenant_id: str, *, now: datetime | None = None, dry_run: bool = False) -> Retired:
    now = now or engine.clock.now()
    cutoff = cutoff_for(engine, tenant_id, now)
    if cutoff is None:
        return Retired(tenant_id, None, 0)
    if dry_run:  # the deletion's own predicate, counted: the two agree
        with engine.store.read() as tx:
            return Retired(tenant_id, cutoff, tx.runs_retirable_count(tenant_id, cutoff))
    deleted = 0
    while True:
        with engine.store.write() as tx:
            ids = tx.runs_retire(tenant_id, cutoff, BATCH)
            if ids:
                tx.audit_append(
                    [
                        AuditEvent(
                            tenant_id, ACTOR, "retention.deleted", "runs", f"{len(ids)} runs", now,
                            reason="retention.finished_runs_days",
                            payload={"ended_before": cutoff.isoformat(), "runs": ids},
                        )
                    ]
                )  # fmt: skip
        deleted += len(ids)
        _remove_folders(engine, ids)
        if len(ids) < BATCH:
            return Retired(tenant_id, cutoff, deleted)


def _remove_folders(engine: Engine, job_run_ids: list[str]) -> None:
    """The deleted runs' work folders and logs (``data_dir/runs/<id>``), after their rows are gone:
    only a folder that is a direct child named exactly by the id, never through a link."""
    root = (Path(engine.config.data_dir) / "runs").resolve()
    for job_run_id in job_run_ids:
        folder = root / job_run_id
        if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != root:
            continue
        shutil.rmtree(folder, ignore_errors=True)
