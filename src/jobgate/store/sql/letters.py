"""Dead-letter ids, unique per dead-lettering.

``core.settle.dead_letter_for`` derives a dead letter's id from its run and attempt
(``TGDLQ-<run>-<attempt>``). A requeue keeps the attempt counter, so a run requeued and
dead-lettered again before it starts another attempt (its dependency still down, its
escalation deadline long past, its queue timeout again) would be given an id it already has,
and the insert would fail on every try. The store therefore numbers the repeats: the ``n``-th
dead letter of the same run and attempt is ``TGDLQ-<run>-<attempt>.<n>``
(``core.settle.repeat_dead_letter_id``), and the ``job_dead_lettered`` event written with it
names the same id (``RunChange.with_dead_letter_id``: the rename is the core's, the store only
knows which ids are taken). The first dead letter of an attempt keeps its derived id, so every id
recorded before this rule existed is unchanged.

Only the transaction whose compare-and-set on the run matched writes its dead letter (it then
holds the run's row), so the read below cannot race another writer of the same run.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from jobgate.core.settle import repeat_dead_letter_id
from jobgate.store.tables import dead_letters

D = dead_letters.c
_CHUNK = 500


def letters_renumber(conn: Connection, derived: Mapping[str, str]) -> dict[str, str]:
    """For dead letters about to be written (run id -> derived id): the id each repeat must be
    recorded under instead, for those whose derived id is taken. One primary-key read per
    batch; a run's other dead letters are read only when its derived id is taken."""
    ids = list(derived.values())
    taken: set[str] = set()
    for start in range(0, len(ids), _CHUNK):
        q = select(D.dead_letter_id).where(D.dead_letter_id.in_(ids[start : start + _CHUNK]))
        taken.update(r[0] for r in conn.execute(q))
    out: dict[str, str] = {}
    for run_id, first in derived.items():
        if first not in taken:
            continue
        existing = {r[0] for r in conn.execute(select(D.dead_letter_id).where(D.job_run_id == run_id))}
        n = 2
        while repeat_dead_letter_id(first, n) in existing:
            n += 1
        out[run_id] = repeat_dead_letter_id(first, n)
    return out
