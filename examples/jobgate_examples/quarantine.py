"""Quarantine Review (seed 000 §8, §34-35): open the quarantine, request evidence, remind the
reviewer, escalate when overdue — and then hand the case to a human.

Seed §34: quarantine jobs must not release or reject records. Nothing in this module can: no
step writes a ``RELEASED`` or ``REJECTED`` status, and ``await_decision`` only reads a
decision a reviewer recorded in the Quarantine Manager. With no decision yet it fails with
``AWAITING_REVIEWER_DECISION``, and the step's ``on_failure: escalate`` ends the workflow as
ESCALATED: the record says, in the workflow's error and in the case file, that the case is
waiting for its reviewer. ``opened_at`` and ``as_of`` are params, not the clock, so the same
inputs always give the same reminders and escalation.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext, NonRetryableError
from jobgate_examples.common import (
    home,
    iso,
    param,
    parse_instant,
    post_json,
    read_json,
    safe_id,
    setting,
    write_json,
)

DEFAULT_REVIEW_HOURS = 48


def _case_path(ctx: ExecutionContext) -> Path:
    return home(ctx) / "quarantine" / "cases" / f"{safe_id(param(ctx, 'quarantine_id'), 'quarantine_id')}.json"


def _case(ctx: ExecutionContext) -> dict[str, Any]:
    value: dict[str, Any] = read_json(_case_path(ctx), "the quarantine case")
    return value


def _note(case: dict[str, Any], ctx: ExecutionContext, event: str, **detail: Any) -> None:
    """One history line per step, once (a retried step finds its own line)."""
    if not any(h.get("job_run_id") == ctx.job_run_id and h["event"] == event for h in case["history"]):
        case["history"].append({"event": event, "job_run_id": ctx.job_run_id, **detail})


def _review_hours(ctx: ExecutionContext) -> int:
    try:
        return int(setting(ctx, "quarantine_review_hours"))
    except NonRetryableError:
        return DEFAULT_REVIEW_HOURS


def _decided(case: dict[str, Any]) -> bool:
    """A reviewer recorded a release or reject in the Quarantine Manager (never this workflow)."""
    decision = case.get("decision")
    return isinstance(decision, dict) and bool(decision.get("decided_by"))


def open_case(ctx: ExecutionContext) -> dict[str, Any]:
    """Open the case in the Quarantine Manager (or find it open) and assign a reviewer."""
    path = _case_path(ctx)
    roster = read_json(home(ctx) / "quarantine" / "roster.json", "the reviewer roster")
    opened_at = parse_instant(param(ctx, "opened_at"), "opened_at")
    if path.exists():
        case = _case(ctx)
    else:
        qid = param(ctx, "quarantine_id")
        pick = int(hashlib.sha256(qid.encode()).hexdigest(), 16) % len(roster["reviewers"])
        case = {
            "quarantine_id": qid,
            "eco_number": param(ctx, "eco_number"),
            "record_id": param(ctx, "record_id"),
            "status": "OPEN",
            "opened_at": iso(opened_at),
            "deadline": iso(opened_at + timedelta(hours=_review_hours(ctx))),
            "reviewer": roster["reviewers"][pick],
            "decision": None,
            "history": [],
        }
    _note(case, ctx, "opened")
    write_json(path, case)
    return {"reviewer": case["reviewer"], "deadline": case["deadline"]}


def request_evidence(ctx: ExecutionContext) -> dict[str, Any]:
    """Ask the record's owner for the evidence the case still lacks."""
    case = _case(ctx)
    required = read_json(home(ctx) / "quarantine" / "evidence-required.json", "the evidence list")["required"]
    folder = home(ctx) / "quarantine" / "evidence" / case["quarantine_id"]
    present = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    missing = [r for r in required if r not in present]
    if missing and not _decided(case):
        post_json(
            ctx,
            "/notifications",
            {
                "kind": "evidence_request",
                "to": f"owner-of-{case['record_id']}",
                "subject": f"{case['quarantine_id']}: please provide {', '.join(missing)}",
                "ref": case["quarantine_id"],
            },
            "request evidence",
        )
    _note(case, ctx, "evidence_requested", missing=missing)
    write_json(_case_path(ctx), case)
    return {"evidence_missing": len(missing), "evidence_complete": not missing}


def remind_reviewer(ctx: ExecutionContext) -> dict[str, Any]:
    """Remind the reviewer from half the review SLA on; report whether the case is overdue.
    A decided case is neither reminded nor overdue."""
    case = _case(ctx)
    opened = parse_instant(case["opened_at"], "opened_at")
    as_of = parse_instant(param(ctx, "as_of"), "as_of")
    sla = timedelta(hours=_review_hours(ctx))
    age = as_of - opened
    reminded = age * 2 >= sla and not _decided(case)
    if reminded:
        post_json(
            ctx,
            "/notifications",
            {
                "kind": "reviewer_reminder",
                "to": case["reviewer"],
                "subject": f"{case['quarantine_id']} is due by {case['deadline']}",
                "ref": case["quarantine_id"],
            },
            "remind the reviewer",
        )
    _note(case, ctx, "reviewer_reminded" if reminded else "reminder_not_due", as_of=iso(as_of))
    write_json(_case_path(ctx), case)
    return {
        "reminded": reminded,
        "overdue": age > sla and not _decided(case),
        "age_hours": round(age.total_seconds() / 3600, 1),
    }


def escalate(ctx: ExecutionContext) -> dict[str, Any]:
    """Overdue (the step's ``when``): mark the case ESCALATED and tell the escalation contact.
    The decision stays open: escalating is asking a human sooner, not deciding."""
    case = _case(ctx)
    contact = read_json(home(ctx) / "quarantine" / "roster.json", "the reviewer roster")["escalation_contact"]
    answer = post_json(
        ctx,
        "/notifications",
        {
            "kind": "quarantine_escalation",
            "to": contact,
            "subject": f"{case['quarantine_id']} passed its review deadline {case['deadline']}",
            "ref": case["quarantine_id"],
        },
        "escalate",
    )
    case["status"] = "ESCALATED"
    case["escalated_to"] = contact
    _note(case, ctx, "escalated", to=contact)
    write_json(_case_path(ctx), case)
    return {"escalated_to": contact, "notification_id": answer["notification_id"]}


def await_decision(ctx: ExecutionContext) -> dict[str, Any]:
    """Read the reviewer's decision from the case; without one, hand the workflow to a human."""
    case = _case(ctx)
    if _decided(case):  # the reviewer's decision, recorded as theirs
        return {"decision": case["decision"]["decision"], "decided_by": case["decision"]["decided_by"]}
    _note(case, ctx, "awaiting_reviewer_decision", reviewer=case["reviewer"])
    write_json(_case_path(ctx), case)
    raise NonRetryableError(
        f"{case['quarantine_id']} is {case['status']}: release or reject is {case['reviewer']}'s decision",
        error_code="AWAITING_REVIEWER_DECISION",
    )
