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

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from jobgate.core import seals
from jobgate.core.states import ALLOWED, TERMINAL

# Kinds whose rows jobgate deletes (a ``deleted`` tombstone is legitimate only for these), and
# whose id may be used again after that.
DELETABLE = frozenset({"schedule"})
# The ends a run leaves again (the state machine's only way out of one: a requeue).
RUN_REQUEUED_FROM = frozenset(s.value for s in TERMINAL if ALLOWED[s])
RUN_ENDED = frozenset(s.value for s in TERMINAL)  # a run in one of these must be sealed
# ... and a workflow run (never HELD: that is its steps' runs', waiting on a gate)
WORKFLOW_ENDED = frozenset(s.value for s in TERMINAL if s.value != "HELD")
RUN_RESEALED_IN_PLACE = frozenset({"DEAD_LETTERED"})  # a dead letter resolved without a requeue
WORKFLOW_FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
REQUEUED = "requeued"
RUN_REQUEUED_ACTION = "run.requeued"  # the audit entry every requeue writes with its transition
RETENTION_DELETED = "retention.deleted"  # the audit entry that names the runs retention deleted
RETIRED_TRIGGERS = "trigger_digests"  # its payload's list, beside "runs": what made each run its trigger's
RETIRED_RECORDS = "record_digests"  # ... and what is shown of each: its definition, end and times
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


def retired_trigger(idempotency_key: str, slot: str | None) -> str:
    """What a retired run's ``retired_runs`` row must keep, as its retention audit entry holds
    it: a digest of its key and slot (the entry, hash-chained and anchored, names a thousand
    runs in a few kilobytes). Deleting or rewriting the row would let its trigger run again."""
    return _short_digest([idempotency_key, slot])


def retired_record(
    job_definition_id: str, status: str, created_at_us: int, ended_at_us: int | None, retired_at_us: int
) -> str:
    """What else a retired run's ``retired_runs`` row says, as its retention audit entry holds it
    (a digest): ``runs show`` and an evidence bundle present the run's end and times from that
    row alone, so they are held to the entry as its key and slot are."""
    return _short_digest([job_definition_id, status, created_at_us, ended_at_us, retired_at_us])


