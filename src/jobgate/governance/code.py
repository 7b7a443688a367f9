"""Reading code identities off this host: what a definition would execute here, digested.

``CodeReader.identity(definition)`` names the parts a definition's approval binds
(``jobgate.core.code_identity``):

- a Python handler ``module:function``: every file of the handler's top-level package (or the
  module's own file), as the import system would find it here, plus ``handler`` itself;
  with an explicit ``code:`` list in the definition, the packages (``package:NAME``), installed
  distributions (``distribution:NAME``, every file they installed) and paths (a file or a folder,
  relative to the configuration's folder) it names, instead of the handler's package — and the
  handler's own module file besides (``module:NAME``) when none of them holds it;
- a command runner: the resolved binary's bytes, the argument template and the runner's
  environment (the body is part of the definition's content, so its content digest covers it);
- an HTTP target: its URL and method (the endpoint's code is not on this host).

A Python handler already imported by a process runs the code it was imported from, not what is
on disk now. A worker asks with ``as_loaded``: each part of a Python handler is remembered as the
process first saw it (before the handler was imported), and a part whose files changed since is
reported with both values, matching no approval: a worker whose code changed under it refuses to
run until it is restarted on the approved code (or the change is approved and it restarts).

What is not covered: third-party libraries a handler imports are pinned by the deployment (list
them under ``code:`` to bind them), and the Python interpreter and jobgate itself only through
the files named above. Reading is cached by file identity (inode, size, modification and change
times), so checking the identity before every attempt costs a ``stat`` per file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import json
import os
import stat
import sys
import threading
import types
import zipimport
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jobgate.core.canonical import canonical_json
from jobgate.core.code_identity import ENVIRONMENT, CodeIdentity, environment_part, url_parts
from jobgate.core.errors import ValidationError
from jobgate.core.models import JobDefinition
from jobgate.registry import Registries, RunnerSpec

_SKIP_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIP_SUFFIXES = (".pyc", ".pyo")  # a distribution's compiled files: written on install, not shipped
MAX_FILES = 20_000  # a "package" larger than this is a mistake (a home folder on sys.path)


class CodeUnreadable(ValidationError):
    """The code a definition names cannot be read on this host (not installed, not found)."""

    code = "code_unreadable"


@dataclass(frozen=True)
class _Seen:
    key: tuple[int, int, int, int]
    sha256: str


class FileDigests:
    """SHA-256 of files, re-read only when a file's identity (inode, size, mtime, ctime) moves."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextlib.contextmanager
    def recording(self) -> Iterator[dict[str, str]]:
        """Every digest this thread reads in the block, by path: the files a code part was
        computed from, so that an import can later be held to those very bytes."""
        read: dict[str, str] = {}
        outer = getattr(self._local, "read", None)
        self._local.read = read
        try:
            yield read
        finally:
            self._local.read = outer
            if outer is not None:
                outer.update(read)

    def _noted(self, path: str, value: str) -> str:
        read = getattr(self._local, "read", None)
        if read is not None:
            read[path] = value
        return value

    def sha256(self, path: str) -> str:
        """The file's digest; ``CodeUnreadable`` (a governed refusal, never a crash) when it
        cannot be read or is not a regular file: a named pipe would block the reader forever,
        inside the transaction that asked."""
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise CodeUnreadable(f"{path} is not a regular file", field="code")
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with self._lock:
                seen = self._seen.get(path)
            if seen is not None and seen.key == key:
                return self._noted(path, seen.sha256)
            h = hashlib.sha256()
            # Opened without blocking and checked again: a file swapped for a pipe after the stat.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with open(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise CodeUnreadable(f"{path} is not a regular file", field="code")
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            raise CodeUnreadable(
                f"{path} cannot be read here ({exc.strerror or type(exc).__name__})", field="code"
            ) from None
        value = "sha256:" + h.hexdigest()
        with self._lock:
            self._seen[path] = _Seen(key, value)
        return self._noted(path, value)


