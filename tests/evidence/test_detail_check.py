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