def _short_digest(values: list[Any]) -> str:
    """96 bits of the SHA-256 of ``values``' compact JSON: what a retention entry keeps a run by."""
    text = json.dumps(values, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


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


def _escalated_once(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """An SLA reminder or breach changes once, if ever: its escalation done (false to true)."""
    moved = _first_moved(names, before, after, frozenset({"escalated"}))
    if moved is not None:
        return moved
    i = list(names).index("escalated")
    return "escalated" if before[i] and not after[i] else None


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
    "sla_breach": _escalated_once,
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


# -- a record's seals, in order -------------------------------------------------------------------
# The same checks for the database (``store.sql.seals``) and for an evidence bundle read offline
# (``export.scope``): each takes the record's seals in id order (mappings with ``id``, ``event``,
# ``extent`` and the part hashes) and a function giving the values a seal kept (its ``content``).

Seal = Mapping[str, Any]
ContentOf = Callable[[Seal], "str | None"]
PARTS = ("identity", "outcome", "history")


@dataclass(frozen=True)
class TrailProblem:
    """Why a seal is not one jobgate writes after the one before it."""

    seal_id: int
    part: str | None
    column: str | None
    detail: str | None
    problem: str = "resealed"  # or ``changed`` / ``history_cut``: the record no longer matches this seal


def shown_pair(was: Any, now: Any, width: int = 80) -> tuple[str, str]:
    """Two values as a person compares them: whole when short, else each cut to the same window
    around the first character that differs (cut at the same prefix, two long values that
    differ late read as the same)."""
    a, b = (json.dumps(v, ensure_ascii=False, default=str) for v in (was, now))
    if len(a) <= width and len(b) <= width:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, first - width // 4)

    def cut(text: str) -> str:
        part = text[start : start + width - 6]
        return ("..." if start else "") + part + ("..." if start + width - 6 < len(text) else "")

    return cut(a), cut(b)


def row_trail(kind: str, sealed: Sequence[Seal], content_of: ContentOf) -> TrailProblem | None:
    """Consecutive ``sealed`` seals of one single-row record by its kind's rule."""
    if kind in FREELY_EDITED:
        return None
    columns = seals.SPECS[kind].columns
    for before, after in pairwise(sealed):
        if before["identity"] == after["identity"]:
            continue
        was = kept_values(content_of(before), "identity", before["identity"])
        now = kept_values(content_of(after), "identity", after["identity"])
        if was is None or now is None:
            return TrailProblem(after["id"], "content", None, f"after seal #{before['id']}")
        column = row_change(kind, was, now)
        if column is not None:
            i = columns.index(column)
            kept, then = shown_pair(was[i], now[i])
            detail = f"seal #{before['id']} kept {kept}, seal #{after['id']} {then}"
            return TrailProblem(after["id"], "content", column, detail)
    return None


def workflow_trail(sealed: Sequence[Seal], content_of: ContentOf) -> TrailProblem | None:
    """Consecutive ``sealed`` seals of one workflow run by ``workflow_change``."""
    for before, after in pairwise(sealed):
        if all(before[p] == after[p] for p in PARTS):
            continue
        was = {p: kept_values(content_of(before), p, before[p]) for p in PARTS}
        now = {p: kept_values(content_of(after), p, after[p]) for p in PARTS}
        since = f"after seal #{before['id']}"
        if any(v is None for v in (*was.values(), *now.values())):
            return TrailProblem(after["id"], None, None, since)
        kept_was = {p: v for p, v in was.items() if v is not None}
        kept_now = {p: v for p, v in now.items() if v is not None}
        final = bool(kept_was["outcome"]) and kept_was["outcome"][0] in WORKFLOW_FINAL
        problem = workflow_change(kept_was, kept_now, final)
        if problem is not None:
            return TrailProblem(after["id"], problem[0], problem[1], since)
    return None


def _links(transitions: Sequence[Sequence[Any]], extents: set[int]) -> dict[int, tuple[str, str]]:
    """The history after each of ``extents`` transitions, by both rules a run seal has used: the
    chain (``core.seals.history_step``) and, before migration 0021, one hash of the whole list."""
    out: dict[int, tuple[str, str]] = {}
    link = seals.HISTORY_GENESIS
    if 0 in extents:
        out[0] = (link, seals.value_hash([]))
    for i, t in enumerate(transitions[: max(extents, default=0)], start=1):
        link = seals.history_step(link, t)
        if i in extents:
            out[i] = (link, seals.value_hash(list(transitions[:i])))
    return out


_TO_STATUS, _REASON = seals.TRANSITION_COLUMNS.index("to_status"), seals.TRANSITION_COLUMNS.index("reason")


def run_trail(
    sealed: Sequence[Seal], transitions: Sequence[Sequence[Any]], content_of: ContentOf
) -> TrailProblem | None:
    """A run's seals before its latest (``transitions``: its value lists in ``TRANSITION_COLUMNS``
    order): each one's history is still the prefix of today's transitions, and each next seal is
    one jobgate writes after it — in place once a dead letter is resolved (or the same values
    sealed again), or after a requeue of a dead-lettered or escalated run — with the identity
    kept (but a raised ``max_attempts``) and no dead letter lost."""
    if len(sealed) < 2:
        return None
    extents = {int(s["extent"] or 0) for s in sealed[:-1]}
    for s in sealed[:-1]:
        if int(s["extent"] or 0) > len(transitions):
            return TrailProblem(s["id"], "history", None, None, "history_cut")
    links = _links(transitions, extents)
    for s in sealed[:-1]:
        if s["history"] not in links[int(s["extent"] or 0)]:
            return TrailProblem(s["id"], "history", None, None, "changed")
    for before, after in pairwise(sealed):
        problem = _run_reseal(before, after, transitions, content_of)
        if problem is not None:
            return problem
    return None


def _run_reseal(
    before: Seal, after: Seal, transitions: Sequence[Sequence[Any]], content_of: ContentOf
) -> TrailProblem | None:
    since = f"after seal #{before['id']}"
    e_before, e_after = int(before["extent"] or 0), int(after["extent"] or 0)
    status = transitions[e_before - 1][_TO_STATUS] if 0 < e_before <= len(transitions) else None
    if e_after < e_before:
        return TrailProblem(after["id"], "history", None, f"covers fewer transitions than seal #{before['id']}")
    if e_after == e_before:  # the same transitions (each seal's history checked against them)
        same = after["identity"] == before["identity"] and after["outcome"] == before["outcome"]
        if not same and status not in RUN_RESEALED_IN_PLACE:
            return TrailProblem(after["id"], "outcome", None, f"sealed again {since} with no new transition")
    elif status not in RUN_REQUEUED_FROM or transitions[e_before][_REASON] != REQUEUED:
        detail = f"moved on {since} without a requeue of a dead-lettered or escalated run"
        return TrailProblem(after["id"], "history", None, detail)
    requeued = e_after > e_before
    if after["identity"] != before["identity"]:
        was = kept_values(content_of(before), "identity", before["identity"])
        now = kept_values(content_of(after), "identity", after["identity"])
        if was is None or now is None:
            return TrailProblem(after["id"], "identity", None, since)
        column = run_identity_change(was, now, requeued=requeued)
        if column is not None:
            return TrailProblem(after["id"], "identity", column, since)
    if after["outcome"] != before["outcome"]:
        was = kept_values(content_of(before), "outcome", before["outcome"])
        now = kept_values(content_of(after), "outcome", after["outcome"])
        if was is None or now is None:
            # Without both value lists nothing shows the change was one jobgate makes (a dead
            # letter resolved, a requeue's new ending) rather than a letter deleted and the run
            # rewritten as a success: fail closed, as for the identity (found by a review that
            # cleared the earlier seal's values, or sealed the forgery without them).
            return TrailProblem(after["id"], "outcome", None, f"{since}, whose kept values are gone")
        n = len(seals.RUN_OUTCOME)
        if not requeued and was[:n] != now[:n]:
            found = seals.difference(seals.RUN_OUTCOME, was[:n], now[:n])
            return TrailProblem(after["id"], "outcome", None if found is None else found[0], since)
        letter = letters_change(was[-1], now[-1])
        if letter is not None:
            return TrailProblem(after["id"], "outcome", "dead_letters", f"dead letter {letter} lost {since}")
    return None


def run_ended(status: Any, to_statuses: Iterable[Any]) -> bool:
    """Whether a run has ended, by its row's status or by any of its transitions' ``to_status``:
    an ended run has a seal, so one without is a record whose seal was removed, whoever reads
    it (the database's verifier or a bundle's)."""
    return status in RUN_ENDED or any(s in RUN_ENDED for s in to_statuses)


def moved_on_without_requeue(seal: Seal, transitions: Sequence[Sequence[Any]]) -> str | None:
    """Why a run's transitions beyond its latest seal are not ones jobgate writes, or None.
    Only a requeue of a dead-lettered or escalated run moves a sealed run on: the first
    transition after the seal must be that requeue."""
    extent = int(seal["extent"] or 0)
    status = transitions[extent - 1][_TO_STATUS] if 0 < extent <= len(transitions) else None
    if extent < len(transitions) and status in RUN_REQUEUED_FROM and transitions[extent][_REASON] == REQUEUED:
        return None
    return f"moved on after seal #{seal['id']} without a requeue of a dead-lettered or escalated run"


@dataclass(frozen=True)
class AuditedChange:
    """How a record's opening or closing is accounted for in the audit log: the action its one
    door writes in the change's own transaction, the row's columns naming who made the change,
    when, and when the record was opened, the entry's target (a row column), what else in the
    entry's payload names this row: (payload key, row column, the key holds a list of such
    values), and the ``status`` a row holds when the rule is its (a request approved or rejected)."""

    action: str
    by: str
    at: str
    opened: str
    target: str
    payload: tuple[str, str, bool] | None = None
    status: str | None = None
    # A closing dated before the deployment's audit log began (a database from before schema
    # 0010) has no entry to find. Never an opening: a record's own date is what a forger writes,
    # and neither the seal's place nor its tenant told a record from before the log from one
    # inserted later and dated back (found by two regression reviews).
    excused_before_log: bool = True

    def applies(self, row: Mapping[Any, Any]) -> bool:
        return row.get(self.at) is not None and (self.status is None or row.get("status") == self.status)


# Every opening and closing jobgate makes writes its audit entry with the row's change
# (``service.approvals``, ``service.tokens``, ``service.requests``, ``service.safemode``): without
# the check, a safe-mode period switched off (or a token, an approval revoked) by a database
# write and sealed again by the published rules passed as one of them; and a token, an approval
# or a request's decision inserted whole with a seal computed for it passed as one jobgate made,
# and was chained and anchored with the rest (both found by reviews). A forger must now write the
# audit entry too, into the hash-chained log, and cannot date it inside an anchored window.
AUDITED_CHANGES: dict[str, tuple[AuditedChange, ...]] = {
    "safe_mode": (
        AuditedChange(
            "safe_mode.activated", "activated_by", "activated_at", "activated_at", "tenant_id",
            ("activation", "activation", False),
            excused_before_log=False,
        ),
        AuditedChange(
            "safe_mode.deactivated", "deactivated_by", "deactivated_at", "activated_at", "tenant_id",
            ("activation", "activation", False),
        ),
    ),
    "approval": (
        AuditedChange(
            "definition.approved", "approved_by", "approved_at", "approved_at", "job_definition_id",
            ("approval_id", "approval_id", False),
            excused_before_log=False,
        ),
        AuditedChange(
            "definition.approval_revoked", "revoked_by", "revoked_at", "approved_at", "job_definition_id",
            ("digests", "digest", True),
        ),
    ),
    "token": (
        AuditedChange("token.created", "created_by", "created_at", "created_at", "token_id", excused_before_log=False),
        AuditedChange("token.revoked", "revoked_by", "revoked_at", "created_at", "token_id"),
    ),
    "request": (
        AuditedChange(
            "request.submitted", "requested_by", "created_at", "created_at", "request_id", excused_before_log=False
        ),
        AuditedChange("request.approved", "decided_by", "decided_at", "created_at", "request_id", status="approved"),
        AuditedChange("request.rejected", "decided_by", "decided_at", "created_at", "request_id", status="rejected"),
    ),
}  # fmt: skip


def unaudited(
    rule: AuditedChange,
    rows: Sequence[Mapping[Any, Any]],
    audited: Mapping[str, Sequence[tuple[str, int, Any]]],
    log_began: int | None,
) -> list[int]:
    """The positions in ``rows`` of the ones ``rule`` applies to that no audit entry accounts
    for. ``audited``: the rule's entries by target (actor, time in µs, payload); ``log_began``:
    the time of the deployment's first audit entry (None: it has none).

    Each entry accounts for one change (an approvals entry, for one row per digest it names):
    the same actor, at or after the row's time (an append may record it later, never earlier),
    naming the row where it names rows; the earliest such entry left is taken, changes in time
    order, so an older change's entry is not taken again for a forged later one (found by a
    review). A closing before its record was opened is none jobgate makes. A closing before the
    audit log began (a database from before migration 0010) has no entry to find; an opening
    always has one (``AuditedChange.excused_before_log``)."""
    left: dict[str, list[list[Any]]] = {}
    for target, found in audited.items():
        kept = left.setdefault(target, [])
        for actor, when, payload in found:
            named = payload.get(rule.payload[0]) if rule.payload is not None and isinstance(payload, Mapping) else None
            names = list(named) if isinstance(named, list) else [named]
            kept.append([actor, when, names])
    closed = sorted((i for i, r in enumerate(rows) if rule.applies(r)), key=lambda i: int(rows[i][rule.at]))
    bad: list[int] = []
    for i in closed:
        row = rows[i]
        at = int(row[rule.at])
        opened = row.get(rule.opened)
        if opened is not None and at < int(opened):
            bad.append(i)
            continue
        if rule.excused_before_log and (log_began is None or at < log_began):
            continue
        entries = left.get(str(row.get(rule.target)), [])
        value = None if rule.payload is None else row.get(rule.payload[1])
        match = next(
            (e for e in entries if e[0] == row.get(rule.by) and e[1] >= at and (rule.payload is None or value in e[2])),
            None,
        )
        if match is None:
            bad.append(i)
        elif rule.payload is None or len(match[2]) <= 1:
            entries.remove(match)
        else:
            match[2].remove(value)
    return bad


def unaudited_requeue(transitions: Sequence[Mapping[str, Any]], audited: Sequence[tuple[str, int]]) -> int | None:
    """The position (from 0) of the first requeue in a run's history that no ``run.requeued``
    audit entry accounts for, or None. ``audited``: each entry's actor and time (µs). Every
    requeue writes its entry with the transition, so a requeue is accounted for by an entry of
    the same actor at or after it (an append that waited for an anchor is recorded later, never
    earlier), each entry for one requeue. Without this a database writer could add a requeue and
    a happier ending to a dead-lettered run and seal it again: the trail allows what a requeue
    allows."""
    left = list(audited)
    for n, t in enumerate(transitions):
        if t["reason"] != REQUEUED:
            continue
        match = next((i for i, (actor, at) in enumerate(left) if actor == t["actor"] and at >= int(t["at"])), None)
        if match is None:
            return n
        del left[match]
    return None
