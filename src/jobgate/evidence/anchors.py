"""Anchoring the audit log (seed 000 §30-31, §48): Merkle roots over each tenant's entries,
chained root to root, written to an append-only sink outside the database.

Batches follow deterministic windows (``evidence.anchor_window_seconds``, hourly by default,
aligned to the epoch): once a window has ended, the batch after the previous one takes every
entry up to the last one written before the window's end — a contiguous run of positions,
so the batches tile the chain with no gap. Each batch's root (``core.merkle``) is chained:
``chain = digest({prev_chain, root})`` (the canonical JSON of the two, ``chain_hash``). The
anchor row and the sink line are written by the
DAL_ANCHOR_JOB's completion (exactly once, in its fenced completion transaction); a sink that
fails makes the attempt fail, so the job's retry policy and dead letter apply like any job.
Direct anchors (one leaf, at once) cover single critical entries, e.g. a safe-mode switch.

The sink is where an outsider checks jobgate: a line per anchor in a local append-only file
by default, or an HTTP endpoint from configuration.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature

from jobgate.core import merkle
from jobgate.core.audit import GENESIS, AuditEntry, first_broken
from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import MalformedRecordError, NotFoundError, ValidationError
from jobgate.core.records import Anchor, AuditFilter
from jobgate.evidence.sinks import AnchorSink, sink_for
from jobgate.governance import signing
from jobgate.store.errors import SealWritersBusy

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from jobgate.evidence.keys import Signer
    from jobgate.evidence.timestamping import TimestampAuthority, TimestampTrust
    from jobgate.store.sqlstore import StoreTx

GENESIS_CHAIN = "sha256:" + "0" * 64
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_end(at: datetime, size: timedelta) -> datetime:
    """The end of the window ``at`` falls in (windows are aligned to the epoch)."""
    return EPOCH + ((at - EPOCH) // size + 1) * size


def chain_hash(prev_chain: str, root: str) -> str:
    return digest({"prev_chain": prev_chain, "root": root})


UNSIGNED_FIELDS = ("sink", "key_id", "signature", "timestamp_token")


def anchor_message(a: Anchor) -> str:
    """What an anchor's signature and its timestamp token cover: every field but the sink's
    name, the signature and the token themselves — the root, the window, the entries covered,
    the previous chain and the times."""
    return record_message(record_of(a))


def record_message(record: Mapping[str, Any]) -> str:
    """``anchor_message`` of an anchor as a record holds it (a sink's copy, a bundle's proof)."""
    return digest({k: v for k, v in record.items() if k not in UNSIGNED_FIELDS})


def _signed(key: Ed25519PublicKey, signature: str, message: str) -> bool:
    try:
        key.verify(base64.b64decode(signature, validate=True), message.encode("utf-8"))
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


def record_of(a: Anchor) -> dict[str, Any]:
    out = asdict(a)
    for key in ("window_start", "window_end", "created_at"):
        out[key] = isoformat_utc(out[key])
    return out


def anchor_due(
    tx: StoreTx,
    tenant_id: str,
    *,
    now: datetime,
    window: timedelta,
    sink: AnchorSink,
    signer: Signer | None = None,
    stamper: TimestampAuthority | None = None,
) -> list[Anchor]:
    """Anchor every window of ``tenant_id`` that has ended and has unanchored entries; each
    anchor is signed (``signer``), timestamped (``stamper``), stored and submitted to the sink.
    Runs inside the caller's transaction."""
    made: list[Anchor] = []
    # Seals still waiting for the leader's batch are chained first: the anchor then covers them.
    # While a transaction writing seals is still open the batch is put off (SealWritersBusy):
    # the anchor covers what is chained, and the seals go into a later window (a regression
    # review found the anchoring job failing its attempt instead).
    with contextlib.suppress(SealWritersBusy):
        tx.seals_chain(tenant_id, now)
    # The chain's head stays locked: an entry committing meanwhile waits, and is then recorded
    # after the anchored window (``audit_append``), never inside a window already anchored.
    tx.anchors.head_lock(tenant_id)
    while True:
        last_batch = tx.anchors.last(tenant_id, "batch")
        after = 0 if last_batch is None else last_batch.last_seq
        first = tx.anchors.first_after(tenant_id, after)
        if first is None:
            return made
        end = window_end(first.event.at, window)
        if end > now:
            return made
        upto = tx.anchors.last_before(tenant_id, after, end)
        assert upto is not None  # ``first`` itself was written before ``end``
        entries = tx.anchors.entries(tenant_id, after + 1, upto)
        start = end - window if last_batch is None else last_batch.window_end
        made.append(_store(tx, tenant_id, "batch", start, end, entries, now, sink, signer, stamper))