def _files_under(root: str) -> Iterator[str]:
    """Every file Python could import from ``root``: through symlinked folders too (the import
    system follows them; each real folder once), and bytecode outside ``__pycache__`` (a module
    shipped as ``.pyc`` alone is loaded from it). ``__pycache__`` is never read by a governed
    import (``_SourceOnlyLoader``), so it is not code.

    Regular files only: a socket, a named pipe, a device or a dangling symlink is nothing an
    import reads (a file that was one and became a dangling link has left the listing, which is
    a change). Every regular file else, hidden ones included: a handler may import from a
    ``.vendor`` folder or read a ``.settings.py`` (an editor's swap file left in a deployed
    package is a change too)."""
    count = 0
    seen: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a symlink loop, or a folder linked twice
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                continue
            count += 1
            if count > MAX_FILES:
                raise CodeUnreadable(f"{root} holds more than {MAX_FILES} files", field="code")
            yield path


FILES = FileDigests()  # one cache per process: every reader and the import hook share it
# A Python part (``package:NAME``) as this process first read it: when the handler's package was
# imported (``note_import``), or else when a worker first asked.
_LOADED: dict[str, str] = {}
_LOADED_LOCK = threading.Lock()
# The files of the parts a worker's gate admitted, as it read them (real path -> digest), the
# first time every part it asked of matched what the process first read: a governed import
# compiles a file only if its bytes are these (``_SourceOnlyLoader``). Without it, a file
# swapped between the gate's check and the handler's first import was digested afresh by the
# loader and ran (found by a review: a module rewritten every 3 ms ran its unapproved version).
_FIRST_FILES: dict[str, str] = {}
_PINNED_PARTS: set[str] = set()


def note_import(module: str) -> None:
    """Remember the files of ``module``'s top-level package, and its own file, as they are
    just before the process imports it: what the process will run, whatever the files say
    later. Called by the Python executor when it resolves a handler; a package this process
    imported earlier by other means is remembered as it is now (the best that can still be
    known)."""
    top = module.split(".")[0]
    reads: tuple[tuple[str, Callable[[], str]], ...] = (
        (f"package:{top}", lambda: package_digest(top)),
        (f"module:{module}", lambda: _module_sha(module)),
    )
    for name, read in reads:
        if name in _LOADED:
            continue
        try:
            value = read()
        except CodeUnreadable:
            continue
        with _LOADED_LOCK:
            _LOADED.setdefault(name, value)


def _module_sha(module: str) -> str:
    """The digest of ``module``'s own file (a ``module:NAME`` part)."""
    return FILES.sha256(_module_file(module))


def _spec(name: str) -> importlib.machinery.ModuleSpec:
    """Where the import system would find package (or module) ``name`` here, found without
    importing anything: ``importlib.util.find_spec("a.b")`` imports ``a`` (runs its
    ``__init__``), and reading an approval must not run code."""
    if sys.modules.get(name) is not None and getattr(sys.modules[name], "__spec__", None) is not None:
        found: importlib.machinery.ModuleSpec | None = sys.modules[name].__spec__
    else:
        found = None
        path: Sequence[str] | None = None
        parts = name.split(".")
        try:
            for i in range(len(parts)):
                prefix = ".".join(parts[: i + 1])
                loaded = sys.modules.get(prefix)
                if loaded is not None and getattr(loaded, "__spec__", None) is not None:
                    found = loaded.__spec__
                else:
                    found = _find_spec_on(prefix, path)
                if found is None:
                    break
                if i < len(parts) - 1:
                    path = list(getattr(loaded, "__path__", None) or found.submodule_search_locations or [])
                    if not path:
                        found = None  # a module, not a package: it holds no submodules
                        break
        except (ImportError, ValueError, KeyError) as exc:
            raise CodeUnreadable(f"cannot find {name!r}: {exc}", field="handler") from None
    if found is None:
        raise CodeUnreadable(f"no module or package {name!r} is importable here", field="handler")
    return found


