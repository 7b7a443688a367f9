"""The seal rules (``core.seals``): the published encoding, and which columns a seal covers."""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from jobgate.core import seals

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(),  # every code point, control characters and surrogate-free astral planes included
)
VALUES = st.lists(st.one_of(SCALARS, st.lists(st.lists(SCALARS, max_size=4), max_size=4)), max_size=12)


@given(VALUES)
def test_the_fast_encoding_writes_the_reference_bytes(values: list[Any]) -> None:
    expected = "sha256:" + hashlib.sha256(seals.json_text(values).encode("utf-8")).hexdigest()
    assert seals.value_hash(values) == expected


def test_an_integer_beyond_64_bits_still_hashes_by_the_reference_encoding() -> None:
    values = [2**70, "x"]
    assert seals.value_hash(values) == "sha256:" + hashlib.sha256(b'[1180591620717411303424,"x"]').hexdigest()


def _run() -> dict[str, Any]:
    row: dict[str, Any] = {c: f"v-{c}" for c in (*seals.RUN_IDENTITY, *seals.RUN_OUTCOME)}
    row.update(lease_owner=None, lease_expires_at=None, progress=None, stop_requested=False)
    return row


def _transition(src: str | None, dst: str, attempt: int, at: int) -> dict[str, Any]:
    return {"from_status": src, "to_status": dst, "attempt": attempt, "reason": dst.lower(), "actor": "w", "at": at,
            "detail": None}  # fmt: skip


TRANSITIONS = [_transition(None, "CREATED", 0, 1), _transition("CREATED", "COMPLETED", 1, 2)]


@given(st.sampled_from([*seals.RUN_IDENTITY, *seals.RUN_OUTCOME]))
def test_every_sealed_column_of_a_run_changes_its_seal(column: str) -> None:
    base = seals.run_parts(_run(), TRANSITIONS, [])
    changed = {**_run(), column: "tampered"}
    after = seals.run_parts(changed, TRANSITIONS, [])
    assert seals.seal_of("run", "r", seals.SEALED, after) != seals.seal_of("run", "r", seals.SEALED, base)


@given(st.sampled_from(["lease_owner", "lease_expires_at", "progress", "stop_requested"]))
def test_operational_columns_leave_the_seal_alone(column: str) -> None:
    base = seals.run_parts(_run(), TRANSITIONS, [])
    assert seals.run_parts({**_run(), column: "x"}, TRANSITIONS, []) == base


@given(st.integers(0, 1), st.sampled_from(seals.TRANSITION_COLUMNS))
def test_every_column_of_every_transition_is_in_the_history(index: int, column: str) -> None:
    changed = [dict(t) for t in TRANSITIONS]
    changed[index][column] = "tampered"
    assert seals.history_hash(changed) != seals.history_hash(TRANSITIONS)
    assert seals.history_hash(TRANSITIONS[:1]) != seals.history_hash(TRANSITIONS)


def test_the_seal_binds_the_kind_the_id_and_the_event() -> None:
    parts = seals.run_parts(_run(), TRANSITIONS, [])
    one = seals.seal_of("run", "r", seals.SEALED, parts)
    assert one != seals.seal_of("run", "other", seals.SEALED, parts)
    assert one != seals.seal_of("workflow", "r", seals.SEALED, parts)
    assert one != seals.seal_of("run", "r", seals.RETIRED, parts)


def test_each_single_row_kind_seals_its_key_and_tenant() -> None:
    for spec in seals.SPECS.values():
        assert "tenant_id" in spec.columns, spec.kind
        assert set(spec.key) <= set(spec.columns), spec.kind


def test_the_history_is_a_chain_an_auditor_can_recompute_with_hashlib() -> None:
    """As the module's rules say: each link is SHA-256 of the previous link's text followed by
    the transition's value-list hash, from a genesis of zeros."""
    transitions = [
        [None, "CREATED", 0, "created", "ada", 1, None],
        ["CREATED", "SCHEDULED", 0, "admitted", "ada", 2, None],
    ]
    link = "sha256:" + "0" * 64
    for t in transitions:
        leaf = "sha256:" + hashlib.sha256(seals.json_text(t).encode()).hexdigest()
        link = "sha256:" + hashlib.sha256((link + leaf).encode()).hexdigest()
    assert seals.history_of(transitions) == link
    assert seals.history_of(transitions[1:], seals.history_of(transitions[:1])) == link  # extended, not reread


