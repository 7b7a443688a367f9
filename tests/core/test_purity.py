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
# holds it to the standard library's bytes. And Python's version parsing (packs.version_order):
# pure functions of a string.
PURE_THIRD_PARTY = {"orjson", "packaging", "regex"}
# Pure parts of forbidden packages: taking a URL apart reads nothing (``urllib.request`` would).
PURE_SUBMODULES = {"urllib.parse"}


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
            assert top not in FORBIDDEN_MODULES or name in PURE_SUBMODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_no_clock_or_randomness_calls(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"


# Pure rules that live beside their shells: the workflow planner (a workflow's next decisions
# from its recorded state) and the alert rules (alerts from observed facts). Each may import
# the core and the pure modules named here (document readers and settings: parsing, no I/O),
# and names ``jobgate.config`` only for annotations.
SRC = CORE.parent
PURE_RULES = {
    SRC / "workflows" / "plan.py": ("jobgate.core", "jobgate.workflows.spec"),
    SRC / "health" / "rules.py": ("jobgate.core", "jobgate.documents", "jobgate.config.health"),
}
ANNOTATION_ONLY = ("jobgate.config",)


def _runtime_imports(tree: ast.Module) -> set[str]:
    """The modules imported outside ``if TYPE_CHECKING:`` blocks."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            hidden.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    shown = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in hidden]
    return imported_modules(ast.Module(body=list(shown), type_ignores=[]))


@pytest.mark.parametrize("path", sorted(PURE_RULES), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_pure_rules_outside_the_core_import_no_shell(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed = PURE_RULES[path]
    for name in _runtime_imports(tree):
        top = name.split(".")[0]
        if top == "jobgate":
            assert any(name == a or name.startswith(a + ".") for a in allowed), f"{path.name} imports {name}"
        else:
            assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"
            assert top not in FORBIDDEN_MODULES or name in PURE_SUBMODULES, f"{path.name} imports {name}"
    for name in imported_modules(tree) - _runtime_imports(tree):
        assert name.startswith("jobgate.") and name in ANNOTATION_ONLY, f"{path.name} imports {name} for annotations"


@pytest.mark.parametrize("path", sorted(PURE_RULES), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_pure_rules_outside_the_core_read_no_clock(path: Path) -> None:
    test_no_clock_or_randomness_calls(path)
