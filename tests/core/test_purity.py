"""The core's promise: no I/O, no clock reads, imports nothing outside ``jobgate.core``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import jobgate.core

CORE = Path(jobgate.core.__file__).parent
MODULES = sorted(CORE.glob("*.py"))
# Standard-library modules that would let the core read the clock, randomness or the outside world.
FORBIDDEN_MODULES = {
    "time",
    "random",
    "secrets",
    "uuid",
    "os",
    "socket",
    "subprocess",
    "threading",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "urllib",
    "http",
    "logging",
    "asyncio",
}
FORBIDDEN_CALLS = {
    "now",
    "utcnow",
    "today",
    "monotonic",
    "perf_counter",
    "time_ns",
    "urandom",
    "uuid4",
    "open",
}


def imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_modules_found() -> None:
    assert {p.stem for p in MODULES} >= {
        "canonical",
        "decide",
        "errors",
        "events",
        "code_identity",
        "governance",
        "idempotency",
        "models",
        "params",
        "policies",
        "policy",
        "ratelimit",
        "retry",
        "runs",
        "settle",
        "states",
        "tokens",
        "trust",
    }


# A pure encoder: no I/O, no clock, no state. canonical.py uses it only where a property test
# holds it to the standard library's bytes.
PURE_THIRD_PARTY = {"orjson"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_imports_stay_inside_core_and_the_pure_stdlib(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for name in imported_modules(tree):
        top = name.split(".")[0]
        if top == "jobgate":
            assert name == "jobgate.core" or name.startswith("jobgate.core."), f"{path.name} imports {name}"
        else:
            pure = top == "__future__" or top in sys.stdlib_module_names or top in PURE_THIRD_PARTY
            assert pure, f"{path.name} imports {name}"
            assert top not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_no_clock_or_randomness_calls(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"