def anchor_direct(
    tx: StoreTx, entry: AuditEntry, *, now: datetime, sink: AnchorSink, signer: Signer | None = None
) -> Anchor:
    """Anchor one critical entry at once (a one-leaf tree: its root is the leaf's digest). Made
    no earlier than the entry: the caller read ``now`` before the chain's lock, and the append
    may have recorded the entry later, in order with the chain (``audit_append``)."""
    at = entry.event.at
    return _store(tx, entry.event.tenant_id, "direct", at, at, [entry], max(now, at), sink, signer)


def _store(
    tx: StoreTx,
    tenant_id: str,
    mode: str,
    start: datetime,
    end: datetime,
    entries: Sequence[AuditEntry],
    now: datetime,
    sink: AnchorSink,
    signer: Signer | None = None,
    stamper: TimestampAuthority | None = None,
) -> Anchor:
    root = merkle.root([e.entry_hash for e in entries])
    previous = tx.anchors.last(tenant_id)
    prev_chain = GENESIS_CHAIN if previous is None else previous.chain
    anchor = Anchor(
        tenant_id=tenant_id,
        anchor_seq=1 if previous is None else previous.anchor_seq + 1,
        mode=mode,
        window_start=start,
        window_end=end,
        first_seq=entries[0].seq,
        last_seq=entries[-1].seq,
        leaf_count=len(entries),
        root=root,
        prev_chain=prev_chain,
        chain=chain_hash(prev_chain, root),
        created_at=now,
        sink=sink.name,
    )
    if signer is not None:
        _refuse_a_key_that_breaks_the_chain(previous, signer)
        anchor = replace(anchor, key_id=signer.key_id, signature=signer.sign(anchor_message(anchor)))
    elif previous is not None and previous.signature is not None:
        raise ValidationError(
            f"the anchors of tenant {tenant_id} are signed (anchor {previous.anchor_seq} by {previous.key_id!r}) and"
            " the evidence key is missing: no anchor is written unsigned; restore the key file (jobgate keys"
            " evidence shows where it is expected)",
            field="evidence.signing_key",
        )
    if stamper is not None and mode == "batch":  # a direct anchor is dated by the next batch's token
        token = stamper.stamp(anchor_message(anchor), created_at=now, not_before=end)
        anchor = replace(anchor, timestamp_token=token)
    if not tx.anchors.put(anchor):
        raise RuntimeError(f"anchor {anchor.anchor_seq} of {tenant_id} was written meanwhile; anchor again")
    sink.submit(record_of(anchor))
    return anchor


# ---------------------------------------------------------------------------- verification
@dataclass(frozen=True)
class Verification:
    """The chain recomputed: ``ok``, or the first entry (or anchor) that fails and why."""

    tenant_id: str
    entries: int
    anchors: int
    ok: bool
    first_bad_seq: int | None = None
    problem: str | None = None
    unsigned_anchors: int = 0  # accepted unsigned (made before the key: ``unsigned_anchors_before``)


