"""Merkle trees for anchoring: every size from 1 to 64, every leaf's proof, wrong leaves and
roots refused, and an independent small implementation in this file agreeing with the library."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core import merkle


def independent_root(leaves: list[str]) -> str:
    """Written from the module docstring alone, recursively, without the library's helpers."""

    def h(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    def up(nodes: list[bytes]) -> bytes:
        if len(nodes) == 1:
            return nodes[0]
        paired = [h(b"\x01" + nodes[i] + nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
        return up(paired + ([nodes[-1]] if len(nodes) % 2 else []))

    return "sha256:" + up([h(b"\x00" + x.encode()) for x in leaves]).hex()


def leaves(n: int) -> list[str]:
    return ["sha256:" + hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


@pytest.mark.parametrize("n", range(1, 65))
def test_every_leaf_of_every_tree_size_proves_and_nothing_else_does(n: int) -> None:
    items = leaves(n)
    root = merkle.root(items)
    assert root == independent_root(items)
    other_root = merkle.root(leaves(n + 1))
    for i, leaf in enumerate(items):
        steps = merkle.proof(items, i)
        assert merkle.verify(leaf, steps, root)
        assert not merkle.verify(leaf, steps, other_root)  # a wrong root
        assert not merkle.verify("sha256:" + "0" * 64, steps, root)  # a wrong leaf
        if steps:
            flipped = [("R" if s == "L" else "L", d) for s, d in steps]
            assert not merkle.verify(leaf, flipped, root)


@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=40, unique=True))
def test_roots_agree_with_the_independent_implementation(items: list[str]) -> None:
    assert merkle.root(items) == independent_root(items)


def test_a_leaf_cannot_pose_as_a_node_and_empty_trees_do_not_exist() -> None:
    pair = leaves(2)
    node = merkle.node_digest(merkle.leaf_digest(pair[0]), merkle.leaf_digest(pair[1]))
    assert merkle.root(["sha256:" + node.hex()]) != merkle.root(pair)
    with pytest.raises(ValueError):
        merkle.root([])
