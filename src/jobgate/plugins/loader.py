"""Importing admitted plugins from exactly the bytes that were verified.

A ``MetaPathFinder`` placed first on ``sys.meta_path`` answers for every top-level package a
plugin claims: an admitted plugin's modules are compiled from the verified source held in memory
(no second read of the disk, no bytecode cache), so a file replaced after admission is not what
runs; a module name inside an admitted package that was not among the verified files, and any
module of a discovered plugin that was not admitted, is an ``ImportError`` naming the plugin —
no other finder gets the chance to load it from disk. Extension modules (``.so``) are therefore
never loaded from a plugin: plugins are pure Python.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from jobgate.plugins.bundle import PluginSource, SignedFile


@dataclass(frozen=True)
class _Module:
    origin: str
    source: bytes
    package: bool


def _modules(source: PluginSource, files: Sequence[SignedFile]) -> dict[str, _Module]:
    """Module name -> verified source, for the ``.py`` files of one plugin."""
    out: dict[str, _Module] = {}
    for f in files:
        if not f.path.endswith(".py"):
            continue
        if source.single:
            out[source.package] = _Module(str(source.root), f.data, False)
            continue
        parts = f.path[: -len(".py")].split("/")
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        if not all(p.isidentifier() for p in parts):
            continue  # not importable by any name: carried (and verified), never loaded
        name = ".".join([source.package, *parts])
        out[name] = _Module(str(source.root / f.path), f.data, package)
    return out


class VerifiedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finder and loader for the plugin packages; every other name is left to Python."""

    def __init__(self) -> None:
        self._modules: dict[str, _Module] = {}
        self._admitted: set[str] = set()
        self._blocked: dict[str, str] = {}  # package -> why it may not be imported
        self._lock = threading.Lock()

    def admit(self, source: PluginSource, files: Sequence[SignedFile]) -> None:
        with self._lock:
            self._modules.update(_modules(source, files))
            self._admitted.add(source.package)
            self._blocked.pop(source.package, None)

    def block(self, package: str, reason: str) -> None:
        """Refuse imports of ``package`` from now on (one already imported is past stopping, and
        blocking its submodules would only break whoever imported it)."""
        with self._lock:
            if package not in self._admitted and package not in sys.modules:
                self._blocked[package] = reason

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        with self._lock:
            if top in self._blocked:
                raise ImportError(f"plugin package {top!r} is not admitted: {self._blocked[top]}", name=fullname)
            if top not in self._admitted:
                return None
            module = self._modules.get(fullname)
        if module is None:
            raise ImportError(f"{fullname!r} is not one of the verified files of plugin package {top!r}", name=fullname)
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=module.origin, is_package=module.package)
        spec.has_location = True
        if module.package:
            spec.submodule_search_locations = [str(Path(module.origin).parent)]
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        with self._lock:
            found = self._modules[module.__name__]
        code = compile(found.source, found.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # the verified source of an admitted plugin


_FINDER: VerifiedFinder | None = None
_INSTALL_LOCK = threading.Lock()


def finder() -> VerifiedFinder:
    """The process's finder, installed first on ``sys.meta_path`` on first use."""
    global _FINDER
    with _INSTALL_LOCK:
        if _FINDER is None:
            _FINDER = VerifiedFinder()
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        return _FINDER


def uninstall() -> None:
    """Remove the finder and forget what it admitted (tests; a process admits once)."""
    global _FINDER
    with _INSTALL_LOCK:
        if _FINDER is not None and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        _FINDER = None