def verify_tenant(
    tx: StoreTx,
    tenant_id: str,
    *,
    sink_records: Sequence[dict[str, Any]] | None = None,
    keys: Mapping[str, Ed25519PublicKey] | None = None,
    unsigned_before: int = 0,
    timestamps: TimestampTrust | None = None,
    overdue: tuple[datetime, timedelta] | None = None,
) -> Verification:
    """Recompute every entry's hash and link, the head, and every anchor's root, chain, times
    and signature (with ``keys``: every anchor from ``unsigned_before`` on must be signed by one
    of them) and timestamp token (with ``timestamps``: every batch anchor from its
    ``unstamped_before`` on must carry a token that verifies against its roots), and compare
    each anchor with the sink's copy when given: a flipped byte, a deleted, reordered or
    inserted entry, a truncated tail and a chain rewritten from scratch all fail here.
    ``overdue`` (now, limit): entries no anchor covers, the oldest recorded more than ``limit``
    before now, fail too: anchoring stopped, or the anchors were removed (from the database and
    a sink the same writer could empty), and the chain is then only as good as its last writer."""
    entries: list[AuditEntry] = []
    after = 0
    while True:  # in pages: memory stays bounded by the page, not the log
        try:
            page = tx.audit_list(AuditFilter(tenant_id=tenant_id, after_seq=after, limit=5000))
        except MalformedRecordError as exc:  # a row no append wrote: named, as a failed check
            return _malformed(tx, tenant_id, len(entries), exc)
        if not page:
            break
        entries.extend(page)
        after = page[-1].seq
    count = len(entries)
    bad = first_broken(entries)
    try:
        anchors = tx.anchors.of(tenant_id)
    except MalformedRecordError as exc:  # an anchor row no anchoring wrote: named, as a failed check
        return _malformed(tx, tenant_id, count, exc)
    if bad is not None:
        e = entries[bad]
        return Verification(
            tenant_id,
            count,
            len(anchors),
            False,
            bad + 1,
            f"entry {bad + 1} does not follow from the one before (stored seq {e.seq})",
        )
    head_seq, head_hash = tx.audit_head(tenant_id)
    last_seq, last_hash = (entries[-1].seq, entries[-1].entry_hash) if entries else (0, GENESIS)
    if (head_seq, head_hash) != (last_seq, last_hash):
        if head_seq > last_seq:
            at, why = last_seq + 1, f"the chain ends at {last_seq} but its head says {head_seq}: entries are missing"
        elif head_seq < last_seq:
            at, why = (
                head_seq + 1,
                f"entries {head_seq + 1}-{last_seq} follow the head ({head_seq}): not appended by jobgate",
            )
        else:
            at, why = last_seq, f"entry {last_seq} is not the one the head recorded: it was rewritten"
        return Verification(tenant_id, count, len(anchors), False, at, why)
    by_seq = {e.seq: e for e in entries}
    prev_chain = GENESIS_CHAIN
    previous_batch: Anchor | None = None
    unsigned = 0
    witnessed: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in sink_records or ():
        witnessed.setdefault((r["tenant_id"], int(r["anchor_seq"])), []).append(r)
    for a in anchors:
        covered = [by_seq.get(s) for s in range(a.first_seq, a.last_seq + 1)]
        if any(e is None for e in covered):
            return Verification(
                tenant_id,
                count,
                len(anchors),
                False,
                a.first_seq,
                f"anchor {a.anchor_seq} covers entries that no longer exist",
            )
        root = merkle.root([e.entry_hash for e in covered if e is not None])
        if root != a.root or a.prev_chain != prev_chain or chain_hash(prev_chain, root) != a.chain:
            return Verification(
                tenant_id, count, len(anchors), False, a.first_seq,
                f"anchor {a.anchor_seq} (entries {a.first_seq}-{a.last_seq}) no longer matches the entries it covers",
            )  # fmt: skip
        signed = _signature_problem(a, keys, unsigned_before) if keys is not None else _keyless_problem(a)
        if signed is not None:
            return Verification(tenant_id, count, len(anchors), False, a.first_seq, f"anchor {a.anchor_seq} {signed}")
        unsigned += a.signature is None
        stamped = _stamp_problem(a, timestamps) if timestamps is not None else None
        if stamped is not None:
            return Verification(tenant_id, count, len(anchors), False, a.first_seq, f"anchor {a.anchor_seq} {stamped}")
        timing = _timing_problem(a, previous_batch, covered[-1]) if covered[-1] is not None else None
        if timing is not None:
            return Verification(tenant_id, count, len(anchors), False, a.first_seq, f"anchor {a.anchor_seq} {timing}")
        if a.mode == "batch":
            previous_batch = a
        copies = witnessed.get((tenant_id, a.anchor_seq), [])
        differs = _differs_from_copies(record_of(a), copies) if sink_records is not None else None
        if differs is not None:
            return Verification(
                tenant_id,
                count,
                len(anchors),
                False,
                a.first_seq,
                f"anchor {a.anchor_seq} differs from the sink's copy ({differs})",
            )
        forged = _forged_copy(record_of(a), copies, keys) if keys is not None and a.signature is not None else None
        if forged is not None:
            return Verification(tenant_id, count, len(anchors), False, a.first_seq, f"anchor {a.anchor_seq} {forged}")
        prev_chain = a.chain
    known = {a.anchor_seq for a in anchors}
    missing = sorted(seq for t, seq in witnessed if t == tenant_id and seq not in known)
    if missing:  # anchors deleted from the database (with the tail they covered): the sink remembers
        claimed = witnessed[(tenant_id, missing[0])][0].get("first_seq")
        first = int(claimed) if isinstance(claimed, int) and 0 < claimed <= last_seq else last_seq + 1
        return Verification(
            tenant_id, count, len(anchors), False, first,
            f"anchor {missing[0]} is in the sink but not in the database: anchored entries were removed",
        )  # fmt: skip
    late = _overdue_problem(tenant_id, entries, anchors, overdue)
    if late is not None:
        return Verification(tenant_id, count, len(anchors), False, late[0], late[1])
    return Verification(tenant_id, count, len(anchors), True, unsigned_anchors=unsigned)


