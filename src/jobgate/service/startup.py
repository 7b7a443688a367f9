"""Definitions loaded at start-up: seed 004's ``--scenarios`` folder, as ``jobgate.yaml``'s
``definitions:`` folders.

``jobgate serve`` and ``jobgate scheduler`` read every definition and scenario file in those
folders once, when they start, and store them through the same door as ``jobgate apply``: all or
nothing, the same content makes no new version, a changed file makes a new version that runs only
once an admin approved it, and an older version's content leaves the current version as it is
(a host restarting with a stale folder does not roll the cluster back; ``jobgate apply`` does).
Loading is not approving (seed 004, "Scenario approval"), so nothing here approves anything; and
a file edited after start-up changes nothing until the next start.

A folder written in ``definitions:`` that does not exist, or one invalid file (a scenario naming
a runner this host does not register, say), refuses the start with the file and the field, and
nothing is stored: a process must not serve a half-loaded folder. The default ``definitions``
folder may be absent (nothing to load). Two processes starting at once against one database store
each version once: ``Definitions.apply`` serialises applies (PostgreSQL: an exclusive advisory
transaction lock taken first; SQLite: its single writer) and stores no version for a digest the
definition already has.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path

from jobgate.core.errors import ValidationError
from jobgate.core.models import DEFAULT_TENANT
from jobgate.definitions.loader import load_definitions
from jobgate.service import approvals
from jobgate.service.definitions import ApplyResult
from jobgate.service.engine import Engine


@dataclass(frozen=True)
class StartupLoad:
    """What a start-up load stored: per definition, a new version, an earlier version current
    again (its content was in the folder), or unchanged."""

    folders: tuple[Path, ...]
    results: tuple[ApplyResult, ...]

    @property
    def created(self) -> int:
        return sum(1 for r in self.results if r.created)

    @property
    def reverted(self) -> list[ApplyResult]:
        return [r for r in self.results if r.reverted]

    @property
    def stale(self) -> list[ApplyResult]:
        """Definitions whose file holds an older version's content: the current version stayed."""
        return [r for r in self.results if r.older is not None]

    @property
    def unchanged(self) -> int:
        return len(self.results) - self.created - len(self.reverted) - len(self.stale)

    def summary(self) -> str:
        """The one log line of a start-up load."""
        where = ", ".join(str(f) for f in self.folders) or "no folder"
        older = f", {len(self.stale)} older than the current version (kept)" if self.stale else ""
        return (
            f"definitions loaded at start-up from {where}: {len(self.results)} "
            f"({self.created} new versions awaiting approval, {self.unchanged} unchanged{older})"
        )

    def warnings(self) -> list[str]:
        """One line per definition whose file is an older version's content: a host with a stale
        folder does not roll the cluster back when it restarts (found by a review: it made v1
        current again over v3, approved code and all); ``jobgate apply`` rolls back on purpose."""
        return [
            f"definition {r.job_definition_id}: {r.source or 'its file'} holds version {r.older}'s content;"
            f" version {r.version} stays current (apply the file with jobgate apply to roll back to it)"
            for r in self.stale
        ]


def folders_to_load(configured: tuple[Path, ...], *, explicit: bool, source: str) -> tuple[Path, ...]:
    """The folders a start reads. Written in the configuration, each must exist (a typo must not
    start a process that silently serves nothing); the default one is skipped when absent."""
    for folder in configured:
        if explicit and not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise ValidationError(f"definitions folder {folder} {what}", field="definitions", source=source)
    return tuple(f for f in configured if f.is_dir())


def load_at_startup(engine: Engine, *, applied_by: str | None = None) -> StartupLoad:
    """Load and store every definition of the configured folders, all or nothing.

    ``applied_by`` defaults to the OS user running the process, as ``jobgate apply`` without
    ``--by``: four eyes then keeps that account from approving what it loaded."""
    config = engine.config
    folders = folders_to_load(config.definitions, explicit=config.definitions_configured, source=config.source)
    actor = applied_by or getpass.getuser()
    try:
        loaded = load_definitions(folders, config) if folders else []
    except ValidationError as exc:
        approvals.record_load_refusal(engine, DEFAULT_TENANT, exc, actor=actor)
        raise
    results = engine.apply_definitions(loaded, applied_by=actor, revert=False) if loaded else []
    return StartupLoad(folders, tuple(results))
