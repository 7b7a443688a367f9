"""The suite covers the whole store: every public operation of ``StoreTx``, and of each row group
it exposes (``tx.anchors``, ``tx.telemetry``, ``tx.metrics``, ``tx.sla``, ``tx.evidence``,
``tx.packs``), is
called by some test of ``tests/store_contract``.

The operations are listed by introspection, so an operation added to the store fails this test
until a contract test calls it. A test calls a ``StoreTx`` method as ``<anything>.name(...)`` and
a row group's method as ``<anything>.<group>.name(...)``; the calls are found in the test files'
syntax trees (not in comments or strings, and not in the shared ``support`` module).
"""

from __future__ import annotations

import ast
import functools
import inspect
import typing
from collections.abc import Iterator
from pathlib import Path

from jobgate.store.sqlstore import StoreTx

HERE = Path(__file__).resolve().parent


def _public(cls: type) -> dict[str, object]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


def _groups() -> dict[str, type]:
    """The row groups ``StoreTx`` exposes: its properties whose value is a class of their own."""
    out: dict[str, type] = {}
    for name, value in _public(StoreTx).items():
        if isinstance(value, functools.cached_property | property):
            getter = value.func if isinstance(value, functools.cached_property) else value.fget
            returned = typing.get_type_hints(getter).get("return")
            if inspect.isclass(returned):
                out[name] = returned
    return out


def _syntax_trees() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(HERE.glob("test_*.py")):
        if path.name != Path(__file__).name:
            yield path.name, ast.parse(path.read_text(encoding="utf-8"))


def _usage() -> tuple[set[str], set[tuple[str, str]], set[str]]:
    """(methods called, (group, method) pairs called, attributes read) across the test files."""
    called: set[str] = set()
    called_on_group: set[tuple[str, str]] = set()
    read: set[str] = set()
    for _, tree in _syntax_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                read.add(node.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                called.add(node.func.attr)
                owner = node.func.value
                if isinstance(owner, ast.Attribute):
                    called_on_group.add((owner.attr, node.func.attr))
    return called, called_on_group, read


def test_the_store_is_introspected_as_expected() -> None:
    groups = _groups()
    assert set(groups) == {"anchors", "telemetry", "metrics", "sla", "evidence", "packs"}
    assert len(_public(StoreTx)) > 100
    assert all(_public(cls) for cls in groups.values())
    assert len(list(_syntax_trees())) >= 10


def test_every_public_operation_of_the_store_is_called_by_a_contract_test() -> None:
    called, called_on_group, read = _usage()
    groups = _groups()
    missing: list[str] = []
    for name, value in sorted(_public(StoreTx).items()):
        if name in groups:
            if name not in read:
                missing.append(f"StoreTx.{name}")
        elif callable(value):
            if name not in called:
                missing.append(f"StoreTx.{name}()")
        elif name not in read:
            missing.append(f"StoreTx.{name}")
    for group, cls in sorted(groups.items()):
        for name, value in sorted(_public(cls).items()):
            if callable(value) and (group, name) not in called_on_group:
                missing.append(f"tx.{group}.{name}() ({cls.__name__})")
    assert not missing, "store operations no contract test calls:\n  " + "\n  ".join(missing)