def _overdue_problem(
    tenant_id: str, entries: Sequence[AuditEntry], anchors: Sequence[Anchor], overdue: tuple[datetime, timedelta] | None
) -> tuple[int, str] | None:
    """The first entry no anchor covers, and why, when it has waited past the limit: entries
    after the last batch anchor that no direct anchor took (a safe-mode switch is anchored at
    once, alone: it does not anchor the entries before it), as the doctor counts them."""
    if overdue is None:
        return None
    now, limit = overdue
    anchored_to = max((a.last_seq for a in anchors if a.mode == "batch"), default=0)
    direct = {s for a in anchors if a.mode != "batch" for s in range(a.first_seq, a.last_seq + 1)}
    tail = [e for e in entries if e.seq > anchored_to and e.seq not in direct]
    if not tail or now - tail[0].event.at <= limit:
        return None
    first, last = tail[0], tail[-1]
    return first.seq, (
        f"entries {first.seq}-{last.seq} are not anchored, the oldest recorded at {isoformat_utc(first.event.at)}: "
        f"longer than {limit} (two anchor windows): anchor them (`jobgate audit anchor --tenant {tenant_id}`, or the "
        f"anchor job scheduled in tenant {tenant_id} with a scheduler running) — or the anchors were removed"
    )


def _keyless_problem(a: Anchor) -> str | None:
    """Verification with no evidence key to check against: fine for a deployment whose anchors
    were never signed, closed for one whose anchors are. Otherwise deleting the key file (or
    keeping it off the verifying host) would turn every signature check off in silence, and a
    rewritten, unsigned anchor would verify."""
    if a.signature is None:
        return None
    return (
        f"is signed by {a.key_id!r}, and no evidence key is available to check it: restore the key file"
        " (jobgate keys evidence shows where it is expected) or list its public key in evidence.trusted_keys"
    )


def _refuse_a_key_that_breaks_the_chain(previous: Anchor | None, signer: Signer) -> None:
    """An id stands for one key, and a new key takes a new id: the previous anchor, signed under
    the signer's id, must be by the signer's key (another key now named so would make every
    anchor the first one signed fail verification), and, signed under another id, must not be by
    the signer's key (the old key left in place signing under the new id: no rotation happened)."""
    if previous is None or previous.signature is None or previous.key_id is None:
        return
    mine = _signed(signing.public_key(signer.public_b64, field="evidence.signing_key"), previous.signature,
                   anchor_message(previous))  # fmt: skip
    if previous.key_id == signer.key_id and not mine:
        raise ValidationError(
            f"anchor {previous.anchor_seq} was signed as {signer.key_id!r} by another key than the one now named so:"
            f" a new key takes a new evidence.signing_key_id (the old one stays trusted under {signer.key_id!r})",
            field="evidence.signing_key_id",
        )
    if previous.key_id != signer.key_id and mine:
        raise ValidationError(
            f"the key signing as {signer.key_id!r} is the one that signed anchor {previous.anchor_seq} as"
            f" {previous.key_id!r}: a rotation makes a new key (move the old key's file away, keep it offline,"
            " then jobgate keys evidence --create)",
            field="evidence.signing_key",
        )


