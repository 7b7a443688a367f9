"""Planning is pure like the core: no clock, no randomness, no I/O; cronsim is its one library."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from tests.core.test_purity import FORBIDDEN_CALLS, FORBIDDEN_MODULES, imported_modules

import jobgate.scheduling

MODULES = sorted(Path(jobgate.scheduling.__file__).parent.glob("*.py"))
ALLOWED_LIBRARIES = {"cronsim"}


def test_planning_modules_found() -> None:
    assert {p.stem for p in MODULES} >= {"cron", "magic", "model", "plan"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_planning_imports_only_the_core_the_pure_stdlib_and_cronsim(path: Path) -> None:
    for name in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
        top = name.split(".")[0]
        if top == "jobgate":
            assert name.startswith(("jobgate.core", "jobgate.scheduling")), f"{path.name} imports {name}"
        else:
            assert top == "__future__" or top in sys.stdlib_module_names or top in ALLOWED_LIBRARIES, name
            assert top not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_planning_never_reads_the_clock(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"
