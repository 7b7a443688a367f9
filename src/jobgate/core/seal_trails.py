"""What may change between two seals of one record: the rules a record's seals are read by, in order.

Comparing a record with its latest seal alone shows only that the two agree. A database writer
who changes an old record and appends a new seal for it would pass that check, and the next
``records.sealed`` batch would chain the forged seal like any other. The earlier seals are what
cannot be rewritten: they are under batch roots, and those are under signed anchors. So each
seal of a record after its first must be one that jobgate itself could have written after the
one before it:

* a definition version, a configuration snapshot and a schedule change are never changed,
  except a definition version re-signed after a key rotation (its ``content`` differs in its
  ``signature`` alone);
* an approval, a token and a safe-mode period change only by being closed: the revocation (or
  deactivation) columns go from empty to set, once, and nothing else moves;
* a run request changes only while pending (a dry run's verdict, then the decision), and the
  decision's columns are set once;
* a schedule and a definition's lifecycle status are edited freely (each edit is audited);
* a workflow run keeps its identity, its state sequence only grows, and a completed, failed or
  cancelled workflow run is never sealed again with other values;
* a run's rules need its transitions and are applied where they are read
  (``store.sql.seals``): its history only grows from the sealed prefix, and it is sealed again
  only after a dead letter was resolved (same history) or after a requeue of a dead-lettered or
  escalated run, which may raise ``max_attempts`` and nothing else of its identity;
* a tombstone (``retired``, ``deleted``) closes a record for good, except a schedule, which may
  be added again under its id after it was deleted; only schedules are ever deleted, and only
  runs retired (by retention, which names every run it deletes in its audit entry).

Each rule takes the value lists two seals kept (``content``, checked against the seals' hashes
before use) and names the first column that could not have changed that way, or None.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from jobgate.core import seals

# Kinds whose rows jobgate deletes (a ``deleted`` tombstone is legitimate only for these), and
# whose id may be used again after that.
DELETABLE = frozenset({"schedule"})
RUN_REQUEUED_FROM = frozenset({"DEAD_LETTERED", "ESCALATED"})
RUN_RESEALED_IN_PLACE = frozenset({"DEAD_LETTERED"})  # a dead letter resolved without a requeue
WORKFLOW_FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
REQUEUED = "requeued"
RETENTION_DELETED = "retention.deleted"  # the audit entry that names the runs retention deleted
# Identity columns a requeue may change (it grants one more attempt).
REQUEUE_MAY_RAISE = frozenset({"max_attempts"})
LETTER_RESOLUTION = frozenset({"resolved_at", "resolution"})

_CLOSING = {
    "approval": frozenset({"revoked_at", "revoked_by"}),
    "token": frozenset({"revoked_at", "revoked_by"}),
    "safe_mode": frozenset({"deactivated_at", "deactivated_by", "deactivation_reason"}),
}
_REQUEST_WHILE_PENDING = frozenset({"tested_at", "tested_by", "verdict", "digest", "version"})
_REQUEST_DECISION = frozenset({"status", "decided_at", "decided_by", "decision_note", "job_run_id"})


def kept_values(content: str | None, part: str, sealed_hash: str | None) -> list[Any] | None:
    """The value list a seal kept for ``part``, if it kept one and it still hashes to the seal's
    ``sealed_hash`` (``content`` is covered by no hash of its own: a value list that does not
    give the seal's hash back is not evidence of anything)."""
    if not content or sealed_hash is None:
        return None
    try:
        kept = json.loads(content)
    except ValueError:
        return None
    values = kept.get(part) if isinstance(kept, dict) else None
    if not isinstance(values, list):
        return None
    return values if seals.value_hash(values) == sealed_hash else None


def _first_moved(names: Sequence[str], before: Sequence[Any], after: Sequence[Any], free: frozenset[str]) -> str | None:
    for i, name in enumerate(names):
        was = before[i] if i < len(before) else None
        now = after[i] if i < len(after) else None
        if was != now and name not in free:
            return name
    if len(before) != len(after):
        return names[-1] if names else "values"
    return None


def _set_once(names: Sequence[str], before: Sequence[Any], after: Sequence[Any], columns: frozenset[str]) -> str | None:
    """The first of ``columns`` that was set and then changed (going from empty to set is allowed)."""
    for i, name in enumerate(names):
        if name in columns and i < len(before) and before[i] is not None and (i >= len(after) or after[i] != before[i]):
            return name
    return None


def _without_signature(text: Any) -> Any:
    try:
        document = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return text
    if isinstance(document, dict):
        document.pop("signature", None)
        return document
    return text


def _definition(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
    moved = _first_moved(names, before, after, frozenset({"content"}))
    if moved is not None:
        return moved
    i = list(names).index("content")
    return None if _without_signature(before[i]) == _without_signature(after[i]) else "content"


def _closing(kind: str) -> Callable[[Sequence[str], Sequence[Any], Sequence[Any]], str | None]:
    closing = _CLOSING[kind]

    def rule(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
        return _first_moved(names, before, after, closing) or _set_once(names, before, after, closing)

    return rule


def _request(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
    status = list(names).index("status")
    if before[status] != "pending":
        return _first_moved(names, before, after, frozenset())
    moved = _first_moved(names, before, after, _REQUEST_WHILE_PENDING | _REQUEST_DECISION)
    return moved or _set_once(names, before, after, _REQUEST_DECISION - {"status"})


def _frozen(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
    return _first_moved(names, before, after, frozenset())


def _free(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
    return None


FREELY_EDITED = frozenset({"schedule", "definition_status"})
ROW_RULES: dict[str, Callable[[Sequence[str], Sequence[Any], Sequence[Any]], str | None]] = {
    "definition": _definition,
    "definition_status": _free,
    "snapshot": _frozen,
    "approval": _closing("approval"),
    "token": _closing("token"),
    "schedule": _free,
    "schedule_change": _frozen,
    "request": _request,
    "safe_mode": _closing("safe_mode"),
}
assert set(ROW_RULES) == set(seals.SPECS), "every kind of single-row record has a rule"


def row_change(kind: str, before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """The first column of a single-row record of ``kind`` that could not have gone from
    ``before`` to ``after`` (its ``SPECS`` columns' values, as two seals kept them), or None."""
    return ROW_RULES[kind](seals.SPECS[kind].columns, before, after)


def run_identity_change(before: Sequence[Any], after: Sequence[Any], *, requeued: bool) -> str | None:
    """The first identity column of a run that could not have changed between two of its seals
    (or a seal and its row): none may, except what a requeue raises, when one happened between."""
    free = REQUEUE_MAY_RAISE if requeued else frozenset()
    moved = _first_moved(seals.RUN_IDENTITY, before, after, free)
    if moved is not None:
        return moved
    for name in free:
        i = seals.RUN_IDENTITY.index(name)
        was, now = before[i], after[i]
        if was != now and not (isinstance(was, int) and isinstance(now, int) and now > was):
            return name
    return None


def letters_change(before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """Dead letters are never removed or rewritten: every letter ``before`` lists (value lists in
    ``LETTER_COLUMNS`` order) must be in ``after`` unchanged, except its resolution, which may be
    set once. Returns the first letter's id that was not kept so, or None."""
    now = {row[0]: row for row in after if isinstance(row, list) and row}
    for row in before:
        if not isinstance(row, list) or not row:
            continue
        found = now.get(row[0])
        if found is None:
            return str(row[0])
        if _first_moved(seals.LETTER_COLUMNS, row, found, LETTER_RESOLUTION) or _set_once(
            seals.LETTER_COLUMNS, row, found, LETTER_RESOLUTION
        ):
            return str(row[0])
    return None


def workflow_change(
    before: dict[str, list[Any]], after: dict[str, list[Any]], final_before: bool
) -> tuple[str, str | None] | None:
    """(part, column) of a workflow run that could not have changed between two of its seals
    (their kept value lists by part), or None."""
    moved = _first_moved(seals.WORKFLOW_IDENTITY, before["identity"], after["identity"], frozenset())
    if moved is not None:
        return "identity", moved
    history_before, history_after = before["history"], after["history"]
    if history_after[: len(history_before)] != history_before:
        return "history", None
    if final_before and history_after != history_before:
        return "history", None
    if final_before and after["outcome"] != before["outcome"]:
        return "outcome", _first_moved(
            (*seals.WORKFLOW_OUTCOME, "steps"), before["outcome"], after["outcome"], frozenset()
        )
    return None