def _signature_problem(a: Anchor, keys: Mapping[str, Ed25519PublicKey], unsigned_before: int) -> str | None:
    if a.signature is None:
        if a.anchor_seq < unsigned_before:
            return None
        return "is not signed (every anchor must carry the evidence key's signature)"
    key = keys.get(a.key_id or "")
    if key is None:
        known = ", ".join(sorted(keys)) or "none"
        return f"is signed by {a.key_id!r}, which is not a trusted evidence key (trusted: {known})"
    if not _signed(key, a.signature, anchor_message(a)):
        return (
            f"has a signature by {a.key_id!r} that does not match its content (or the key now named"
            f" {a.key_id!r} is not the one that signed it: after a rotation the old key keeps its id in"
            " evidence.trusted_keys, and the new key takes another)"
        )
    return None


def _stamp_problem(a: Anchor, trust: TimestampTrust) -> str | None:
    if a.mode != "batch":
        return None  # dated by the next batch anchor's token (its chain names this one)
    if a.timestamp_token is None:
        if a.anchor_seq < trust.unstamped_before:
            return None
        return "is not timestamped (every batch anchor must carry the timestamping authority's token)"
    return trust.problem(a.timestamp_token, anchor_message(a), created_at=a.created_at, not_before=a.window_end)


def _timing_problem(a: Anchor, previous: Anchor | None, last: AuditEntry) -> str | None:
    """What is wrong with an anchor's times, if anything: a batch is made after its window
    ended, its window follows the previous batch's, and it covers only entries recorded before
    its window's end (entries are never back-dated past an anchored window: ``audit_append``)."""
    if a.mode != "batch":
        return None if a.created_at >= last.event.at else "was made before the entry it anchors"
    if not a.window_start < a.window_end <= a.created_at:
        return "has a window that had not ended when it was made"
    if previous is not None and (a.window_start != previous.window_end or a.first_seq != previous.last_seq + 1):
        return f"does not follow anchor {previous.anchor_seq}'s window"
    if last.event.at >= a.window_end:
        return f"covers entry {last.seq}, recorded after its window ended"
    return None


def _differs_from_copies(stored: dict[str, Any], copies: Sequence[dict[str, Any]]) -> str | None:
    """None when one of the sink's copies of an anchor equals the stored anchor in every field;
    else what differs: the first field of the closest copy, or that the sink has none."""
    if not copies:
        return "the sink has no copy"
    best: str | None = None
    for copy in copies:
        fields = _differing(stored, copy)
        if not fields:
            return None
        if best is None or copy.get("chain") == stored.get("chain"):
            best = f"field {fields[0]}"
    return best


def _forged_copy(
    stored: dict[str, Any], copies: Sequence[dict[str, Any]], keys: Mapping[str, Ed25519PublicKey]
) -> str | None:
    """A second, different record of a signed anchor in the sink that no evidence key signed:
    the trace of someone who rewrote history and could append to the sink but not delete what
    it held, or not sign. (A different record that *is* signed can be an anchoring attempt that
    wrote the sink and then did not commit: its retry anchored again; it is not a failure.)"""
    for copy in copies:
        fields = _differing(stored, copy)
        if not fields:
            continue
        key, signature = keys.get(str(copy.get("key_id") or "")), copy.get("signature")
        if key is None or not isinstance(signature, str) or not _signed(key, signature, record_message(copy)):
            return (
                f"has another record in the sink (field {fields[0]} differs) that the evidence key did not sign:"
                " a forged or altered copy"
            )
    return None


