"""The layers, as imports: what may import what, checked on every module of ``jobgate``.

```
faces        api/  cli/                      (and the console)
services     service/  workflows/  runtime/  maintenance and the top-level shells
store        store/                          the only code that speaks SQL
pure         core/  scheduling/              no I/O, no clock
```

Imports inside functions and under ``TYPE_CHECKING`` count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "jobgate"


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every ``jobgate`` module ``path`` imports, with the line, resolved to absolute names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jobgate"):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("jobgate"):
                for alias in node.names:  # ``from jobgate.store import sql`` names a module too
                    yield node.lineno, f"{name}.{alias.name}"


MODULES = sorted(p for p in SRC.rglob("*.py") if "migrations" not in p.parts)


def _in(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _violations(rule: str, source: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """Imports from modules under ``source`` of anything in ``jobgate`` outside ``allowed``."""
    found = []
    for path in MODULES:
        module = _module(path)
        if not _in(module, *source):
            continue
        for line, name in _imports(path):
            if not _in(name, *allowed):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: {rule}: imports {name}")
    return found


def test_the_pure_core_imports_only_itself() -> None:
    assert _violations("core is pure", ("jobgate.core",), ("jobgate.core",)) == []


def test_scheduling_imports_only_the_core_and_itself() -> None:
    allowed = ("jobgate.core", "jobgate.scheduling")
    assert _violations("scheduling is pure", ("jobgate.scheduling",), allowed) == []


def test_the_store_imports_only_the_pure_layers_and_itself() -> None:
    allowed = ("jobgate.core", "jobgate.scheduling", "jobgate.store", "jobgate.clock")
    assert _violations("the store sits on the pure layers", ("jobgate.store",), allowed) == []


STORE_INTERNALS = ("jobgate.store.sql", "jobgate.store.tables", "jobgate.store.codec", "jobgate.store.rows")


def test_nothing_outside_the_store_reaches_its_internals() -> None:
    """The store is the one door: its SQL modules, tables and codec are its own (``jobgate.testing``
    hands tests a transaction's connection, and is itself only for tests)."""
    found = []
    for path in MODULES:
        module = _module(path)
        if _in(module, "jobgate.store", "jobgate.testing"):
            continue
        for line, name in _imports(path):
            if _in(name, *STORE_INTERNALS) or _in(name, "jobgate.testing"):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: imports {name}")
    assert found == []


def test_no_module_reaches_for_a_transactions_connection() -> None:
    """``StoreTx`` has no public connection; ``effect_connection`` is for a handler's effects,
    called by the worker alone."""
    found = []
    for path in MODULES:
        if _in(_module(path), "jobgate.store", "jobgate.testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in {"_conn", "conn"}:
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: .{node.attr}")
            worker = _module(path) == "jobgate.runtime.worker"
            if isinstance(node, ast.Attribute) and node.attr == "effect_connection" and not worker:
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: .effect_connection")
    assert found == []


@pytest.mark.parametrize("layer", ["jobgate.service", "jobgate.store", "jobgate.core", "jobgate.scheduling"])
def test_nothing_below_the_runtime_imports_it(layer: str) -> None:
    """The runtime (workers, loops) drives the services; a service never reaches back into it."""
    found = []
    for path in MODULES:
        if not _in(_module(path), layer):
            continue
        for line, name in _imports(path):
            if _in(name, "jobgate.runtime"):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: imports {name}")
    assert found == []


@pytest.mark.parametrize("layer", ["jobgate.service", "jobgate.runtime", "jobgate.store", "jobgate.core"])
def test_nothing_below_the_faces_imports_them(layer: str) -> None:
    found = []
    for path in MODULES:
        if not _in(_module(path), layer):
            continue
        for line, name in _imports(path):
            if _in(name, "jobgate.api", "jobgate.cli"):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: imports {name}")
    assert found == []


# Built-in job handlers are entry points, named by path in the definitions that run them (and so
# in their approved digests): they sit at the top of the graph, like the faces, whatever folder
# holds them. The composition root and the test kit likewise import whatever they assemble.
ENTRY_POINTS = (
    "jobgate.anchoring",
    "jobgate.replay",
    "jobgate.retention",
    "jobgate.standins",
    "jobgate.workflows.starter",
    "jobgate.telemetry.rollup",
    "jobgate.server",
    "jobgate.testing",
    "jobgate.__main__",
)


def _unit(module: str) -> str:
    """The unit a module belongs to in the package graph: its top-level package, or itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else module


def _package_graph() -> dict[str, dict[str, list[str]]]:
    graph: dict[str, dict[str, list[str]]] = {}
    for path in MODULES:
        module = _module(path)
        if module == "jobgate" or _in(module, *ENTRY_POINTS):
            continue
        for line, name in _imports(path):
            if _in(name, *ENTRY_POINTS) or name == "jobgate" or _unit(name) == _unit(module):
                continue
            where = f"{path.relative_to(SRC.parent)}:{line}"
            graph.setdefault(_unit(module), {}).setdefault(_unit(name), []).append(where)
    return graph


def _cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for other in graph.get(unit, {}):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = []
            while (top := stack.pop()) != unit:
                component.append(top)
            component.append(unit)
            if len(component) > 1:
                found.append(sorted(component))

    for unit in list(graph):
        if unit not in index:
            visit(unit)
    return found


def test_no_package_imports_itself_back_through_another() -> None:
    """Packages (and top-level modules) form a graph without cycles, lazy imports included: each
    cycle is named with the imports that close it."""
    graph = _package_graph()
    report = []
    for component in _cycles(graph):
        edges = [f"{a} -> {b} ({graph[a][b][0]})" for a in component for b in component if b in graph.get(a, {})]
        report.append(" | ".join(edges))
    assert report == []


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}) == [["a", "b", "c"]]
