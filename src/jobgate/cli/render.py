"""Output: rich tables for people, ``--json`` for scripts, one clear line for errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from jobgate.core.canonical import isoformat_utc
from jobgate.core.idempotency import short_run_id
from jobgate.core.models import DeadLetter
from jobgate.core.params import escaped

if TYPE_CHECKING:  # the API's schemas (pydantic) load with the commands that show runs
    from jobgate.views.schemas import RunDetailOut, RunOut


class _Console(Console):
    """A console that shows text it is given as what it is: a reason, a title or a label
    someone stored through the API reaches an admin's terminal here, and a terminal escape in
    it (clear the screen, a fake line, a window title) is written as ``\\x1b``, never obeyed."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(escaped(o, lines=True) if isinstance(o, str) else o for o in objects), **kwargs)


# Piped output is not cut to 80 columns: tables stay one line per row for grep and less.
_WIDTH = None if sys.stdout.isatty() else 200
out = _Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = _Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return isoformat_utc(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "value") and isinstance(value.value, str):
        return value.value
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    return value


def emit_json(value: Any) -> None:
    print(json.dumps(jsonable(value), indent=2, sort_keys=True))


def when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def short_when(value: datetime | None) -> str:
    """Month, day and minute, local time: what a narrow table has room for."""
    return "" if value is None else value.astimezone().strftime("%m-%d %H:%M")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for row in rows:
        # as written (`[a-z]` is no markup), and escapes shown, not obeyed
        t.add_row(*[Text("" if v is None else escaped(str(v), lines=True)) for v in row])
    out.print(t)


def records(
    json_output: bool, title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None
) -> None:
    """A list of records: every field as JSON with ``--json``, else a table of ``columns`` (all
    the records' keys by default), lists written as ``a, b``; ``<title>: none`` when empty."""
    if json_output:
        emit_json(list(rows))
    elif rows:
        shown = list(columns or rows[0])
        table(
            title,
            shown,
            [[", ".join(map(str, v)) if isinstance(v, list) else v for v in map(r.get, shown)] for r in rows],
        )
    else:
        out.print(f"{title}: none")


def runs_table(runs: Sequence[RunOut], title: str | None = None, *, wide: bool = False) -> None:
    """Runs as a table: at most 80 columns by default (the end of each run id, which every
    RUN_ID argument takes; a short date), every column and full ids with ``wide``."""
    if wide:
        table(
            title,
            ["run id", "definition", "class", "status", "attempt", "priority", "trigger", "created", "error"],
            [
                (
                    r.job_run_id,
                    r.job_definition_id,
                    r.job_class,
                    r.status,
                    f"{r.attempt}/{r.max_attempts}",
                    r.priority,
                    r.trigger_type,
                    when(r.created_at),
                    r.error_code,
                )
                for r in runs
            ],
        )
        return
    table(
        title,
        ["run", "definition", "status", "try", "created"],
        [
            (
                short_run_id(r.job_run_id),
                r.job_definition_id,
                r.status,
                f"{r.attempt}/{r.max_attempts}",
                short_when(r.created_at),
            )
            for r in runs
        ],
    )


def run_detail(detail: RunDetailOut) -> None:
    r = detail.run
    progress = "" if detail.progress is None else f"{detail.progress:.0%} {detail.progress_message or ''}".strip()
    table(
        f"run {r.job_run_id}",
        ["field", "value"],
        [
            ("definition", f"{r.job_definition_id} v{r.definition_version} ({r.definition_digest})"),
            ("status", f"{r.status}: held by {r.hold_reason} since {when(r.held_at)}" if r.hold_reason else r.status),
            ("attempt", f"{r.attempt}/{r.max_attempts}"),
            ("priority", r.priority),
            ("trigger", f"{r.trigger_type} {r.trigger_id}"),
            ("slot", f"{when(r.slot_at)} of schedule {r.schedule_id}" if r.schedule_id else ""),
            ("requested by", r.requested_by),
            ("reviewed by", r.reviewed_by or ""),
            ("idempotency key", r.idempotency_key),
            ("config snapshot", f"{r.config_snapshot_id} ({r.config_digest})"),
            ("params", r.params),
            ("created", when(r.created_at)),
            ("started", when(r.started_at)),
            ("ended", when(r.ended_at)),
            ("next retry", when(r.next_retry_at)),
            ("progress", progress),
            ("error", f"{r.error_code}: {r.error_message}" if r.error_code else ""),
            ("result", r.result),
            ("artifact", f"sha256 {r.artifact_sha256}, {r.artifact_size} bytes" if r.has_artifact else ""),
        ],
    )
    table(
        "transitions",
        ["#", "at", "from", "to", "attempt", "reason", "actor"],
        [
            (
                t.sequence,
                when(t.at),
                t.from_status or "",
                t.to_status,
                t.attempt,
                f"{t.reason} ({t.detail['rule'] or t.detail.get('code')})" if t.detail.get("rule") else t.reason,
                t.actor,
            )
            for t in detail.transitions
        ],
    )
    if detail.attempts:
        table(
            "attempts",
            ["attempt", "worker", "started", "ended", "outcome", "error"],
            [
                (a.attempt, a.worker_id, when(a.started_at), when(a.ended_at), a.outcome, a.error_code)
                for a in detail.attempts
            ],
        )


def dead_letters_table(letters: Sequence[DeadLetter], *, wide: bool = False, resolved: bool = False) -> None:
    """``resolved``: the list holds resolved letters too (``--all``), so a column says which are."""
    extra = ["resolved"] if resolved else []

    def state(d: DeadLetter) -> list[str]:
        if not resolved:
            return []
        if d.resolved_at is None:
            return ["open"]
        return [f"{d.resolution or 'resolved'} ({when(d.resolved_at) if wide else short_when(d.resolved_at)})"]

    if wide:
        table(
            "dead letters",
            ["dead letter", "run id", "class", "reason", "last error", "attempts", "review", "created", *extra],
            [
                (
                    d.dead_letter_id,
                    d.job_run_id,
                    str(d.job_class),
                    d.reason.value,
                    d.last_error_code,
                    d.attempts,
                    "yes" if d.requires_manual_review else "no",
                    when(d.created_at),
                    *state(d),
                )
                for d in letters
            ],
        )
        return
    table(
        "dead letters",
        ["run", "reason", "last error", "tries", "review", "created", *extra],
        [
            (
                short_run_id(d.job_run_id),
                d.reason.value,
                d.last_error_code,
                d.attempts,
                "yes" if d.requires_manual_review else "no",
                short_when(d.created_at),
                *state(d),
            )
            for d in letters
        ],
    )
