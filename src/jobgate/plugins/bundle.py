"""A plugin's files on disk, and their detached Ed25519 signatures.

Where plugins are found (never by importing them): a folder ``<plugins.directory>/<name>/`` that
is a Python package (the plugin is named after it), or a distribution's entry point in the group
``jobgate.plugins`` (``name = package``), whose package is located with ``find_spec`` — for a
top-level name that executes nothing.

What is signed: every file of the plugin's package tree (``.py`` modules, and any other file it
carries), except ``__pycache__`` (bytecode is never used: modules are compiled from the verified
source) and the signatures themselves. Each file ``F`` has a detached signature ``F.sig``, JSON
``{"key_id": …, "value": base64}`` over the message ``jobgate-plugin-file:v1 <plugin>/<path>
sha256:<hex>``: the plugin's name and the file's path inside it are part of what is signed, so a
signed file cannot be moved into another plugin or renamed into another module. A file without a
signature, with one that does not match its bytes, or one by a key that is not a trust root is
refused, naming the plugin and the file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.governance import signing

ENTRY_POINT_GROUP = "jobgate.plugins"
SIGNATURE_SUFFIX = ".sig"
_SKIP_DIRS = frozenset({"__pycache__"})
MAX_FILES = 2_000  # a plugin larger than this is a mistake (a whole environment in the folder)


class PluginRefused(ConfigurationError):
    """A plugin failed admission; the message names the plugin and, where one is to blame, the file."""

    code = "plugin_refused"

    def __init__(self, plugin: str, message: str, *, file: str | None = None) -> None:
        where = f"plugin {plugin!r}" + (f", file {file!r}" if file else "")
        super().__init__(f"{where}: {message}", field="plugins")
        self.plugin = plugin
        self.file = file


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin's package is: ``root`` is its folder (``single`` False) or its one module file."""

    name: str
    package: str  # the importable top-level name handlers use (``package.module:function``)
    origin: str  # "directory" or "entry-point"
    root: Path
    single: bool = False


@dataclass(frozen=True)
class SignedFile:
    path: str  # relative to the package root, with ``/``
    data: bytes
    key_id: str | None  # None: admitted unsigned (plugins.allow_unsigned)


def file_message(plugin: str, relpath: str, data: bytes) -> str:
    """What a file's signature covers: the plugin, the path inside it and the bytes' digest."""
    return f"jobgate-plugin-file:v1 {plugin}/{relpath} sha256:{hashlib.sha256(data).hexdigest()}"


def claimable(package: str) -> bool:
    """Whether a plugin may claim ``package``: never jobgate's own nor the standard library's
    (a plugin found under such a name would otherwise shadow or block them)."""
    return package != "jobgate" and package not in sys.stdlib_module_names


def discover(directory: Path | None) -> dict[str, PluginSource]:
    """Every plugin this host could run, by name: the directory's packages, then entry points
    (a directory plugin wins a name clash: it is the operator's own placement)."""
    found: dict[str, PluginSource] = {}
    if directory is not None and directory.is_dir():
        for entry in sorted(directory.iterdir()):
            is_package = entry.is_dir() and (entry / "__init__.py").is_file() and entry.name.isidentifier()
            if is_package and claimable(entry.name):
                found[entry.name] = PluginSource(entry.name, entry.name, "directory", entry)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = ep.module.split(".")[0]
        if ep.name in found or not claimable(package):
            continue
        root, single = _locate(package)
        if root is not None:
            found[ep.name] = PluginSource(ep.name, package, "entry-point", root, single)
    return found


@functools.cache
def entry_point_packages() -> frozenset[str]:
    """The top-level packages that installed distributions declare as jobgate plugins (read once
    per process; ``admission.reset`` forgets it)."""
    packages = (ep.module.split(".")[0] for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return frozenset(p for p in packages if claimable(p))


def _locate(package: str) -> tuple[Path | None, bool]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None, False
    if spec is None:
        return None, False
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))), False
    if spec.origin and os.path.isfile(spec.origin):
        return Path(spec.origin), True
    return None, False


def plugin_files(source: PluginSource) -> list[str]:
    """The files the plugin carries (relative paths, sorted), signatures and bytecode left out."""
    if source.single:
        return [source.root.name]
    out: list[str] = []
    for folder, dirs, files in os.walk(source.root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(SIGNATURE_SUFFIX):
                continue
            out.append(Path(os.path.relpath(os.path.join(folder, name), source.root)).as_posix())
            if len(out) > MAX_FILES:
                raise PluginRefused(source.name, f"carries more than {MAX_FILES} files")
    return out


def _path_of(source: PluginSource, relpath: str) -> Path:
    return source.root if source.single else source.root / relpath


def sign_plugin(source: PluginSource, key_id: str, private_b64: str) -> list[str]:
    """Write ``F.sig`` beside every file ``F`` of the plugin; the files signed."""
    files = plugin_files(source)
    for relpath in files:
        path = _path_of(source, relpath)
        signature = signing.sign(file_message(source.name, relpath, path.read_bytes()), key_id, private_b64)
        path.with_name(path.name + SIGNATURE_SUFFIX).write_text(json.dumps(signature) + "\n", encoding="utf-8")
    return files


def verify_plugin(source: PluginSource, roots: Mapping[str, Any], *, allow_unsigned: bool = False) -> list[SignedFile]:
    """Every file of the plugin, read once and verified; the bytes returned are the ones checked
    (the loader imports from them, never from a second read of the disk)."""
    verified: list[SignedFile] = []
    for relpath in plugin_files(source):
        path = _path_of(source, relpath)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PluginRefused(source.name, f"cannot be read ({exc.strerror})", file=relpath) from None
        sig_path = path.with_name(path.name + SIGNATURE_SUFFIX)
        if not sig_path.is_file():
            if allow_unsigned:
                verified.append(SignedFile(relpath, data, None))
                continue
            raise PluginRefused(source.name, f"has no signature ({relpath}{SIGNATURE_SUFFIX})", file=relpath)
        try:
            signature = json.loads(sig_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise PluginRefused(source.name, "its signature file is not JSON {key_id, value}", file=relpath) from None
        try:
            key_id = signing.verify(
                file_message(source.name, relpath, data), signature, roots, what=f"{source.name}/{relpath}"
            )
        except ValidationError as exc:
            raise PluginRefused(source.name, exc.message, file=relpath) from None
        verified.append(SignedFile(relpath, data, key_id))
    if not any(f.path.endswith(".py") for f in verified):
        raise PluginRefused(source.name, "carries no Python module")
    return verified
