"""A closed dead letter is final: the rule the requeue, the retry and the retry's store share.

Someone who closes a letter (``control.close_dead_letter``) decided that nothing more is to run;
its run stays as it ended, neither requeued nor retried. The rule lives here, below the
submission pipeline, so the retry's write transaction can ask it again under the source run's
lock: a close committed after the retry was prepared is still seen.
"""

from __future__ import annotations

from jobgate.core.models import JobRun
from jobgate.core.records import AuditFilter
from jobgate.store.sqlstore import StoreTx

DEAD_LETTER_CLOSED = "run.dead_letter_closed"  # its audit entry: the letter closed, nothing more to run


def letter_closed(tx: StoreTx, run: JobRun) -> bool:
    """Whether someone closed the run's dead letter. Its audit entry says so."""
    closed = AuditFilter(
        tenant_id=run.tenant_id, target_type="run", target_id=run.job_run_id, action=DEAD_LETTER_CLOSED, limit=1
    )
    return bool(tx.audit_list(closed))
