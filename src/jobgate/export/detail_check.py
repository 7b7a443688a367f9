"""A bundle's ``detail`` (the run as the API shows it) held against the sealed record beside it.

A run's file in an evidence bundle carries the rows its seal covers (``row``, ``transitions``,
``dead_letters``) and, for a reader, the run as the API shows it (``detail``). Only the first
are evidence; a reader looks at the second. So every value of ``detail`` that comes from a
sealed value must say what that value says: the run's columns, each transition, the open dead
letter. A key the sealed rows do not hold (progress, the attempts' summary, whether an artifact
exists) is not evidence and is not compared; the docs' table says so. The attempts are: each
is derived from the sealed transitions (``core.history``), so each is compared with what the
transitions make of it; and an open sealed dead letter must be shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobgate.core.encoding import from_us, to_us
from jobgate.core.history import attempts_from_transitions
from jobgate.core.lineage import retry_source
from jobgate.core.models import Transition
from jobgate.core.states import RunStatus
from jobgate.scheduling.plan import parse_slot
from jobgate.views.schemas import AttemptOut


def _same(sealed: Any, shown: Any) -> bool:
    """Whether the API's rendering ``shown`` says what the stored value ``sealed`` says: times
    are microseconds stored, ISO 8601 shown; documents are JSON text stored, objects shown."""
    if sealed == shown or (sealed is None and shown in ({}, [])):  # no document is shown as an empty one
        return True
    if isinstance(shown, str) and isinstance(sealed, int) and not isinstance(sealed, bool):
        try:
            return to_us(datetime.fromisoformat(shown.replace("Z", "+00:00"))) == sealed
        except (ValueError, TypeError, OverflowError):
            return False
    if isinstance(sealed, str) and isinstance(shown, dict | list):
        try:
            return bool(json.loads(sealed) == shown)
        except ValueError:
            return False
    if isinstance(sealed, int) and isinstance(shown, bool):  # SQLite stores a flag as 0 or 1
        return bool(sealed) == shown
    return False


def _first_difference(sealed: Mapping[str, Any], shown: Mapping[str, Any]) -> str | None:
    for key, value in shown.items():
        if key in sealed and not _same(sealed[key], value):
            return key
    return None


def _document(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _run_as_shown(row: Mapping[str, Any]) -> dict[str, Any]:
    """The sealed row as the API renders the values it does not show as stored (``RunOut.of``):
    the artifact by its API path, a hold only while the run is held."""
    held = row.get("status") == "HELD"
    slot = parse_slot(row.get("slot")) if isinstance(row.get("slot"), str) else None
    return {
        **row,
        # derived from sealed values: the slot names the schedule and its instant, the sealed
        # trigger the run it retries (the ``retry_of`` column is checked against it)
        "schedule_id": None if slot is None else slot[0],
        "slot_at": None if slot is None else to_us(slot[1]),
        "retry_of": retry_source(_document(row.get("trigger"))),
        "result_ref": None if row.get("artifact_path") is None else f"/api/v1/runs/{row['job_run_id']}/artifact",
        "has_artifact": row.get("artifact_path") is not None,
        "hold_reason": row.get("hold_reason") if held else None,
        "held_at": row.get("held_at") if held else None,
    }


def detail_problems(name: str, doc: Mapping[str, Any]) -> list[str]:
    """What ``doc["detail"]`` says that its sealed rows do not (empty when it agrees)."""
    detail = doc.get("detail")
    if detail is None:
        return []
    if not isinstance(detail, dict):
        return [f"{name}: detail is not an object"]
    problems: list[str] = []
    run = detail.get("run")
    if not isinstance(run, dict):
        problems.append(f"{name}: detail.run is not an object")
    else:
        key = _first_difference(_run_as_shown(doc["row"]), run)
        if key is not None:
            problems.append(f"{name}: detail.run.{key} differs from the sealed row")
    shown: Sequence[Any] = detail.get("transitions") or []
    sealed: Sequence[Mapping[str, Any]] = doc["transitions"]
    if len(shown) != len(sealed):
        problems.append(f"{name}: detail lists {len(shown)} transitions, the sealed record {len(sealed)}")
    else:
        for i, (t, s) in enumerate(zip(shown, sealed, strict=True), start=1):
            key = _first_difference(s, t) if isinstance(t, dict) else "transition"
            if key is None and t.get("sequence") != i:  # numbered by its place, as the API numbers it
                key = "sequence"
            if key is not None:
                problems.append(f"{name}: detail.transitions[{i}].{key} differs from the sealed transition {i}")
                break
    problems += _attempt_problems(name, detail.get("attempts"), doc["row"].get("job_run_id"), sealed)
    letter = detail.get("dead_letter")
    if letter is None and any(d.get("resolved_at") is None for d in doc["dead_letters"]):
        problems.append(f"{name}: detail shows no dead letter, but the sealed record holds an open one")
    if isinstance(letter, dict):
        found = next((d for d in doc["dead_letters"] if d.get("dead_letter_id") == letter.get("dead_letter_id")), None)
        if found is None:
            problems.append(f"{name}: detail.dead_letter is not among the sealed dead letters")
        elif (key := _first_difference(found, letter) or _letter_of_run(doc["row"], letter)) is not None:
            problems.append(f"{name}: detail.dead_letter.{key} differs from the sealed dead letter")
    elif letter is not None:
        problems.append(f"{name}: detail.dead_letter is not an object")
    return problems


def _letter_of_run(row: Mapping[str, Any], letter: Mapping[str, Any]) -> str | None:
    """The shown letter's values its sealed row does not hold, which are its run's: the run and
    its job class (found by a review: a re-signed bundle could show any)."""
    for key in ("job_run_id", "job_class"):
        if key in letter and letter[key] != row.get(key):
            return key
    return None


def _attempt_problems(name: str, shown: Any, job_run_id: Any, transitions: Sequence[Mapping[str, Any]]) -> list[str]:
    """``detail.attempts`` against the attempts the sealed transitions make (the API derives
    them so): an attempt left out, added, or any of its values changed."""
    try:
        derived = attempts_from_transitions(_transition(str(job_run_id), t) for t in transitions)
    except (KeyError, ValueError, TypeError, OverflowError):
        return []  # the transitions themselves are named by the seal's check
    expected = [AttemptOut.of(a).model_dump(mode="json") for a in derived]
    listed = shown if isinstance(shown, list) else None
    if listed is None or len(listed) != len(expected):
        count = "none" if listed is None else len(listed)
        return [f"{name}: detail lists {count} attempts, the sealed transitions make {len(expected)}"]
    for i, (attempt, want) in enumerate(zip(listed, expected, strict=True), start=1):
        if not isinstance(attempt, dict):
            return [f"{name}: detail.attempts[{i}] is not an object"]
        for key, value in want.items():
            if not _same_shown(value, attempt.get(key)):
                return [f"{name}: detail.attempts[{i}].{key} differs from what the sealed transitions say"]
    return []


def _same_shown(expected: Any, shown: Any) -> bool:
    """Two renderings of one value (times may differ in how their UTC offset is written)."""
    if expected == shown:
        return True
    if isinstance(expected, str) and isinstance(shown, str):
        try:
            return datetime.fromisoformat(expected.replace("Z", "+00:00")) == datetime.fromisoformat(
                shown.replace("Z", "+00:00")
            )
        except ValueError:
            return False
    return False


def _transition(job_run_id: str, row: Mapping[str, Any]) -> Transition:
    """A sealed transition row of a bundle as the API reads it (the store's codec, offline)."""
    detail = row.get("detail")
    document = json.loads(detail) if isinstance(detail, str) else detail
    return Transition(
        job_run_id=job_run_id,
        from_status=None if row["from_status"] is None else RunStatus(row["from_status"]),
        to_status=RunStatus(row["to_status"]),
        attempt=int(row["attempt"]),
        reason=str(row["reason"]),
        actor=str(row["actor"]),
        at=from_us(int(row["at"])),
        detail=document if isinstance(document, dict) else {},
    )
