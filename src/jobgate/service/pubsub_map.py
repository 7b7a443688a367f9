"""``pubsub.yaml``: the admin's mapping of a pipeline's ``result_name`` to the definitions its
completion triggers, and the pure rule that turns one message into what may fire.

The message never picks what runs (seed 004): ``result_name`` is only a key into this
mapping, which an operator wrote; a name not in it is ignored (counted and logged). From the
message only the whitelisted fields ``pipeline_name``, ``result_name`` and ``status`` may
reach a job, and only those its definition declares as params; nothing else of the payload
is read or stored.

```yaml
subscriptions:
  - result_name: MASK_V001
    job_definition_id: reconcile-mask-sync   # or seed 004's ``scenario:``
    on_status: [success]                     # the default; failed, completed_with_errors opt in
    params: {note: triggered-by-pipeline-completion}
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import ConfigurationError
from jobgate.documents import Reader, join, parse_yaml, read_text

WHITELIST = ("pipeline_name", "result_name", "status")
STATUSES = ("success", "failed", "completed_with_errors")
# Where a publisher may put the completion's instant; the first present names the delivery.
TIMESTAMP_FIELDS = ("timestamp", "finished_at", "completed_at")
MAX_FIELD = 200
_ENTRY_KEYS = ("result_name", "job_definition_id", "scenario", "on_status", "params")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


@dataclass(frozen=True)
class Subscription:
    """One ``subscriptions`` entry: a completion of ``result_name`` with a status in
    ``on_status`` triggers ``job_definition_id`` with ``params`` (static, from the file)."""

    result_name: str
    job_definition_id: str
    on_status: frozenset[str] = frozenset({"success"})
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PubSubMap:
    """Every subscription of the file, by ``result_name``."""

    source: str
    by_result: Mapping[str, tuple[Subscription, ...]] = field(default_factory=dict)

    @property
    def result_names(self) -> list[str]:
        return sorted(self.by_result)


@dataclass(frozen=True)
class Completion:
    """What jobgate reads of one message: the whitelisted fields and the delivery's identity
    (``result_name`` + the completion's timestamp, else a digest of the whole message, so the
    state key and the published message of one completion are one delivery)."""

    result_name: str
    status: str
    fields: Mapping[str, str]
    delivery_id: str
    at: datetime | None = None  # when it completed, if its timestamp reads as an instant
    # The identity a release before timestamps were read as instants gave the same completion
    # (its timestamp as written), when that differs: its run may be stored under that one.
    written_delivery_id: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The rule's answer: the subscriptions to fire, or why none (``ignored``)."""

    completion: Completion | None
    fire: tuple[Subscription, ...] = ()
    ignored: str | None = None  # not_json, bad_message, other_channel, unmapped, status, expired, undated


def load_map(path: Path) -> PubSubMap:
    """Read and check ``path``; a refusal names the file and the field (``ConfigurationError``)."""
    source = str(path)
    text = read_text(path, error=ConfigurationError)
    return parse_map(parse_yaml(text, source=source, error=ConfigurationError), source)


def parse_map(document: Any, source: str) -> PubSubMap:
    """Check a parsed ``pubsub.yaml``: every key known, every status one of ``STATUSES``, static
    params plain values that do not shadow a whitelisted field, no entry twice."""
    r = Reader(source, ConfigurationError)
    doc = r.mapping({} if document is None else document, "")
    r.only_keys(doc, "", ("subscriptions",))
    by_result: dict[str, list[Subscription]] = {}
    for i, raw in enumerate(r.sequence(doc.get("subscriptions", []), "subscriptions")):
        sub = _subscription(r, raw, join("subscriptions", i))
        if any(s.job_definition_id == sub.job_definition_id for s in by_result.get(sub.result_name, [])):
            r.fail(join("subscriptions", i), f"{sub.result_name} -> {sub.job_definition_id} is mapped twice")
        by_result.setdefault(sub.result_name, []).append(sub)
    return PubSubMap(source, {name: tuple(subs) for name, subs in by_result.items()})


