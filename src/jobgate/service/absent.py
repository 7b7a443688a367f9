"""What is said of a run that is not here.

A run retention deleted is remembered (``retired_runs``: its key, slot, status and times), so
"no run" would be only half true: the refusal of a command naming it (show, retry, replay,
cancel, an evidence export) says it was retired, when, and as what — still a 404, and only to
a caller who could have seen it.
"""

from __future__ import annotations

from collections.abc import Callable

from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import NotFoundError
from jobgate.store.sqlstore import StoreTx


def no_run(
    tx: StoreTx,
    job_run_id: str,
    tenant_id: str | None,
    *,
    field: str = "job_run_id",
    may_see: Callable[[str], bool] | None = None,
) -> NotFoundError:
    """The refusal for ``job_run_id``, not found in ``tenant_id`` (None: any tenant). ``may_see``:
    whether the caller may see runs of a definition (a token limited to some); a retired run of
    another definition is refused as if it had never been."""
    gone = tx.runs_retired_of(tenant_id, [job_run_id])
    if gone and (may_see is None or may_see(gone[0].job_definition_id)):
        g = gone[0]
        return NotFoundError(
            f"no run {job_run_id!r}: it was retired by retention at {isoformat_utc(g.retired_at)}"
            f" ({g.status}, created {isoformat_utc(g.created_at)}); its seals and tombstone remain"
            " (jobgate audit verify --records, a period's evidence bundle)",
            field=field,
        )
    return NotFoundError(f"no run {job_run_id!r}", field=field)
