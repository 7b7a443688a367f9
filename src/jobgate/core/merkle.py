"""Merkle trees over audit entry hashes (seed 000 §30-31, §48: DAL batch anchoring).

The rules, which an auditor can reimplement from this paragraph alone:

* a leaf is ``SHA-256(0x00 || leaf)``, where ``leaf`` is the UTF-8 text of the entry hash
  (``sha256:…``); an inner node is ``SHA-256(0x01 || left || right)`` over the two 32-byte
  child digests. The distinct prefixes stop a leaf from being passed off as a node;
* each level pairs nodes left to right; an odd node left at the end of a level is **promoted
  unchanged** to the next level (never duplicated, so no two leaf lists share a root);
* the root of one leaf is that leaf's hash; there is no root of zero leaves;
* a proof lists, from the leaf up, each sibling digest with the side it sits on (``L`` or
  ``R``); levels where the node was promoted contribute nothing.

Roots and proof digests are written as ``sha256:<64 hex>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

PREFIX = "sha256:"


def leaf_digest(leaf: str) -> bytes:
    return hashlib.sha256(b"\x00" + leaf.encode("utf-8")).digest()


def node_digest(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _levels(leaves: Sequence[str]) -> list[list[bytes]]:
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    level = [leaf_digest(x) for x in leaves]
    levels = [level]
    while len(level) > 1:
        nxt = [node_digest(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])  # the odd node is promoted unchanged
        level = nxt
        levels.append(level)
    return levels


def root(leaves: Sequence[str]) -> str:
    return PREFIX + _levels(leaves)[-1][0].hex()


def proof(leaves: Sequence[str], index: int) -> list[tuple[str, str]]:
    """The siblings from leaf ``index`` up to the root, each with its side."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} of {len(leaves)}")
    out: list[tuple[str, str]] = []
    for level in _levels(leaves)[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            out.append(("L" if sibling < index else "R", PREFIX + level[sibling].hex()))
        index //= 2
    return out


def verify(leaf: str, steps: Sequence[Sequence[str]], expected_root: str) -> bool:
    """Offline check of an inclusion proof: the leaf (an entry hash), the proof's steps and the
    anchored root are all it needs."""
    node = hashlib.sha256(b"\x00" + leaf.encode("utf-8")).digest()
    for side, sibling in steps:
        other = bytes.fromhex(sibling.removeprefix(PREFIX))
        if side == "L":
            node = hashlib.sha256(b"\x01" + other + node).digest()
        elif side == "R":
            node = hashlib.sha256(b"\x01" + node + other).digest()
        else:
            return False
    return PREFIX + node.hex() == expected_root
