"""A bundle's ``detail`` against its sealed rows: what the API renders differently is rendered
the same way before comparing (``export.detail_check``)."""

from __future__ import annotations

from typing import Any

from jobgate.export.detail_check import detail_problems

RID = "TGJOBRUN-1"


def _doc(**row: Any) -> dict[str, Any]:
    sealed = {"job_run_id": RID, "status": "COMPLETED", "artifact_path": None, "hold_reason": None, "held_at": None}
    sealed.update(row)
    return {"row": sealed, "transitions": [], "dead_letters": []}


def _shown(**run: Any) -> dict[str, Any]:
    shown = {"job_run_id": RID, "status": "COMPLETED", "result_ref": None, "has_artifact": False}
    shown.update(run)
    return {"run": shown, "transitions": [], "attempts": [], "dead_letter": None}


def test_an_artifact_is_shown_by_its_api_path_and_a_past_hold_not_at_all() -> None:
    doc = _doc(artifact_path="/data/runs/TGJOBRUN-1/attempt-1/report.json", hold_reason="safe_mode", held_at=5)
    doc["detail"] = _shown(result_ref=f"/api/v1/runs/{RID}/artifact", has_artifact=True, hold_reason=None, held_at=None)
    assert detail_problems("runs/x.json", doc) == []


def test_a_shown_artifact_or_hold_that_the_row_does_not_have_is_refused() -> None:
    doc = _doc()
    doc["detail"] = _shown(result_ref=f"/api/v1/runs/{RID}/artifact", has_artifact=True)
    assert detail_problems("runs/x.json", doc) == ["runs/x.json: detail.run.result_ref differs from the sealed row"]
    held = _doc(status="HELD", hold_reason="safe_mode", held_at=5)
    held["detail"] = _shown(status="HELD", hold_reason="approval_revoked", held_at="1970-01-01T00:00:00.000005Z")
    assert detail_problems("runs/x.json", held) == ["runs/x.json: detail.run.hold_reason differs from the sealed row"]


def test_a_shown_transitions_number_and_a_shown_letters_run_and_class_are_checked() -> None:
    """Found by a review: a re-signed bundle's detail could renumber a transition and show its
    dead letter under another run or job class, unnoticed (no sealed column holds them)."""
    sealed_t = {"from_status": None, "to_status": "CREATED", "attempt": 0, "reason": "created", "actor": "ada",
                "at": 0, "detail": None}  # fmt: skip
    shown_t = {"sequence": 1, "from_status": None, "to_status": "CREATED", "attempt": 0, "reason": "created",
               "actor": "ada", "at": "1970-01-01T00:00:00Z", "detail": {}}  # fmt: skip
    letter = {"dead_letter_id": "TGDL-1", "reason": "x", "last_error_code": None, "attempts": 0, "resolved_at": None}
    doc = _doc(status="DEAD_LETTERED", job_class="MAINTENANCE_JOB")
    doc["transitions"], doc["dead_letters"] = [sealed_t], [letter]
    shown_letter = {**letter, "job_run_id": RID, "job_class": "MAINTENANCE_JOB"}
    doc["detail"] = {**_shown(status="DEAD_LETTERED", job_class="MAINTENANCE_JOB"), "transitions": [shown_t],
                     "dead_letter": shown_letter}  # fmt: skip
    assert detail_problems("runs/x.json", doc) == []
    for change, named in (
        ({"transitions": [{**shown_t, "sequence": 7}]}, "detail.transitions[1].sequence"),
        ({"dead_letter": {**shown_letter, "job_run_id": "TGJOBRUN-2"}}, "detail.dead_letter.job_run_id"),
        ({"dead_letter": {**shown_letter, "job_class": "REPLAY_JOB"}}, "detail.dead_letter.job_class"),
    ):
        forged = {**doc, "detail": {**doc["detail"], **change}}
        assert any(named in p for p in detail_problems("runs/x.json", forged)), (
            named,
            detail_problems("runs/x.json", forged),
        )
