"""Shared fixtures for definition and configuration loading tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import jobgate
from jobgate.config import JobgateConfig, load_config

DEMO_DIR = Path(jobgate.__file__).parent / "demo"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    """The folder ``jobgate init`` copies: the demo configuration and definitions."""
    return DEMO_DIR


@pytest.fixture(scope="session")
def demo_config() -> JobgateConfig:
    return load_config(DEMO_DIR / "jobgate.yaml")


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path/name`` (creating folders) and return the path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
