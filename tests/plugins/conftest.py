from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from plugin_kit import Kit, forgetting_plugins, make_kit


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with forgetting_plugins():
        yield make_kit(tmp_path)