def _find_spec_on(name: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``name`` as the import system would find it, importing nothing: a top-level
    name through every finder (``find_spec`` imports only a dotted name's parents), a submodule
    by the path-based finders on its parent's ``path``. A namespace portion (a folder with no
    ``__init__.py``) under a parent not imported is found by its folders: the path finder's
    own namespace path would look the parent up in ``sys.modules``."""
    if path is None:
        return importlib.util.find_spec(name)
    try:
        return importlib.machinery.PathFinder.find_spec(name, list(path))
    except KeyError:
        last = name.rpartition(".")[2]
        portions = [os.path.join(p, last) for p in path if os.path.isdir(os.path.join(p, last))]
        if not portions:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = portions
        return spec


def package_digest(name: str) -> str:
    """One digest over every file of package (or module) ``name``, by relative path; a package
    or module imported from a zip archive is the archive's whole content."""
    spec = _spec(name)
    if isinstance(spec.loader, zipimport.zipimporter):
        return "zip:" + FILES.sha256(spec.loader.archive)
    roots = list(spec.submodule_search_locations or [])
    if roots:
        return tree_digest(roots)
    if spec.origin is None or not os.path.isfile(spec.origin):
        if spec.origin in ("built-in", "frozen"):
            return "builtin:" + name  # built into the interpreter: it is the interpreter's code
        raise CodeUnreadable(f"{name!r} is loaded from {spec.origin!r}, not a file this host can digest", field="code")
    return FILES.sha256(spec.origin)


def _module_file(module: str) -> str:
    """The file the import system would load ``module`` from here (a zip archive: the archive)."""
    spec = _spec(module)
    if isinstance(spec.loader, zipimport.zipimporter):
        return str(spec.loader.archive)
    if spec.origin is None or not os.path.isfile(spec.origin):
        raise CodeUnreadable(f"no module file for {module!r} is importable here", field="handler")
    return spec.origin


def _covers(root: str, path: str) -> bool:
    """Whether ``root`` (a file or a folder) is or holds ``path``."""
    root, path = os.path.realpath(root), os.path.realpath(path)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def tree_digest(roots: list[str]) -> str:
    """One digest over the files under ``roots``, each named by its root's place and its path
    relative to it. In the order given: a namespace package's portions in the order the import
    system searches them (``sys.path``'s), which decides whose module an import runs (sorted, a
    reordered path kept the digest an approval bound while another portion's code ran)."""
    listing: list[list[str]] = []
    for i, root in enumerate(roots):
        for path in _files_under(root):
            listing.append([str(i), _relative(path, root), FILES.sha256(path)])
    if not listing:  # nothing read is nothing bound: a digest of no files would match any code
        raise CodeUnreadable(f"no file of {', '.join(sorted(roots))} can be read here", field="code")
    return _digest_of(listing)


def _relative(path: str, root: str) -> str:
    """``os.path.relpath(path, root)`` for a path ``_files_under(root)`` joined onto ``root``:
    a cut of the prefix instead of both made absolute and compared part by part, which was half
    of a package digest's time (a worker reads one at each claim batch's attempt gate)."""
    base = root if root.endswith(os.sep) else root + os.sep
    return path[len(base) :] if path.startswith(base) else os.path.relpath(path, root)


class CodeReader:
    """The code identities of definitions on this host."""

    def __init__(self, registries: Registries, base_dir: Path | None = None) -> None:
        self.registries = registries
        self.base_dir = base_dir or Path.cwd()
        self.files = FILES

    def identity(self, definition: JobDefinition, *, as_loaded: bool = False) -> CodeIdentity:
        """The named parts of what ``definition`` executes here, or ``CodeUnreadable``.

        ``as_loaded``: as this process would run it (a worker): a Python part whose files
        changed since the process first read them names both values, and so matches nothing."""
        spec = definition.executor
        code = definition.content.get("code")
        if spec.kind == "python" and spec.handler:
            if not as_loaded:
                return CodeIdentity(self._python_parts(spec.handler, code))
            with self.files.recording() as read:
                parts = self._python_parts(spec.handler, code)
            return CodeIdentity(self._as_loaded(parts, read))
        if spec.kind == "command" and spec.runner:
            runner = self.registries.runners.get(spec.runner)
            if runner is None:
                raise CodeUnreadable(f"runner {spec.runner!r} is not configured here", field="runner")
            parts = self._runner(runner)
            if code:
                parts.update(self._listed([str(c) for c in code]))
            return CodeIdentity(parts)
        if spec.kind == "http" and spec.target:
            target = self.registries.targets.get(spec.target)
            if target is None or target.http is None:
                raise CodeUnreadable(f"HTTP target {spec.target!r} is not configured here", field="target_engine_meid")
            return CodeIdentity({**url_parts(target.http.url), "method": "POST"})
        raise CodeUnreadable(f"definition has no executable code ({spec.kind})", field="executor")

    def _python_parts(self, handler: str, code: Any) -> dict[str, str]:
        parts = {"handler": handler}
        if code:
            listed = [str(c) for c in code]
            parts.update(self._listed(listed))
            parts.update(self._own_module(handler, listed))
        else:
            top = handler.partition(":")[0].split(".")[0]
            parts[f"package:{top}"] = self._package(top)
            # A handler its package only re-exports from another top-level package is that
            # package's code: bound too, as with a ``code:`` list (found by a review: an edit of
            # the function's own body ran under an approval of the package that imports it).
            parts.update(self._own_module(handler, [f"package:{top}"]))
        return parts

    def _as_loaded(self, parts: dict[str, str], read: Mapping[str, str]) -> dict[str, str]:
        for name in parts:  # what this worker imports of them from now on is what was read
            kind, _, rest = name.partition(":")
            if kind == "package":
                govern(rest, approved=True)
            elif kind == "module":
                govern_module(rest)
            elif kind == "path":
                govern_place(str(self._located(rest)))
            elif kind == "distribution":
                for place in self._roots(name):
                    govern_place(place)
        with _LOADED_LOCK:
            out = {}
            for name, value in parts.items():
                if name == "handler":  # a setting, not files: nothing is loaded from it
                    out[name] = value
                    continue
                first = _LOADED.setdefault(name, value)
                out[name] = value if first == value else f"{first} when loaded, {value} on disk now"
            if out == parts and not _PINNED_PARTS.issuperset(parts):  # every part as first read
                for path, digest in read.items():
                    _FIRST_FILES.setdefault(os.path.realpath(path), digest)
                _PINNED_PARTS.update(parts)
            return out

    # ------------------------------------------------------------------ parts
    def _package(self, name: str) -> str:
        return package_digest(name)

    def _tree(self, roots: list[str]) -> str:
        return tree_digest(roots)

    def _distribution(self, name: str) -> str:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise CodeUnreadable(f"no installed distribution {name!r}", field="code") from None
        listing = [[dist.metadata["Name"] or name, dist.version]]
        for file in sorted(dist.files or [], key=str):
            located = Path(str(file.locate()))
            if located.suffix in _SKIP_SUFFIXES or not located.is_file():
                continue
            listing.append([str(file), self.files.sha256(str(located))])
        if _editable(dist):
            # An editable install's files are a .pth (or a finder) and metadata: its code is the
            # packages it makes importable, digested as package:NAME parts are.
            tops = _top_levels(dist)
            if not tops:
                raise CodeUnreadable(
                    f"{name!r} is installed editable and names no top-level package: list its packages as package:NAME",
                    field="code",
                )
            listing += [[f"package:{top}", package_digest(top)] for top in tops]
        return _digest_of(listing)

    def _located(self, raw: str) -> Path:
        """A ``code:`` path, relative to the configuration's folder unless absolute."""
        path = Path(raw)
        return path if path.is_absolute() else self.base_dir / path

    def _path(self, raw: str) -> str:
        path = self._located(raw)
        if path.is_dir():
            return self._tree([str(path)])
        if path.is_file():
            return self.files.sha256(str(path))
        raise CodeUnreadable(f"code path {raw!r} is neither a file nor a folder here", field="code")

    def _listed(self, entries: list[str]) -> dict[str, str]:
        parts: dict[str, str] = {}
        for entry in entries:
            kind, sep, name = entry.partition(":")
            if sep and kind == "package":
                parts[entry] = self._package(name)
                for parent in _parents(name):  # importing a.b runs a/__init__.py first
                    origin = _spec(parent).origin
                    if origin is not None and os.path.isfile(origin):  # a namespace package runs nothing
                        parts.setdefault(f"module:{parent}", FILES.sha256(origin))
            elif sep and kind == "distribution":
                parts[entry] = self._distribution(name)
            else:
                parts[f"path:{entry}"] = self._path(entry)
        return parts

    def _own_module(self, handler: str, listed: list[str]) -> dict[str, str]:
        """The handler's own module file and the ``__init__`` of each package above it (importing
        ``a.b.h`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first), and the same for the
        module that defines the function when the handler's module only re-exports it
        (``handler_source.reexported_from``), each unless a ``code:`` entry already covers it: a
        list narrows what an approval binds (a sub-package rather than the whole top-level
        package), never to the point of leaving out the handler's own code or code its import
        runs."""
        from jobgate.governance.handler_source import reexported_from  # it reads sources through this module

        module, _, attrs = handler.partition(":")
        roots = [root for entry in listed for root in self._roots(entry)]
        out: dict[str, str] = {}
        for own in [module, *reexported_from(module, attrs.partition(".")[0])]:
            for parent in _parents(own):
                origin = _spec(parent).origin
                if origin is None or not os.path.isfile(origin):  # a namespace package runs nothing
                    continue
                if not any(_covers(root, origin) for root in roots):
                    out[f"module:{parent}"] = FILES.sha256(origin)
            if not any(_covers(root, _module_file(own)) for root in roots):
                out[f"module:{own}"] = _module_sha(own)
        return out

    def _roots(self, entry: str) -> list[str]:
        """The files and folders a ``code:`` entry digests (``_listed`` read them already)."""
        kind, sep, name = entry.partition(":")
        if sep and kind == "package":
            found = _spec(name)
            return list(found.submodule_search_locations or []) or ([found.origin] if found.origin else [])
        if sep and kind == "distribution":
            try:
                dist = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                return []
            return [str(file.locate()) for file in dist.files or []]
        return [str(self._located(entry))]

    def _runner(self, runner: RunnerSpec) -> dict[str, str]:
        resolved = runner.located_binary()
        if resolved is None:
            raise CodeUnreadable(f"runner {runner.name!r}: binary {runner.binary!r} is not found here", field="binary")
        real = os.path.realpath(resolved)
        return {
            "runner": runner.name,
            "binary": real,
            "binary_sha256": self.files.sha256(real),
            "args": canonical_json(list(runner.args)).decode(),
            ENVIRONMENT: environment_part(dict(runner.env)),
        }


def _parents(name: str) -> list[str]:
    """The packages a dotted name's import runs first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _editable(dist: importlib.metadata.Distribution) -> bool:
    """Installed with ``pip install -e`` (PEP 610's ``direct_url.json``)."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(isinstance(info, dict) and isinstance(info.get("dir_info"), dict) and info["dir_info"].get("editable"))


def _top_levels(dist: importlib.metadata.Distribution) -> list[str]:
    """The top-level packages a distribution provides: its ``top_level.txt``, else what the
    installed metadata maps to it."""
    listed = [line.strip() for line in (dist.read_text("top_level.txt") or "").splitlines() if line.strip()]
    if listed:
        return sorted(set(listed))
    name = (dist.metadata["Name"] or "").lower()
    mapping = importlib.metadata.packages_distributions()
    return sorted(top for top, names in mapping.items() if name in {n.lower() for n in names})


def _digest_of(listing: list[list[str]]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(listing)).hexdigest()


__all__ = [
    "CodeChangedOnImport",
    "CodeReader",
    "CodeUnreadable",
    "FileDigests",
    "locate_handler",
    "note_import",
    "package_digest",
]


# ---------------------------------------------------------------------------- governed imports
# Top-level packages whose code an approval binds and this process runs: every module of them
# imported from now on is compiled from its source, and only while the package's files are
# those the process first read (``_LOADED``).
_GOVERNED: set[str] = set()
# Single modules, by name: jobgate's own handlers, and a handler's module (and the packages above
# it) that an approval with a ``code:`` list binds one by one.
_GOVERNED_MODULES: set[str] = set()
# Files and folders a ``code:`` path or distribution names (real paths): a module loaded from one
# of them is compiled from its source too, whatever name it is imported under.
_GOVERNED_FILES: set[str] = set()
_GOVERNED_FOLDERS: set[str] = set()
# The package parts an approval binds, by top-level package (``a``, or ``a.sub`` for a narrowed
# ``code:`` list): what an import compares with the files first read. Without any, the whole
# top-level package the handler was imported from.
_APPROVED_PACKAGES: dict[str, set[str]] = {}
_GOVERNED_LOCK = threading.Lock()


class ChangedCode(ImportError):
    """A governed module's files changed since this process first read its package."""


class CodeChangedOnImport(ValidationError):
    """A handler's code changed between the gate that admitted its attempt and its import (or a
    package part another approval binds changed since this process read it): nothing of it ran.
    Like a handler that does not import here, the attempt is handed back (not counted) and this
    worker claims no more runs of the definition version until it is restarted on approved code;
    handing it back to be claimed again by the same process made a loop (found by a review)."""

    code = "code_changed"


def _check_unchanged(top: str, fullname: str) -> None:
    """Refuse to import ``fullname`` (a module of ``top``) when the files an approval binds of
    the package part holding it are no longer those first read: an edit made under a running
    attempt must not run in it (the next attempt is held by the gate). An edit outside the
    approved parts that hold the module (another definition's narrowed part, or files no
    approval binds) is not one."""
    approved = _APPROVED_PACKAGES.get(top)
    parts = {top} if not approved else {p for p in approved if fullname == p or fullname.startswith(p + ".")}
    for name in sorted(parts):
        first = _LOADED.get(f"package:{name}")
        if first is None:
            continue
        try:
            now = package_digest(name)
        except CodeUnreadable as exc:
            raise ChangedCode(f"package {name!r} can no longer be read here: {exc.message}") from None
        if now != first:
            raise ChangedCode(
                f"the files of package {name!r} changed since this process first read them "
                "(what an approval bound): restart the worker on approved code"
            )


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the module from the very bytes it read, never from a cached ``.pyc`` (Python
    trusts one while the source keeps its modification second and size, and a forged one the
    digests never read would run), writes no bytecode, and refuses bytes that are not the
    file the package digest counted."""

    def path_stats(self, path: str) -> Mapping[str, Any]:
        raise OSError("governed modules are compiled from source")  # SourceLoader then ignores any .pyc

    def get_data(self, path: str) -> bytes:
        data = super().get_data(path)
        if path == self.path:
            # The bytes a gate admitted (``_FIRST_FILES``); a file no gate read yet, as the
            # package digest read it (by file identity).
            counted = _FIRST_FILES.get(os.path.realpath(path)) or FILES.sha256(path)
            if "sha256:" + hashlib.sha256(data).hexdigest() != counted:
                raise ChangedCode(f"{path} is not the file this process admitted: it changed since it was read")
        return data


class _GovernedFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a module of a governed package, found as the finders after
    this one would find it (a plugin's own verified loader stays its own), gets
    ``_SourceOnlyLoader`` when it would have been loaded from a source file."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        governed = top in _GOVERNED or fullname in _GOVERNED_MODULES
        if not governed and not (_GOVERNED_FILES or _GOVERNED_FOLDERS):
            return None
        if top in _GOVERNED and ("." in fullname or fullname in sys.modules):  # a submodule, or a reload
            _check_unchanged(top, fullname)
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        if governed or _in_governed_place(spec.loader.path):
            spec.loader = _SourceOnlyLoader(fullname, spec.loader.path)
        return spec


_FINDER = _GovernedFinder()


def govern(module: str, *, approved: bool = False) -> None:
    """Import ``module``'s top-level package, from now on in this process, only as its source
    (see ``_GovernedFinder``). Its files as they are now are what the process runs (``note_import``).
    ``approved``: ``module`` is a package part an approval binds (``package:NAME``), which
    later imports compare with the files first read.

    jobgate's own package is the process itself (the worker imports its own modules as it goes,
    and an upgrade in place must not make that fail): of it, only the handler's module is
    compiled from source, when this process first imports it."""
    top = module.split(".")[0]
    with _GOVERNED_LOCK:
        _install_finder()
        if top in OWN_MODULES:
            _GOVERNED_MODULES.add(module)
            return
        _GOVERNED.add(top)
        if approved:
            _APPROVED_PACKAGES.setdefault(top, set()).add(module)


def govern_module(module: str) -> None:
    """Compile ``module`` (one module an approval binds by its file) from its source."""
    with _GOVERNED_LOCK:
        _install_finder()
        _GOVERNED_MODULES.add(module)


def govern_place(place: str) -> None:
    """Compile every module loaded from ``place`` (a file or a folder a ``code:`` path or
    distribution names) from its source."""
    real = os.path.realpath(place)
    with _GOVERNED_LOCK:
        _install_finder()
        (_GOVERNED_FOLDERS if os.path.isdir(real) else _GOVERNED_FILES).add(real)


def _install_finder() -> None:
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def _in_governed_place(origin: str) -> bool:
    real = os.path.realpath(origin)
    return real in _GOVERNED_FILES or any(real.startswith(folder + os.sep) for folder in _GOVERNED_FOLDERS)


def _handler_parts(handler: str) -> tuple[str, str, list[str]]:
    module_name, sep, attr_path = handler.partition(":")
    attrs = attr_path.split(".")
    if not sep or not module_name.strip() or not all(a.isidentifier() for a in attrs):
        raise ValidationError(f"{handler!r} is not of the form 'module:function'", field="handler")
    return module_name, attr_path, attrs


def locate_handler(handler: str) -> None:
    """Whether ``handler``'s module can be imported here, found without running any of it
    (``CodeUnreadable``, field ``handler``, if not); from now on this process imports its
    package only from the files read now. A worker asks this of every definition it may run
    when it starts: importing them would run the module-level code of definitions no one
    approved (or whose code changed), and would import other handlers' packages before they
    are governed. The handler itself is imported by its first attempt, after the gates."""
    module_name, _, _ = _handler_parts(handler)
    note_import(module_name)
    govern(module_name)
    _spec(module_name)


def module_source(module: str) -> str | None:
    """The source file ``module`` would be compiled from here, found without importing it; None
    for a module with no source file of its own (compiled, built in, in an archive)."""
    origin = _spec(module).origin
    return origin if origin is not None and origin.endswith(".py") and os.path.isfile(origin) else None


def resolve_handler(handler: str) -> Callable[..., object]:
    """Import ``module:attr[.attr...]`` and return the callable, or raise ``ValidationError``.

    Resolution happens when the executor is built, so a typo in a definition is reported as a
    refused definition rather than as a failed attempt that retries forever.
    """
    module_name, attr_path, attrs = _handler_parts(handler)
    note_import(module_name)  # the code this process is about to run, for the code identity check
    govern(module_name)  # its modules compiled from those files, now and at every later import
    try:
        target: Any = importlib.import_module(module_name)
    except ChangedCode as exc:
        raise CodeChangedOnImport(f"{handler!r} was not imported: {exc}", field="handler") from None
    except Exception as exc:  # an import can fail in any way the module's top level can
        raise ValidationError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}", field="handler"
        ) from None
    for attr in attrs:
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise ValidationError(
                f"{handler!r}: {module_name!r} has no attribute {attr_path!r}", field="handler"
            ) from None
    if not callable(target):
        raise ValidationError(f"{handler!r} is not callable", field="handler")
    if inspect.iscoroutinefunction(target):
        raise ValidationError(f"{handler!r} is a coroutine function; handlers are synchronous", field="handler")
    fn: Callable[..., object] = target
    return fn


# ---------------------------------------------------------------------------- jobgate's own jobs
F = TypeVar("F", bound=Callable[..., Any])
_HOST_MARK = "__jobgate_host_job__"
OWN_MODULES = ("jobgate",)


def host_job(fn: F) -> F:
    """Mark a handler as one that takes ``(ctx, host)``."""
    setattr(fn, _HOST_MARK, True)
    return fn


def wants_host(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, _HOST_MARK, False))


def check_trusted(handler: str, fn: Callable[..., Any], trusted: Sequence[str]) -> bool:
    """Whether ``fn`` (named ``handler``) is given the host; a handler that asks for it from a
    module neither jobgate's nor trusted is refused (``ValidationError``)."""
    if not wants_host(fn):
        return False
    check_host_allowed(handler, trusted)
    return True


def check_host_allowed(handler: str, trusted: Sequence[str]) -> None:
    """Refuse a handler that asks for the host from a module neither jobgate's nor trusted."""
    module = handler.partition(":")[0]
    if any(module == t or module.startswith(t + ".") for t in (*OWN_MODULES, *trusted)):
        return
    raise ValidationError(
        f"{handler!r} asks for jobgate's host (store, clock, configuration), and its module is not trusted: "
        "list it under worker.trusted_handlers to allow it",
        field="handler",
    )
