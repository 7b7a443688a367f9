"""The files ``jobgate init`` and ``jobgate demo`` ship, and what their shortcut may approve.

Both approve definitions in their caller's name, so the demo runs at once. A review found the
shortcut approving everything in the folder's ``definitions/`` (a user's own jobs too), undoing
an admin's revocation, and — ``init --force`` over a production folder — replacing a
configuration with four eyes on by the demo's, without. So the shortcut covers only:

- the demo's own definition files, byte for byte as shipped: an edited copy, or a file of the
  user's, is applied with ``jobgate apply`` and approved by an admin like any other;
- definitions nobody has decided against: one with a revoked approval, or suspended or retired,
  stays as the admin left it;
- folders without four eyes: a folder whose ``jobgate.yaml`` turns four eyes on is refused.

And a refused ``init --force`` puts back every file it had overwritten; it writes through no
symbolic link, and what it prints is printed once the folder is made.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from jobgate.config import CONFIG_FILENAME
from jobgate.core.errors import ValidationError

DEFINITIONS = "definitions"
# The demo folder's files besides its definitions, as ``init`` copies them.
SHIPPED_FILES = (CONFIG_FILENAME, "demo-runs.yaml", "schedules.yaml")


def demo_package() -> Traversable:
    return resources.files("jobgate") / "demo"


def _shipped_definitions() -> list[Traversable]:
    return sorted((f for f in (demo_package() / DEFINITIONS).iterdir() if f.is_file()), key=lambda f: f.name)


def written_by_init(directory: Path) -> list[Path]:
    """Every file ``init`` (the demo folder) writes: what it overwrites with ``--force``."""
    return [directory / name for name in SHIPPED_FILES] + [
        directory / DEFINITIONS / f.name for f in _shipped_definitions()
    ]


def unchanged_definitions(directory: Path) -> tuple[list[Path], list[str]]:
    """The folder's copies of the demo's definitions that are exactly as shipped (the only
    files the shortcut applies and approves), and the names of the demo's files that are
    edited or missing here (left to ``jobgate apply`` and an admin)."""
    same: list[Path] = []
    other: list[str] = []
    for shipped in _shipped_definitions():
        copy = directory / DEFINITIONS / shipped.name
        if copy.is_file() and not copy.is_symlink() and copy.read_bytes() == shipped.read_bytes():
            same.append(copy)
        else:
            other.append(shipped.name)
    return same, other


def refuse_four_eyes_folder(config_file: Path, consequence: str) -> None:
    """Refuse when ``config_file`` turns ``governance.four_eyes`` on: the demo's shortcut
    approves as one person, and its configuration has four eyes off. A file that cannot be read
    as YAML says nothing either way (``init --force`` replaces it)."""
    try:
        doc = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    governance = doc.get("governance") if isinstance(doc, dict) else None
    if isinstance(governance, dict) and governance.get("four_eyes") is True:
        raise ValidationError(
            f"{config_file} turns governance.four_eyes on (a production folder): {consequence}", field="directory"
        )


def refuse_links(directory: Path, written: Sequence[Path]) -> None:
    """Refuse, before anything is written, a file ``init`` would write that is a symbolic link
    (it would write through it, to a file outside the folder, which a failure could not put
    back: a review's shared configuration was overwritten that way), and a ``definitions`` that
    is not a folder."""
    folder = directory / DEFINITIONS
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ValidationError(f"{folder} is not a folder of this one (a file or a link)", field="directory")
    for path in written:
        if path.is_symlink():
            raise ValidationError(
                f"{path} is a symbolic link: `init --force` writes no file through one", field="directory"
            )


@contextlib.contextmanager
def restored_on_failure(directory: Path, overwritten: Sequence[Path]) -> Iterator[None]:
    """What a failed ``init`` made is taken away again and what it overwrote is put back: a
    database it cannot reach or a definition refused leaves the folder as it was (a review
    found a half-made folder left behind, and local edits lost to a refused ``--force``)."""
    existed = directory.exists()
    before = {p.name for p in directory.iterdir()} if existed else set()
    saved = {p: p.read_bytes() for p in overwritten if p.is_file() and not p.is_symlink()}
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        for made in [p for p in directory.iterdir() if p.name not in before]:
            shutil.rmtree(made) if made.is_dir() and not made.is_symlink() else made.unlink(missing_ok=True)
        for path in overwritten:
            if path in saved:
                path.write_bytes(saved[path])
            elif path.parent.is_dir() and not path.is_symlink():
                path.unlink(missing_ok=True)
        raise
