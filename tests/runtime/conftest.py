from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Worker threads import handlers by module name, exactly as a deployment would.
ENGINE_TESTS = Path(__file__).resolve().parent.parent / "service"
sys.path.insert(0, str(ENGINE_TESTS))


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the ``marker`` handlers append to (one line per real execution)."""
    path = tmp_path / "marker.txt"
    monkeypatch.setenv("JOBGATE_TEST_MARKER", str(path))
    return path