def _subscription(r: Reader, raw: Any, at: str) -> Subscription:
    entry = r.mapping(raw, at)
    r.only_keys(entry, at, _ENTRY_KEYS)
    if "result_name" not in entry:
        r.fail(join(at, "result_name"), "is required")
    result_name = r.name(entry["result_name"], join(at, "result_name"))
    named = [key for key in ("job_definition_id", "scenario") if key in entry]
    if len(named) != 1:
        r.fail(join(at, "job_definition_id"), "name the definition to run once (job_definition_id or scenario)")
    definition = r.name(entry[named[0]], join(at, named[0]))
    on_status = frozenset({"success"})
    if "on_status" in entry:
        statuses = r.strings(entry["on_status"], join(at, "on_status"), unique=True)
        for k, status in enumerate(statuses):
            if status not in STATUSES:
                r.fail(join(join(at, "on_status"), k), "must be one of: " + ", ".join(STATUSES))
        if not statuses:
            r.fail(join(at, "on_status"), "must list at least one status")
        on_status = frozenset(statuses)
    params: dict[str, str] = {}
    for name, value in r.mapping(entry.get("params") or {}, join(at, "params")).items():
        where = join(join(at, "params"), name)
        if name in WHITELIST:
            r.fail(where, "is filled from the message; a static param may not shadow it")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            r.fail(where, "must be a string or a number")
        params[r.name(name, where)] = str(value)
    return Subscription(result_name, definition, on_status, params)


def judge(
    mapping: PubSubMap, raw: bytes | str, *, channel_result: str | None = None, not_before: datetime | None = None
) -> Verdict:
    """Pure: which subscriptions one message fires. ``channel_result`` is the channel's own
    ``<result_name>`` suffix, used when the message carries none; a message naming another
    result than its channel is ignored (``other_channel``): a broker's ACL that lets a publisher
    write to its own channel alone must also keep it from firing another pipeline's jobs.

    ``not_before`` (a polling key read while retention retires finished runs): a completion
    from before it fires nothing (``expired``), nor does one without a readable timestamp
    (``undated``). The key is read again at every connect, and its one run, once retired, no
    longer holds the idempotency key that made a second reading a duplicate."""
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past any message
        return Verdict(None, ignored="not_json")
    if not isinstance(message, dict):
        return Verdict(None, ignored="not_json")
    named = message.get("result_name")
    if channel_result is not None and named is not None and named != channel_result:
        return Verdict(None, ignored="other_channel")
    completion = read_completion(message, channel_result)
    if completion is None:
        return Verdict(None, ignored="bad_message")
    if not_before is not None and (completion.at is None or completion.at < not_before):
        return Verdict(completion, ignored="undated" if completion.at is None else "expired")
    subs = mapping.by_result.get(completion.result_name, ())
    if not subs:
        return Verdict(completion, ignored="unmapped")
    fire = tuple(s for s in subs if completion.status in s.on_status)
    return Verdict(completion, fire, None if fire else "status")


def read_completion(message: Mapping[str, Any], channel_result: str | None = None) -> Completion | None:
    """The whitelisted fields of a decoded message, or None when one is missing or not a short
    printable string (nothing of such a message reaches a job)."""
    fields: dict[str, str] = {}
    for name in WHITELIST:
        value = message.get(name)
        if name == "result_name" and value is None:
            value = channel_result
        if value is None and name == "pipeline_name":
            continue
        if not isinstance(value, str) or _PRINTABLE.fullmatch(value) is None:
            return None
        fields[name] = value
    instant = next((message[k] for k in TIMESTAMP_FIELDS if isinstance(message.get(k), str | int | float)), None)
    at = None if instant is None or isinstance(instant, bool) else completion_instant(instant)
    written = None
    if at is not None:  # one instant however written: 23:00Z, 23:00+00:00, epoch seconds or milliseconds
        identity = isoformat_utc(at)
        written = str(instant)[:MAX_FIELD]
    elif instant is not None and not isinstance(instant, bool):
        identity = str(instant)[:MAX_FIELD]
    else:
        try:
            identity = digest(dict(message))
        except (ValueError, RecursionError):  # NaN, or nesting with no canonical JSON: no identity, no run
            return None
    name = fields["result_name"]
    was = None if written is None or written == identity else f"{name}@{written}"
    return Completion(name, fields["status"], fields, f"{name}@{identity}", at, was)


_EPOCH_TEXT = re.compile(r"[0-9]{1,16}([.][0-9]{1,9})?")


def completion_instant(value: str | int | float) -> datetime | None:
    """A completion timestamp as an instant: epoch seconds (milliseconds when that large), or
    ISO 8601 with an offset; None when it reads as neither (it still names the delivery)."""
    try:
        if isinstance(value, str) and _EPOCH_TEXT.fullmatch(value):  # an epoch sent as a JSON string
            value = float(value)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value)
            return None if parsed.tzinfo is None else parsed.astimezone(UTC)
        seconds = value / 1000 if abs(value) >= 1e11 else value
        return datetime.fromtimestamp(seconds, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def job_params(sub: Subscription, completion: Completion, declared: Collection[str]) -> dict[str, str]:
    """The static params, then each whitelisted field the definition declares (and no other)."""
    out = dict(sub.params)
    out.update({name: value for name, value in completion.fields.items() if name in declared})
    return out
