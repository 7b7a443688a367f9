"""Real plugin packages in temporary folders, signed with real Ed25519 keys, for the plugin tests.

Each plugin writes a marker file when its package is imported, so a test can tell "never
imported" from "imported and then forgotten" without trusting ``sys.modules`` alone.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobgate.governance import signing
from jobgate.plugins import admission
from jobgate.plugins.bundle import PluginSource, sign_plugin

INIT = """\
from pathlib import Path
Path({marker!r}).write_text("imported")
"""
JOBS = """\
def run(ctx):
    return {{"plugin": {name!r}, "answer": 42}}
"""
HELPERS = "VALUE = 1\n"


@dataclass
class Kit:
    directory: Path
    key: signing.KeyPair

    def plugin(self, name: str | None = None) -> tuple[str, Path]:
        """A plugin package (``__init__``, ``jobs``, ``util/helpers``) in the directory: its name, marker."""
        name = name or f"plug_{uuid.uuid4().hex[:8]}"
        root = self.directory / name
        (root / "util").mkdir(parents=True)
        marker = self.directory.parent / f"{name}.imported"
        (root / "__init__.py").write_text(INIT.format(marker=str(marker)))
        (root / "jobs.py").write_text(JOBS.format(name=name))
        (root / "util" / "__init__.py").write_text("")
        (root / "util" / "helpers.py").write_text(HELPERS)
        return name, marker

    def sign(self, name: str, key: signing.KeyPair | None = None) -> None:
        key = key or self.key
        sign_plugin(PluginSource(name, name, "directory", self.directory / name), key.key_id, key.private_b64)

    def sign_at(self, root: Path, name: str) -> None:
        """Sign a package that lives outside the directory (an installed entry-point plugin)."""
        sign_plugin(PluginSource(name, root.name, "entry-point", root), self.key.key_id, self.key.private_b64)

    def section(self, *enabled: str, **extra: Any) -> dict[str, Any]:
        """The ``plugins`` section of a jobgate.yaml enabling ``enabled``, trusting ``self.key``."""
        return {
            "enabled": list(enabled),
            "directory": str(self.directory),
            "trust_roots": {self.key.key_id: self.key.public_b64},
            **extra,
        }


def make_kit(tmp_path: Path) -> Kit:
    directory = tmp_path / "plugins"
    directory.mkdir()
    return Kit(directory, signing.generate("plugin-release"))


@contextmanager
def forgetting_plugins() -> Iterator[None]:
    """Around a test: no admission before, and after it none left, nor any plugin module."""
    admission.reset()
    before = set(sys.modules)
    try:
        yield
    finally:
        admission.reset()
        for name in set(sys.modules) - before:
            if name.startswith("plug_"):
                del sys.modules[name]
