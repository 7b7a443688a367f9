"""The governance guide's table (``docs/guide/governance.md``, moved there from the README) names
tests that exist: every path it lists is a path of the gate matrix, and every named test function
is defined where it says."""

from __future__ import annotations

import re
from pathlib import Path

from tests.service.test_gate_matrix import GATES, PATHS

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "governance.md"
TABLE_START = "| path | approval | safe mode | trust gate | policy | signature | code identity | four eyes |"


def table_rows() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(TABLE_START)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def defined_tests() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    return names


def test_every_matrix_cell_names_a_path_and_a_gate_of_the_matrix() -> None:
    cells = [c for row in table_rows() for c in re.findall(r"`([^`]+)`", row)]
    matrix = [c for c in cells if c.endswith(("-…", "-approval")) and "::" not in c and not c.startswith("test_")]
    assert matrix, "no matrix cell found in the governance guide's table"
    for cell in matrix:
        path = cell.rsplit("-", 1)[0]
        assert path in PATHS or path == "…", f"the governance guide names a path the gate matrix does not have: {cell}"
    for gate in ("approval", "safe_mode", "trust_gate", "policy", "signature"):
        assert gate in GATES
    listed = {re.sub(r"`", "", row.split("|")[1]).strip() for row in table_rows()}
    assert len(listed) >= 15


def test_every_test_the_table_names_exists() -> None:
    known = defined_tests()
    for row in table_rows():
        for name in re.findall(r"(test_\w+)(?![\w.])", row):
            if name in ("test_gate_matrix",):
                continue
            assert name in known, f"the governance guide's table names {name}, which no test defines"
