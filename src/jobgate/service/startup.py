"""Definitions loaded at start-up: seed 004's ``--scenarios`` folder, as ``jobgate.yaml``'s
``definitions:`` folders.

``jobgate serve`` and ``jobgate scheduler`` read every definition and scenario file in those
folders once, when they start, and store them through the same door as ``jobgate apply``: all or
nothing, the same content makes no new version, a changed file makes a new version that runs only
once an admin approved it. Loading is not approving (seed 004, "Scenario approval"), so nothing
here approves anything; and a file edited after start-up changes nothing until the next start.

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
    def unchanged(self) -> int:
        return len(self.results) - self.created - len(self.reverted)

    def summary(self) -> str:
        """The one log line of a start-up load (a restart that made an earlier version current
        again says which: a review's said 'unchanged' while one of its schedules switched on)."""
        where = ", ".join(str(f) for f in self.folders) or "no folder"
        again = "".join(f", {r.job_definition_id} v{r.version} current again" for r in self.reverted)
        return (
            f"definitions loaded at start-up from {where}: {len(self.results)} "
            f"({self.created} new versions awaiting approval{again}, {self.unchanged} unchanged)"
        )


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
    results = engine.apply_definitions(loaded, applied_by=actor) if loaded else []
    return StartupLoad(folders, tuple(results))
