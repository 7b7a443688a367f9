"""The rules two consecutive seals of one record are read by (``core.seal_trails``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core import seal_trails, seals

APPROVAL = seals.SPECS["approval"].columns


def _approval(**changes: Any) -> list[Any]:
    row = dict.fromkeys(APPROVAL)
    row.update(approval_id=3, tenant_id="t", job_definition_id="payroll", digest="sha256:aa", version=1)
    row.update(approved_by="carol", approved_at=10)
    row.update(changes)
    return [row[c] for c in APPROVAL]


def test_a_closing_may_set_its_columns_once_and_nothing_else() -> None:
    open_, revoked = _approval(), _approval(revoked_at=20, revoked_by="dan")
    assert seal_trails.row_change("approval", open_, revoked) is None
    assert seal_trails.row_change("approval", revoked, open_) == "revoked_at"  # undone
    assert seal_trails.row_change("approval", revoked, _approval(revoked_at=21, revoked_by="dan")) == "revoked_at"
    assert seal_trails.row_change("approval", open_, _approval(approved_by="mallory")) == "approved_by"


@given(column=st.sampled_from(APPROVAL), value=st.one_of(st.integers(), st.text(max_size=5)))
def test_an_approval_changes_in_no_column_but_its_revocation(column: str, value: Any) -> None:
    before, after = _approval(), _approval(**{column: value})
    moved = seal_trails.row_change("approval", before, after)
    if before == after or column in ("revoked_at", "revoked_by"):
        assert moved is None
    else:
        assert moved == column


def test_immutable_kinds_never_change_and_a_definition_only_in_its_signature() -> None:
    columns = seals.SPECS["definition"].columns
    content = {"job_definition_id": "payroll", "signature": {"key": "a"}}

    def definition(**changes: Any) -> list[Any]:
        row = {c: f"{c}-value" for c in columns} | {"content": json.dumps(content)} | changes
        return [row[c] for c in columns]

    resigned = json.dumps({**content, "signature": {"key": "b"}})
    assert seal_trails.row_change("definition", definition(), definition(content=resigned)) is None
    edited = json.dumps({**content, "job_definition_id": "other"})
    assert seal_trails.row_change("definition", definition(), definition(content=edited)) == "content"
    assert seal_trails.row_change("definition", definition(), definition(applied_by="mallory")) == "applied_by"
    snapshot = ["a", "b", "c"]
    assert seal_trails.row_change("snapshot", snapshot, ["a", "x", "c"]) == "tenant_id"
    assert seal_trails.row_change("schedule", ["a"], ["b"]) is None  # edited freely (and audited)


def test_a_request_changes_while_pending_and_is_frozen_once_decided() -> None:
    columns = seals.SPECS["request"].columns

    def request(**changes: Any) -> list[Any]:
        row = dict.fromkeys(columns) | {"request_id": "r", "status": "pending", "params": "{}"} | changes
        return [row[c] for c in columns]

    tested = request(tested_at=1, tested_by="t", verdict="{}")
    assert seal_trails.row_change("request", request(), tested) is None
    assert seal_trails.row_change("request", tested, request(tested_at=2, tested_by="t", verdict="{}")) is None
    decided = request(status="rejected", decided_at=3, decided_by="bob")
    assert seal_trails.row_change("request", request(), decided) is None
    assert seal_trails.row_change("request", decided, request(status="approved", decided_at=3, decided_by="bob")) == (
        "status"
    )
    assert seal_trails.row_change("request", request(), request(params='{"x": 1}')) == "params"


def test_a_run_keeps_its_identity_but_a_requeue_may_raise_its_attempts() -> None:
    before = [f"{c}-value" for c in seals.RUN_IDENTITY]
    attempts = seals.RUN_IDENTITY.index("max_attempts")
    before[attempts] = 1
    raised = list(before)
    raised[attempts] = 2
    assert seal_trails.run_identity_change(before, raised, requeued=True) is None
    assert seal_trails.run_identity_change(before, raised, requeued=False) == "max_attempts"
    lowered = list(before)
    lowered[attempts] = 0
    assert seal_trails.run_identity_change(before, lowered, requeued=True) == "max_attempts"
    other = list(raised)
    other[seals.RUN_IDENTITY.index("requested_by")] = "mallory"
    assert seal_trails.run_identity_change(before, other, requeued=True) == "requested_by"


def test_dead_letters_are_kept_and_only_resolved() -> None:
    letter = ["TGDLQ-1", "retries_exhausted", "E", 3, False, 5, None, None]
    resolved = [*letter[:6], 9, "requeued by ops"]
    assert seal_trails.letters_change([letter], [resolved]) is None
    assert seal_trails.letters_change([letter], []) == "TGDLQ-1"
    assert seal_trails.letters_change([resolved], [letter]) == "TGDLQ-1"  # a resolution undone
    assert seal_trails.letters_change([letter], [[*letter[:2], "OTHER", *letter[3:]]]) == "TGDLQ-1"


def test_a_workflow_grows_until_it_is_final() -> None:
    running = {"identity": ["w"], "outcome": ["ESCALATED"], "history": [[1]]}
    done = {"identity": ["w"], "outcome": ["COMPLETED"], "history": [[1], [2]]}
    assert seal_trails.workflow_change(running, done, final_before=False) is None
    assert seal_trails.workflow_change(done, {**done, "outcome": ["FAILED"]}, final_before=True) == (
        "outcome",
        "status",
    )
    assert seal_trails.workflow_change(done, {**done, "history": [[1], [2], [3]]}, final_before=True) == (
        "history",
        None,
    )
    assert seal_trails.workflow_change(running, {**done, "history": [[9]]}, final_before=False) == ("history", None)
    assert seal_trails.workflow_change(running, {**done, "identity": ["x"]}, final_before=False) == (
        "identity",
        "workflow_run_id",
    )


@pytest.mark.parametrize("content", [None, "", "not json", '{"identity": "text"}', '{"outcome": [1]}'])
def test_kept_values_are_used_only_when_they_hash_to_the_seal(content: str | None) -> None:
    assert seal_trails.kept_values(content, "identity", seals.value_hash([1])) is None


def test_kept_values_that_were_rewritten_are_not_evidence() -> None:
    sealed = seals.value_hash(["carol"])
    assert seal_trails.kept_values('{"identity": ["carol"]}', "identity", sealed) == ["carol"]
    assert seal_trails.kept_values('{"identity": ["mallory"]}', "identity", sealed) is None


def test_each_requeue_needs_its_own_audit_entry_by_the_same_actor_at_or_after_it() -> None:
    def move(reason: str, actor: str = "ops", at: int = 10) -> dict[str, object]:
        return {"reason": reason, "actor": actor, "at": at}

    history = [move("created"), move("requeued", at=10), move("succeeded"), move("requeued", at=20)]
    assert seal_trails.unaudited_requeue(history, [("ops", 10), ("ops", 25)]) is None
    assert seal_trails.unaudited_requeue(history, [("ops", 10)]) == 3  # one entry, two requeues
    assert seal_trails.unaudited_requeue(history, [("eve", 10), ("ops", 20)]) == 3  # another actor's
    assert seal_trails.unaudited_requeue(history, [("ops", 9), ("ops", 20)]) == 3  # before the move
    assert seal_trails.unaudited_requeue([move("created")], []) is None


def test_two_long_values_are_shown_around_where_they_differ() -> None:
    """Found by a review: both values were cut at the same prefix, so two long values that
    differ late (a dead letter's attempts) read as the same in the finding."""
    from jobgate.core.seal_trails import shown_pair

    letter = ["TGDLQ-01a2478eaa07102f2dd06ddc6a4e24e5-1", "non_retryable_validation_failure", "BAD_INPUT", 1, 0, 5]
    was, now = shown_pair([letter], [[*letter[:3], 2, 0, 5]])
    assert was != now and "1, 0, 5" in was and "2, 0, 5" in now
    assert shown_pair("a", "b") == ('"a"', '"b"')
    assert all(len(t) <= 80 for t in shown_pair("x" * 500 + "A", "x" * 500 + "B"))