@given(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=20)), min_size=1, max_size=8))
def test_a_run_sealed_from_its_chain_equals_one_sealed_by_reading(values: list[Any]) -> None:
    run = {c: values[i % len(values)] for i, c in enumerate((*seals.RUN_IDENTITY, *seals.RUN_OUTCOME))}
    history = [[None, "CREATED", 0, "created", "ada", 1, None]]
    read = seals.run_parts(run, [dict(zip(seals.TRANSITION_COLUMNS, history[0], strict=True))], [])
    chained = seals.run_parts_extended(run, seals.history_of(history), 1, [])
    assert read == chained  # the same seal, whichever way it was made (content aside)
    assert seals.column_digests(values) == [format(zlib.crc32(seals.encode([v])) & 0xFFFF, "04x") for v in values]


def test_a_runs_seal_keeps_the_texts_it_hashed() -> None:
    values = ["a", 1, None, ["x"], "é"]
    run = {c: values[i % len(values)] for i, c in enumerate((*seals.RUN_IDENTITY, *seals.RUN_OUTCOME))}
    chained = seals.run_parts_extended(run, seals.HISTORY_GENESIS, 0, [])
    kept = json.loads(chained.content or "{}")
    assert set(kept) == {"identity", "outcome"}  # the history is a chain: its text was never in hand
    assert kept["identity"] == [run[c] for c in seals.RUN_IDENTITY]
    assert seals.value_hash(kept["identity"]) == chained.identity
    assert seals.value_hash(kept["outcome"]) == chained.outcome
    history = [[None, "CREATED", 0, "created", "ada", 1, None]]
    read = seals.run_parts(run, [dict(zip(seals.TRANSITION_COLUMNS, history[0], strict=True))], [])
    assert json.loads(read.content or "{}")["history"] == history  # read: each transition is named


def test_older_run_seals_column_digests_are_read_in_either_form() -> None:
    digests = seals.column_digests(["a", 1, None, ["x"]])
    assert seals.split_digests("".join(digests)) == digests
    assert seals.split_digests(digests) == digests  # a seal written before the joined form
    assert seals.split_digests(None) is None


_TRANSITION_VALUE = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.text(max_size=12), st.booleans())


@given(st.lists(st.lists(_TRANSITION_VALUE, min_size=7, max_size=7), max_size=6))
def test_the_written_out_history_equals_its_steps(transitions: list[list[Any]]) -> None:
    """``history_of`` inlines ``history_step`` for speed; integers beyond 64 bits take the steps."""
    link = seals.HISTORY_GENESIS
    for t in transitions:
        link = seals.history_step(link, t)
    assert seals.history_of(transitions) == link


_texts = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(min_size=1, max_size=40), st.lists(_texts, max_size=6), max_size=8))
def test_packed_contents_give_back_each_records_text(kept: dict[str, list[Any]]) -> None:
    """Whatever a record's content holds, packed with others it comes back as the same value
    (the text ``_explain`` reads), and a record not packed comes back as None."""
    contents = [(rid, json.dumps({"identity": values}, ensure_ascii=False)) for rid, values in kept.items()]
    packed = seals.pack_contents(contents)
    assert json.loads(zlib.decompress(packed)) == {rid: {"identity": values} for rid, values in kept.items()}
    for rid, text in contents:
        assert json.loads(seals.unpacked_content(packed, rid) or "null") == json.loads(text)
    assert seals.unpacked_content(packed, "\x00 not packed") is None


def test_a_packed_reference_is_told_from_inline_values() -> None:
    ref = seals.packed_ref(42)
    assert ref == '{"packed":42}' and seals.packed_id(ref) == 42
    for other in (None, "", '{"identity":[1]}', '{"packed":"42"}', '{"packed":true}', '{"packed":', "{}"):
        assert seals.packed_id(other) is None
    assert seals.unpacked_content(b"not zlib", "r") is None
    assert seals.unpacked_content(zlib.compress(b"[1, 2]"), "r") is None  # not an object
