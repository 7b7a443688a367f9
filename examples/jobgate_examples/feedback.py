"""AI Feedback (seed 000 §8, §36): collect reviewer outcomes, apply the feedback policy, redact,
publish to DSAIL (retried when DSAIL answers "not now"), and log what was suppressed.

After the policy, two branches run in parallel: ``suppress`` (when something was suppressed)
records what must never reach DSAIL, ``redact`` (when something is allowed) strips personal
fields; ``publish`` sends the redacted batch. Historical facts are never altered: each step
writes its own file under the batch's folder and reads the one before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate_examples.common import (
    append_line,
    digest,
    home,
    invalid,
    param,
    post_json,
    read_json,
    read_lines,
    safe_id,
    write_json,
)

PERSONAL_FIELDS = ("subject_email", "subject_name")
FREE_TEXT_FIELDS = ("reviewer_notes",)


def _batch_dir(ctx: ExecutionContext) -> Path:
    return home(ctx) / "feedback" / "batches" / safe_id(param(ctx, "batch_id"), "batch_id")


def collect(ctx: ExecutionContext) -> dict[str, Any]:
    """Every reviewer outcome of the period, in id order."""
    period = param(ctx, "period")
    outcomes = sorted(
        (o for o in read_lines(home(ctx) / "feedback" / "outcomes.jsonl") if o["reviewed_at"].startswith(period)),
        key=lambda o: o["outcome_id"],
    )
    write_json(_batch_dir(ctx) / "collected.json", outcomes)
    return {"collected": len(outcomes)}


def apply_policy(ctx: ExecutionContext) -> dict[str, Any]:
    """Training eligibility: consent given, category not suppressed, model governed by DSAIL."""
    policy = read_json(home(ctx) / "feedback" / "policy.json", "the feedback policy")
    allowed: list[dict[str, Any]] = []
    suppressed: list[dict[str, Any]] = []
    for o in read_json(_batch_dir(ctx) / "collected.json", "the collected outcomes"):
        if policy["require_training_consent"] and not o.get("training_consent"):
            suppressed.append({"outcome_id": o["outcome_id"], "reason": "no training consent"})
        elif o["category"] in policy["suppressed_categories"]:
            suppressed.append({"outcome_id": o["outcome_id"], "reason": f"category {o['category']} is suppressed"})
        elif o["model"] not in policy["governed_models"]:
            suppressed.append({"outcome_id": o["outcome_id"], "reason": f"model {o['model']} is not governed"})
        else:
            allowed.append(o)
    write_json(_batch_dir(ctx) / "allowed.json", allowed)
    write_json(_batch_dir(ctx) / "suppressed.json", suppressed)
    return {"allowed": len(allowed), "suppressed": len(suppressed)}


def suppress(ctx: ExecutionContext) -> dict[str, Any]:
    """Record each suppressed outcome and why, once; none of them is ever published."""
    entries = read_json(_batch_dir(ctx) / "suppressed.json", "the suppressed outcomes")
    log = home(ctx) / "feedback" / "suppression-log.jsonl"
    for s in entries:
        append_line(
            log,
            {**s, "batch_id": param(ctx, "batch_id"), "key": f"{param(ctx, 'batch_id')}:{s['outcome_id']}"},
            key="key",
        )
    return {"suppressed_logged": len(entries)}


def redact(ctx: ExecutionContext) -> dict[str, Any]:
    """Drop personal fields; replace free text by its hash (DSAIL may count it, never read it)."""
    items = []
    for o in read_json(_batch_dir(ctx) / "allowed.json", "the allowed outcomes"):
        item = {k: v for k, v in o.items() if k not in PERSONAL_FIELDS and k not in FREE_TEXT_FIELDS}
        for k in FREE_TEXT_FIELDS:
            if o.get(k):
                item[f"{k}_sha256"] = "sha256:" + hashlib.sha256(str(o[k]).encode()).hexdigest()
        items.append(item)
    batch = {"batch_id": param(ctx, "batch_id"), "period": param(ctx, "period"), "items": items}
    write_json(_batch_dir(ctx) / "redacted.json", batch)
    return {"redacted": len(items), "batch_sha256": digest(batch)}


def publish(ctx: ExecutionContext) -> dict[str, Any]:
    """Send the redacted batch; a 503 raises a retryable error and the retry policy tries again."""
    batch = read_json(_batch_dir(ctx) / "redacted.json", "the redacted batch")
    if digest(batch) != param(ctx, "batch_sha256"):
        raise invalid("the redacted batch changed after redaction", "BATCH_CHANGED")
    ctx.log(f"attempt {ctx.attempt}: publishing {len(batch['items'])} outcomes to DSAIL")
    answer = post_json(ctx, "/dsail/feedback", batch, "publish to DSAIL")
    return {"dsail_receipt": answer["receipt_id"], "published": answer["accepted"], "attempt": ctx.attempt}
