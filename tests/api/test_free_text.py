"""Free text a caller stores (a request's title and reason, a token's label, a safe-mode reason,
a run's reason, a decision's note) is refused with a 422 naming the field when it holds what
would not print as itself — a terminal escape, a bell, a direction override, a NUL — and
nothing is stored; a reason may still be a paragraph. What reaches a terminal or a log line
anyway (records stored before this rule) is written as its escapes, never obeyed."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count

from jobgate.core.tokens import Role
from jobgate.logs import configure

HOSTILE = ["\x1b[2J\x1b[Hfake", "ring\x07", "evil\u202etxt", "a\x00b", "ok\rover", "title\x9b31m"]


def _post(world: World, path: str, body: dict[str, Any], role: Role = Role.ADMIN) -> Any:
    return world.client.post(path, json=body, headers=world.headers("acme", role))


DOORS: dict[str, tuple[str, Role, Callable[[str], dict[str, Any]], str, str]] = {
    # name: (path, role, body with the text, the field named, the table that must not grow)
    "request title": (
        "/api/v1/requests",
        Role.CONSUMER,
        lambda t: {"job_definition_id": ACME_JOB, "params": {"n": "1"}, "title": t, "reason": "why"},
        "title",
        "run_requests",
    ),
    "request reason": (
        "/api/v1/requests",
        Role.CONSUMER,
        lambda t: {"job_definition_id": ACME_JOB, "params": {"n": "1"}, "title": "t", "reason": t},
        "reason",
        "run_requests",
    ),
    "token label": ("/api/v1/tokens", Role.ADMIN, lambda t: {"role": "consumer", "label": t}, "label", "api_tokens"),
    "run reason": (
        "/api/v1/runs",
        Role.OPERATOR,
        lambda t: {"job_definition_id": ACME_JOB, "params": {"n": "1"}, "reason": t},
        "reason",
        "job_runs",
    ),
    "scope eco_number": (
        "/api/v1/schedule",
        Role.OPERATOR,
        lambda t: {"job_definition_id": ACME_JOB, "params": {"n": "1"}, "scope": {"eco_number": t}},
        "scope.eco_number",
        "job_runs",
    ),
    "scope environment": (
        "/api/v1/schedule",
        Role.OPERATOR,
        lambda t: {"job_definition_id": ACME_JOB, "params": {"n": "1"}, "scope": {"environment": t}},
        "scope.environment",
        "job_runs",
    ),
    "safe-mode reason": (
        "/api/v1/safe-mode",
        Role.ADMIN,
        lambda t: {"active": True, "reason": t},
        "reason",
        "safe_mode_periods",
    ),
}


@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize("text", HOSTILE, ids=repr)
def test_unreadable_free_text_is_refused_naming_the_field_and_nothing_is_stored(
    world: World, door: str, text: str
) -> None:
    path, role, body, field, table = DOORS[door]
    before = (count(world.engine, table), count(world.engine, "audit_log"))
    response = _post(world, path, body(text), role)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert (count(world.engine, table), count(world.engine, "audit_log")) == before


def test_a_reason_may_be_a_paragraph(world: World) -> None:
    made = _post(
        world,
        "/api/v1/requests",
        {
            "job_definition_id": ACME_JOB,
            "params": {"n": "1"},
            "title": "monthly close",
            "reason": "one\r\ntwo\n\tthree",
        },
        Role.CONSUMER,
    )
    assert made.status_code == 201, made.text
    refused = _post(world, "/api/v1/tokens", {"role": "consumer", "label": "two\nlines"})
    assert refused.status_code == 422 and refused.json()["field"] == "label"  # a label is one line


def test_decision_notes_and_stop_reasons_are_checked_too(world: World) -> None:
    request_id = world.proposal()
    admin = world.headers("acme", Role.ADMIN)
    rejected = world.client.post(
        f"/api/v1/requests/{request_id}/reject", json={"note": "no\x1b]0;x\x07"}, headers=admin
    )
    assert rejected.status_code == 422 and rejected.json()["field"] == "note"
    assert world.client.get(f"/api/v1/requests/{request_id}", headers=admin).json()["status"] == "pending"
    run = world.new_run()
    status = world.client.get(f"/api/v1/runs/{run.job_run_id}", headers=admin).json()["run"]["status"]
    cancelled = world.client.post(
        f"/api/v1/runs/{run.job_run_id}/cancel", json={"reason": "\u202eesrever"}, headers=admin
    )
    assert cancelled.status_code == 422 and cancelled.json()["field"] == "reason"
    assert world.client.get(f"/api/v1/runs/{run.job_run_id}", headers=admin).json()["run"]["status"] == status


def test_the_cli_shows_escapes_it_did_not_check_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    from jobgate.cli.render import out, table

    table("tokens", ["label"], [["\x1b]0;pwned\x07\x1b[2Jfake\nsecond line"]])
    out.print("reason: \x1b[31mred\u202e")
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b]0;pwned\\x07\\x1b[2Jfake" in shown and "second line" in shown and "\\u202e" in shown


def test_a_text_log_line_cannot_be_split_by_a_message() -> None:
    stream = io.StringIO()
    handler = configure("text", "info", stream)
    try:
        logging.getLogger("jobgate.safemode").warning(
            "safe mode ON by %s: %s", "admin", "maint\n2026-12-06 16:41:09,039 INFO jobgate.cli FORGED\x1b[2J"
        )
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "\\x0a2026-12-06" in lines[0] and "\\x1b[2J" in lines[0]


def test_a_stated_requester_on_cancel_and_an_embedded_actor_are_checked(world: World, tmp_path: Any) -> None:
    """Found by a regression review: seed 000's ``/cancel`` folded a stated requester with line
    breaks into the audit reason; ``jobgate.connect(actor=...)`` stored any text as who acted."""
    import jobgate
    from jobgate.core.errors import ValidationError

    run = world.new_run()
    admin = world.headers("acme", Role.ADMIN)
    refused = world.client.post(
        "/api/v1/cancel", json={"job_run_id": run.job_run_id, "requested_by": "bob\nFAKE: approved"}, headers=admin
    )
    assert refused.status_code == 422 and refused.json()["field"] == "requested_by"
    with pytest.raises(ValidationError) as bad_actor:
        jobgate.connect(str(tmp_path / "none.db"), actor="evil\x1b[2J\nfake")
    assert bad_actor.value.field == "actor"