def _differing(stored: Mapping[str, Any], copy: Mapping[str, Any]) -> list[str]:
    """The fields (but the sink's name) in which a sink's copy differs from the stored anchor."""
    return [k for k in sorted(stored) if k != "sink" and str(copy.get(k)) != str(stored[k])]


def _malformed(tx: StoreTx, tenant_id: str, entries: int, exc: MalformedRecordError) -> Verification:
    """The failed check a row no jobgate write could have made gives (an entry or an anchor)."""
    try:
        anchors = len(tx.anchors.of(tenant_id))
    except MalformedRecordError:
        anchors = 0
    seq = _seq_of(exc.source) if (exc.source or "").startswith("audit entry") else None
    return Verification(tenant_id, entries, anchors, False, seq, f"{exc.source}: {exc.field}: {exc.message}")


def _seq_of(source: str | None) -> int | None:
    """The position named by a ``MalformedRecordError``'s source (``audit entry 12 of acme``)."""
    parts = (source or "").split()
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None


def inclusion_proof(tx: StoreTx, tenant_id: str, seq: int) -> dict[str, Any] | None:
    """The proof that entry ``seq`` is in an anchored root: the entry hash, the steps, the
    root, and the anchor (its window's batch anchor, else a direct anchor of that entry); None
    when no anchor covers it yet."""
    anchors = tx.anchors.of(tenant_id)
    ordered = [a for a in anchors if a.mode == "batch"] + [a for a in anchors if a.mode != "batch"]
    for a in ordered:
        if a.first_seq <= seq <= a.last_seq:
            entries = tx.anchors.entries(tenant_id, a.first_seq, a.last_seq)
            index = seq - a.first_seq
            return {
                "tenant_id": tenant_id,
                "seq": seq,
                "entry_hash": entries[index].entry_hash,
                "proof": [list(step) for step in merkle.proof([e.entry_hash for e in entries], index)],
                "root": a.root,
                "anchor": record_of(a),
            }
    return None


def proof_of(tx: StoreTx, tenant_id: str, seq: int) -> dict[str, Any]:
    """``inclusion_proof``, or the refusal that says why there is none (``NotFoundError``, field
    ``seq``): no such entry in the tenant's chain, or not under an anchor yet. One rule for the
    CLI's ``audit proof`` and the API's ``GET /audit/{seq}/proof`` (a review found them apart)."""
    head, _ = tx.audit_head(tenant_id)
    if not 1 <= seq <= head:
        raise NotFoundError(f"no audit entry {seq} in tenant {tenant_id} (the chain holds {head})", field="seq")
    found = inclusion_proof(tx, tenant_id, seq)
    if found is None:
        raise NotFoundError(f"entry {seq} is not anchored yet: the next anchor covers it", field="seq")
    return found


# ---------------------------------------------------------------------------- as the deployment configures it
def anchor_configured(tx: StoreTx, config: Any, tenant_id: str, now: datetime) -> list[Anchor]:
    """``anchor_due`` with the deployment's window, sink, evidence key and timestamping
    authority: the one way the job and ``jobgate audit anchor`` make anchors."""
    from jobgate.evidence.keys import signer_for
    from jobgate.evidence.timestamping import authority_for

    return anchor_due(
        tx,
        tenant_id,
        now=now,
        window=config.evidence.anchor_window,
        sink=sink_for(config),
        signer=signer_for(config),
        stamper=authority_for(config),
    )


def verify_configured(
    tx: StoreTx,
    config: Any,
    tenant_id: str,
    *,
    sink_records: Sequence[dict[str, Any]] | None,
    now: datetime | None = None,
) -> Verification:
    """``verify_tenant`` with what the deployment trusts: its evidence keys (current and
    rotated), the anchors accepted unsigned or unstamped, the timestamping authority's roots;
    with ``now``, entries unanchored for more than two anchor windows fail."""
    from jobgate.evidence.keys import trusted_keys
    from jobgate.evidence.timestamping import trust_for

    return verify_tenant(
        tx,
        tenant_id,
        sink_records=sink_records,
        keys=trusted_keys(config) or None,
        unsigned_before=config.evidence.unsigned_anchors_before,
        timestamps=trust_for(config),
        overdue=None if now is None else (now, 2 * config.evidence.anchor_window),
    )
