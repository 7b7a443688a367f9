"""Seals: the hash of each record auditors read, committed with the change that made it.

The audit chain (``core.audit``) covers what jobgate *said* happened; a seal covers the rows
that *are* the record: a run as its terminal transition left it, a definition version, an
approval, a token, a schedule, a request, a safe-mode period, a workflow run. Each write that
changes such a record commits, in its own transaction, a seal row holding the record's hash;
the leader then chains every seal not yet chained into the tenant's audit log as one Merkle
root (``records.sealed``), so a seal cannot be rewritten once it is in a batch without
breaking the chain, and the anchors (``evidence.anchors``) carry the chain outside the database.

Verification (``store.sql.seals.verify_records``) recomputes every record's hash from the
stored rows and compares it with the record's latest seal: a changed column, a deleted or
inserted row, a seal rewritten after its batch all show, and the finding names the record,
the part that differs and, where it can, the column. A record's earlier seals are read too, by
the rules of what may change between two seals (``core.seal_trails``): a record changed and
sealed again by someone other than jobgate shows there.

The rules, enough to reimplement a check from this docstring and an export:

* a value list is hashed as ``sha256:`` + SHA-256 of its JSON text (no spaces, UTF-8, keys of
  objects never occur: records are lists of column values in the order of ``*_COLUMNS``);
* a run has three parts: ``identity`` (what it was asked to do: ``RUN_IDENTITY`` columns),
  ``outcome`` (how it ended: ``RUN_OUTCOME`` columns, then its dead letters' ``LETTER_COLUMNS``)
  and ``history`` (its transitions, in id order, as a chain: starting from ``HISTORY_GENESIS``,
  each transition makes the next link ``sha256:`` + SHA-256 of the previous link's text
  followed by the hash of the transition's ``TRANSITION_COLUMNS``); ``extent`` is how many
  transitions the seal covers. A chain, not one hash of the whole list, so that whoever writes
  a transition can extend the history it knows without reading the ones before. A run
  requeued after its seal keeps the sealed prefix of its history and its identity, which
  verification checks; its new end gets a new seal;
* every other kind has one part, ``identity``, over its ``SPECS`` columns;
* a seal is the hash of ``[kind, record_id, event, extent, identity, outcome, history]``;
  ``event`` is ``sealed``, or ``retired`` / ``deleted`` for the tombstone retention or a
  deletion leaves (its identity the seal it closes);
* a batch's root is ``core.merkle.root`` over its seals in id order.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

# A row as the database returns it (SQLAlchemy's RowMapping), or any mapping of column values.
Record = Mapping[Any, Any]

SEALED = "sealed"
BATCH_ACTION = "records.sealed"  # the audit entry that chains a batch of seals
RETIRED = "retired"
DELETED = "deleted"

RUN_IDENTITY = (
    "job_run_id",
    "tenant_id",
    "idempotency_key",
    "job_definition_id",
    "definition_version",
    "definition_digest",
    "job_class",
    "trigger_id",
    "trigger_type",
    "trigger",
    "scope",
    "params",
    "workflow_run_id",
    "config_snapshot_id",
    "config_digest",
    "max_attempts",
    "priority",
    "queue",
    "retry_policy",
    "retry_policy_doc",
    "execution_timeout_us",
    "requested_by",
    "created_at",
    "slot",
)
RUN_OUTCOME = (
    "status",
    "attempt",
    "due_at",
    "queue_deadline_at",
    "started_at",
    "ended_at",
    "next_retry_at",
    "error_code",
    "error_message",
    "result",
    "result_ref",
    "artifact_path",
    "artifact_sha256",
    "artifact_size",
    "hold_reason",
    "held_at",
    "reviewed_by",
)
TRANSITION_COLUMNS = ("from_status", "to_status", "attempt", "reason", "actor", "at", "detail")
LETTER_COLUMNS = (
    "dead_letter_id",
    "reason",
    "last_error_code",
    "attempts",
    "requires_manual_review",
    "created_at",
    "resolved_at",
    "resolution",
)

WORKFLOW_IDENTITY = (
    "workflow_run_id",
    "tenant_id",
    "idempotency_key",
    "job_definition_id",
    "definition_version",
    "definition_digest",
    "job_class",
    "params",
    "scope",
    "trigger",
    "config_snapshot_id",
    "config_digest",
    "requested_by",
    "created_at",
)
WORKFLOW_OUTCOME = ("status", "phase", "started_at", "ended_at", "error_code", "error_message")
STEP_COLUMNS = (
    "step_id",
    "position",
    "status",
    "job_run_id",
    "compensation_run_id",
    "outputs",
    "completed_order",
    "started_at",
    "ended_at",
    "error_code",
)
WORKFLOW_TRANSITION_COLUMNS = ("seq", "step_id", "from_status", "to_status", "reason", "actor", "at", "detail")


@dataclass(frozen=True)
class Spec:
    """A kind of single-row record: its table, the columns naming it, the columns sealed.

    Columns left out are operational state that changes without changing what the record says
    (a schedule's watermark and failure count, a definition head's update time)."""

    kind: str
    table: str
    key: tuple[str, ...]
    columns: tuple[str, ...]


SPECS: dict[str, Spec] = {
    s.kind: s
    for s in (
        Spec(
            "definition",
            "definitions",
            ("job_definition_id", "version"),
            (
                "tenant_id",
                "job_definition_id",
                "version",
                "digest",
                "job_code",
                "job_class",
                "content",
                "source",
                "created_at",
                "applied_by",
                "applied_lineage",
            ),
        ),
        Spec(
            "definition_status",
            "definition_heads",
            ("job_definition_id",),
            ("tenant_id", "job_definition_id", "current_version", "status"),
        ),
        Spec(
            "snapshot",
            "config_snapshots",
            ("config_snapshot_id",),
            ("config_snapshot_id", "tenant_id", "profile", "config_digest", "content", "created_at"),
        ),
        Spec(
            "approval",
            "definition_approvals",
            ("approval_id",),
            (
                "approval_id",
                "tenant_id",
                "job_definition_id",
                "digest",
                "version",
                "code_digest",
                "code_identity",
                "approved_by",
                "approved_at",
                "note",
                "revoked_at",
                "revoked_by",
            ),
        ),
        Spec(
            "token",
            "api_tokens",
            ("token_id",),
            (
                "token_id",
                "tenant_id",
                "role",
                "jobs",
                "label",
                "secret_hash",
                "created_by",
                "created_at",
                "expires_at",
                "revoked_at",
                "revoked_by",
                "principal",
                "minted_by",
            ),
        ),
        Spec(
            "schedule",
            "schedules",
            ("schedule_id",),
            (
                "tenant_id",
                "schedule_id",
                "job_definition_id",
                "kind",
                "timezone",
                "cron",
                "every_us",
                "anchor",
                "params",
                "misfire",
                "misfire_grace_us",
                "max_catchup",
                "overlap",
                "paused",
                "pause_reason",
                "event_type",
                "payload_params",
                "condition",
                "min_every_us",
                "max_every_us",
                "config_profile",
                "config_watch",
                "source",
                "created_at",
            ),
        ),
        Spec(
            "schedule_change",
            "schedule_changes",
            ("id",),
            (
                "id",
                "tenant_id",
                "schedule_id",
                "changed_at",
                "field",
                "old_value",
                "new_value",
                "accepted",
                "source",
                "reason",
            ),
        ),
        Spec(
            "request",
            "run_requests",
            ("request_id",),
            (
                "request_id",
                "tenant_id",
                "job_definition_id",
                "params",
                "title",
                "reason",
                "requested_by",
                "status",
                "created_at",
                "tested_at",
                "tested_by",
                "verdict",
                "decided_at",
                "decided_by",
                "decision_note",
                "job_run_id",
                "digest",
                "version",
                "requester_lineage",
            ),
        ),
        Spec(
            "sla_breach",
            "sla_breaches",
            ("sla_breach_id",),
            (
                "sla_breach_id",
                "tenant_id",
                "subject_kind",
                "subject_id",
                "job_class",
                "job_definition_id",
                "eco_number",
                "kind",
                "phase",
                "sla_policy",
                "deadline",
                "detected_at",
                "severity",
                "requires_escalation",
                "escalated",
            ),
        ),
        Spec(
            "safe_mode",
            "safe_mode_periods",
            ("activation",),
            (
                "tenant_id",
                "activation",
                "activated_at",
                "activated_by",
                "reason",
                "deactivated_at",
                "deactivated_by",
                "deactivation_reason",
                "actions",
            ),
        ),
    )
}
RUN = "run"
WORKFLOW = "workflow"
KINDS = (RUN, WORKFLOW, *SPECS)


def encode(values: Sequence[Any]) -> bytes:
    """A value list's text, as bytes (see the module's rules).

    The text is exactly ``json.dumps(values, separators=(",", ":"), ensure_ascii=False)``;
    orjson writes the same bytes for these values (strings, integers, booleans, None and lists
    of them: ``tests/core/test_seals.py`` checks it) ten times faster, which is what sealing in
    the worker's transaction and verifying a million runs spend their time on. What orjson
    refuses (an integer beyond 64 bits) goes through the standard library."""
    try:
        return orjson.dumps(values)
    except TypeError:
        return json_text(values).encode("utf-8")


_sha256 = hashlib.sha256


def hash_of(text: bytes) -> str:
    return "sha256:" + _sha256(text).hexdigest()


def value_hash(values: Sequence[Any]) -> str:
    """The hash of a list of column values."""
    return hash_of(encode(values))


def json_text(values: Sequence[Any]) -> str:
    """The reference encoding of a value list (what an auditor's reimplementation writes)."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False)


def record_id(spec: Spec, row: Record) -> str:
    """A single-row record's id: its key columns joined by ``@`` (``nightly@3``)."""
    return "@".join(str(row[c]) for c in spec.key)


@dataclass(frozen=True)
class Parts:
    """What a seal is made of; a single-row record has ``identity`` only.

    ``content`` is the encoded value lists the hashes were taken of (``{"identity": [...], ...}``
    as JSON; a run's seal written by an earlier version kept ``column_digests`` joined instead,
    ``{"digests": {"identity": "a1b2c3d4…"}}``): kept with the seal, so a record that differs
    later is reported with the column and both values (the column alone for the older run
    seals), not just "it changed". It is not part of the seal."""

    identity: str
    outcome: str | None = None
    history: str | None = None
    extent: int | None = None
    content: str | None = field(default=None, compare=False)


def _content(**texts: bytes) -> str:
    """The ``content`` of a seal: ``{"part": text, ...}``, the texts as they were hashed."""
    pieces: list[bytes] = []
    for name, text in texts.items():
        pieces += (b',"' if pieces else b'{"', name.encode("ascii"), b'":', text)
    pieces.append(b"}")
    return b"".join(pieces).decode("utf-8")


PACKED = "packed"  # a seal's ``content`` that points at its values packed with others


def pack_contents(contents: Iterable[tuple[str, str]]) -> bytes:
    """Many seals' ``content`` texts, by record id, as one compressed value.

    A worker ends hundreds of runs in one transaction; their contents repeat each other
    (definition, digests, policy, queue) and, stored one by one, were most of the bytes a run's
    seal wrote. Packed they are a tenth of that: the seal rows then keep ``{"packed": n}``,
    row ``n`` of ``seal_values`` holding this value. The rule: zlib (RFC 1950) of the JSON
    object ``{record id: content}``. Diagnosis only, like ``content`` itself: no hash covers it."""
    body = b",".join(orjson.dumps(rid) + b":" + text.encode("utf-8") for rid, text in contents)
    return zlib.compress(b"{" + body + b"}", 1)


def packed_ref(values_id: int) -> str:
    """The ``content`` of a seal whose values are in ``seal_values`` row ``values_id``."""
    return f'{{"{PACKED}":{values_id}}}'


def packed_id(content: str | None) -> int | None:
    """The ``seal_values`` row a seal's ``content`` points at, if it points at one."""
    if not content or not content.startswith('{"' + PACKED + '":'):
        return None
    try:
        found = json.loads(content).get(PACKED)
    except ValueError:
        return None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def unpacked_content(packed: bytes, record_id: str) -> str | None:
    """The content ``pack_contents`` kept for ``record_id`` (None if it kept none, or the
    value is not one it wrote)."""
    try:
        found = json.loads(zlib.decompress(packed)).get(record_id)
    except (zlib.error, ValueError, AttributeError):
        return None
    return None if found is None else json.dumps(found, separators=(",", ":"), ensure_ascii=False)


def column_digests(values: Sequence[Any]) -> list[str]:
    """A short digest of each value (four hex digits of the CRC-32 of ``encode([value])``): what
    a run's seal written by an earlier version kept to name the column that changed;
    verification computes them to compare today's values with such a seal. Diagnosis only:
    the seal itself is over the full hashes."""
    return [_column_digest(v) for v in values]


_FOUR_HEX = "%04x"
_crc32 = zlib.crc32
_NULL_DIGEST = _FOUR_HEX % (_crc32(b"[null]") & 0xFFFF)
_INT64 = 1 << 63
# Most of a run's columns repeat from run to run (its definition, digests, policy, queue): their
# digests are remembered. Emptied when full, so run ids and keys never crowd the repeats out.
_text_digests: dict[str, str] = {}
_TEXT_DIGESTS = 4096


def _column_digest(value: Any) -> str:
    if value is None:
        return _NULL_DIGEST
    kind = type(value)
    if kind is int and -_INT64 <= value < _INT64:  # its text is its digits: no encoder needed
        return _FOUR_HEX % (_crc32(b"[%d]" % value) & 0xFFFF)
    if kind is str:
        found = _text_digests.get(value)
        if found is None:
            if len(_text_digests) >= _TEXT_DIGESTS:
                _text_digests.clear()
            found = _text_digests[value] = _FOUR_HEX % (_crc32(orjson.dumps([value])) & 0xFFFF)
        return found
    return _FOUR_HEX % (_crc32(encode([value])) & 0xFFFF)


def split_digests(kept: Any) -> list[str] | None:
    """A part's column digests as a seal keeps them: one string of four hex digits a column
    (older seals: a list of them); None when ``kept`` is neither."""
    if isinstance(kept, str):
        return [kept[i : i + 4] for i in range(0, len(kept), 4)]
    return kept if isinstance(kept, list) else None


def run_values(run: Record, transitions: Sequence[Record], letters: Sequence[Record]) -> dict[str, list[Any]]:
    """The value lists of a run's three parts (what ``run_parts`` hashes)."""
    outcome: list[Any] = [run[c] for c in RUN_OUTCOME]
    outcome.append([[d[c] for c in LETTER_COLUMNS] for d in letters])
    return {
        "identity": [run[c] for c in RUN_IDENTITY],
        "outcome": outcome,
        "history": [[t[c] for c in TRANSITION_COLUMNS] for t in transitions],
    }


def run_parts(run: Record, transitions: Sequence[Record], letters: Sequence[Record]) -> Parts:
    """A run's parts from its row, its transitions in order and its dead letters in order."""
    values = run_values(run, transitions, letters)
    history = values["history"]
    return run_parts_of(values["identity"], values["outcome"], history_of(history), len(history), history)


HISTORY_GENESIS = "sha256:" + "0" * 64


def history_step(previous: str, transition: Sequence[Any]) -> str:
    """The history after one more transition (its ``TRANSITION_COLUMNS`` values):
    ``hash_of((previous + value_hash(transition)).encode("ascii"))``, written out (a worker
    takes three steps a run)."""
    inner = _sha256(encode(transition)).hexdigest()
    return "sha256:" + _sha256((previous + "sha256:" + inner).encode("ascii")).hexdigest()


def history_of(transitions: Sequence[Sequence[Any]], start: str = HISTORY_GENESIS) -> str:
    """The history part of a run whose transitions' value lists are ``transitions``:
    ``history_step`` over each."""
    link = start
    for t in transitions:
        link = history_step(link, t)
    return link


def history_hash(transitions: Sequence[Record]) -> str:
    return history_of([[t[c] for c in TRANSITION_COLUMNS] for t in transitions])


def run_parts_extended(run: Record, history: str, extent: int, letters: Sequence[Record]) -> Parts:
    """A run's parts from its row, the history its writer extended (``history_step``) over
    ``extent`` transitions, and its dead letters: how a worker seals the run it holds without
    reading its transitions back. ``content`` keeps the identity and outcome texts."""
    outcome: list[Any] = [run[c] for c in RUN_OUTCOME]
    outcome.append([[d[c] for c in LETTER_COLUMNS] for d in letters])
    return run_parts_of([run[c] for c in RUN_IDENTITY], outcome, history, extent)


def run_parts_of(
    identity: Sequence[Any],
    outcome: Sequence[Any],
    history: str,
    extent: int,
    transitions: Sequence[Sequence[Any]] | None = None,
) -> Parts:
    """``run_parts_extended`` from the value lists themselves: ``identity`` in ``RUN_IDENTITY``
    order, ``outcome`` in ``RUN_OUTCOME`` order followed by the dead letters' value lists.

    ``content`` keeps the texts the hashes were taken of, as every other kind's seal does:
    encoding them is the hashing's own work, so naming a changed column (and both values) later
    costs the worker nothing more. Run seals of earlier versions kept four hex digits a column
    instead (computing them was two thirds of sealing a run); verification reads both. With
    ``transitions`` (their ``TRANSITION_COLUMNS`` values, when the sealer read them) it keeps
    the history's text too, so a changed transition is named by its number."""
    identity_hash, outcome_hash, content = run_texts(identity, outcome, transitions)
    return Parts(identity_hash, outcome_hash, history, extent, content)


def run_texts(
    identity: Sequence[Any], outcome: Sequence[Any], transitions: Sequence[Sequence[Any]] | None = None
) -> tuple[str, str, str]:
    """A run's identity and outcome hashes and its ``content``: ``run_parts_of`` without the
    ``Parts`` object, for the worker that seals hundreds of runs a transaction (building the
    frozen object cost as much as hashing both parts)."""
    identity_text, outcome_text = encode(identity), encode(outcome)
    if transitions is None:
        content = _content(identity=identity_text, outcome=outcome_text)
    else:
        content = _content(identity=identity_text, outcome=outcome_text, history=encode(transitions))
    return hash_of(identity_text), hash_of(outcome_text), content


def workflow_parts(workflow: Record, steps: Sequence[Record], transitions: Sequence[Record]) -> Parts:
    """A workflow run's parts: its row, its steps by position, its state sequence in order."""
    outcome: list[Any] = [workflow[c] for c in WORKFLOW_OUTCOME]
    outcome.append([[s[c] for c in STEP_COLUMNS] for s in steps])
    texts = {
        "identity": encode([workflow[c] for c in WORKFLOW_IDENTITY]),
        "outcome": encode(outcome),
        "history": encode([[t[c] for c in WORKFLOW_TRANSITION_COLUMNS] for t in transitions]),
    }
    return Parts(
        identity=hash_of(texts["identity"]),
        outcome=hash_of(texts["outcome"]),
        history=hash_of(texts["history"]),
        extent=len(transitions),
        content=_content(**texts),
    )


def row_parts(spec: Spec, row: Record) -> Parts:
    text = encode([row[c] for c in spec.columns])
    return Parts(identity=hash_of(text), content=_content(identity=text))


def seal_of(kind: str, rid: str, event: str, parts: Parts) -> str:
    return seal_hash(kind, rid, event, parts.extent, parts.identity, parts.outcome, parts.history)


def seal_hash(
    kind: str, rid: str, event: str, extent: int | None, identity: str, outcome: str | None, history: str | None
) -> str:
    """A seal from its parts' hashes (the module's rule): ``seal_of`` without the ``Parts``."""
    return value_hash([kind, rid, event, extent, identity, outcome, history])


def difference(names: Sequence[str], sealed: Sequence[Any], now: Sequence[Any]) -> tuple[str, Any, Any] | None:
    """The first position where two value lists differ: its name, the sealed value, today's."""
    for i in range(max(len(sealed), len(now))):
        was = sealed[i] if i < len(sealed) else None
        is_ = now[i] if i < len(now) else None
        if i >= len(sealed) or i >= len(now) or was != is_:
            name = names[i] if i < len(names) else f"item {i + 1}"
            return name, was, is_
    return None
