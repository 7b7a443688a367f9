"""Opened and closed records accounted for by their audit entries (``core.seal_trails.unaudited``)."""

from __future__ import annotations

from typing import Any
from typing import Any as _Any

from jobgate.core.seal_trails import AUDITED_CHANGES, unaudited


def unaudited_closings(kind: str, rows: list[dict[str, _Any]], audited: dict[str, _Any], log_began: int) -> list[int]:
    """The closing rule of ``kind`` (its second): what these tests were written against."""
    return unaudited(AUDITED_CHANGES[kind][1], rows, audited, log_began)


def _approval(digest: str, approved: int, revoked: int | None, by: str | None = "carol") -> dict[str, Any]:
    return {
        "job_definition_id": "job",
        "digest": digest,
        "approved_at": approved,
        "revoked_at": revoked,
        "revoked_by": by,
    }


def _entry(at: int, *digests: str, actor: str = "carol") -> tuple[str, int, Any]:
    return (actor, at, {"digests": list(digests)})


def test_each_entry_accounts_for_one_closing_not_a_later_forged_one() -> None:
    """Found by a review: an approval revoked by a database write at the time an earlier one
    was revoked reused that revocation's entry."""
    rows = [_approval("d1", 10, 20), _approval("d1", 30, 20)]
    assert unaudited_closings("approval", rows, {"job": [_entry(21, "d1")]}, log_began=1) == [1]


def test_one_revocation_entry_names_every_approval_it_closed() -> None:
    rows = [_approval("d1", 10, 20), _approval("d2", 11, 20), _approval("d3", 12, 20)]
    assert unaudited_closings("approval", rows, {"job": [_entry(20, "d1", "d2")]}, log_began=1) == [2]


def test_a_closing_needs_the_same_actor_at_or_after_it() -> None:
    rows = [_approval("d1", 10, 20)]
    assert unaudited_closings("approval", rows, {"job": [_entry(19, "d1")]}, log_began=1) == [0]
    assert unaudited_closings("approval", rows, {"job": [_entry(25, "d1", actor="mallory")]}, log_began=1) == [0]
    assert unaudited_closings("approval", rows, {"job": [_entry(25, "d1")]}, log_began=1) == []


def test_a_closing_before_its_record_was_opened_is_none_jobgate_makes() -> None:
    rows = [_approval("d1", 30, 20)]
    assert unaudited_closings("approval", rows, {"job": [_entry(25, "d1")]}, log_began=1) == [0]


def test_a_closing_before_the_audit_log_began_has_no_entry_to_find() -> None:
    """A database from before migration 0010: tokens and safe mode existed before the log."""
    token = {"token_id": "t1", "created_at": 5, "revoked_at": 8, "revoked_by": "root"}
    assert unaudited_closings("token", [token], {}, log_began=100) == []
    assert unaudited_closings("token", [token], {}, log_began=7) == [0]
    assert unaudited_closings("token", [{**token, "revoked_at": None}], {}, log_began=1) == []


def test_an_opening_needs_its_entry_naming_the_row() -> None:
    """Found by a review: an approval (a token, a request's decision) inserted whole with a seal
    computed for it passed every check; its one door writes an audit entry with it."""
    opening = AUDITED_CHANGES["approval"][0]
    row = {"approval_id": "a2", "job_definition_id": "job", "approved_by": "bob", "approved_at": 50}
    entry = ("bob", 50, {"approval_id": "a2"})
    assert unaudited(opening, [row], {"job": [entry]}, log_began=1) == []
    assert unaudited(opening, [row], {"job": [("bob", 50, {"approval_id": "a1"})]}, log_began=1) == [0]
    assert unaudited(opening, [row], {}, log_began=1) == [0]
    assert unaudited(opening, [row, {**row, "approval_id": "a3"}], {"job": [entry]}, log_began=1) == [1]


def test_a_decision_is_held_to_the_entry_of_its_own_outcome() -> None:
    approved, rejected = AUDITED_CHANGES["request"][1:]
    row = {"request_id": "r1", "status": "approved", "decided_by": "bob", "decided_at": 9, "created_at": 5}
    assert unaudited(approved, [row], {"r1": [("bob", 9, None)]}, log_began=1) == []
    assert unaudited(rejected, [row], {}, log_began=1) == []  # not a rejection: not this rule's
    assert unaudited(approved, [row], {}, log_began=1) == [0]
    assert unaudited(approved, [{**row, "status": "pending", "decided_at": None}], {}, log_began=1) == []
