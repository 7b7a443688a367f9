"""Registries from configuration: runners (commands) and targets (engines by MEID).

Binary paths, argument shapes and URLs live here, in the operator's configuration, never in
a definition or a request: a definition names a runner or a target, configuration says what
that name means on this host (seed 004 "Runners"; seed 000 §55 "verify target compatibility").
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import timedelta

# sysexits.h codes that say "this input will never work": EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_CONFIG.
DEFAULT_NON_RETRYABLE_EXIT_CODES = frozenset({64, 65, 66, 78})


@dataclass(frozen=True)
class RunnerSpec:
    """A named command: ``binary`` plus ``args`` templates (``{{param}}``, ``{{tmpfile}}``, ``{{workdir}}``).

    Exit code 0 is success; a code in ``non_retryable_exit_codes`` fails the run for good;
    any other code, or death by a signal, is a retryable failure. ``artifact`` (a template,
    relative to the run's work directory) names the output file whose path, SHA-256 and size
    are recorded after a successful attempt.
    """

    name: str
    binary: str
    args: tuple[str, ...] = ()
    non_retryable_exit_codes: frozenset[int] = DEFAULT_NON_RETRYABLE_EXIT_CODES
    stop_grace: timedelta = timedelta(seconds=10)
    artifact: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    # The binary executes the definition's body as code (``python3 {{tmpfile}}``): approving such
    # a definition approves a program, so it always needs a second person (four eyes).
    executes_body: bool = True

    def child_path(self) -> str | None:
        """The ``PATH`` its process gets: the runner's own ``env`` first, else this process's."""
        return dict(self.env).get("PATH", os.environ.get("PATH"))

    def located_binary(self) -> str | None:
        """The file its process executes: a bare name looked up on ``child_path()`` (the PATH
        the process itself gets, so the approval's digest and the attempt name one file), a path
        made absolute against this process's folder; None when there is no such file."""
        if "/" not in self.binary:
            return shutil.which(self.binary, path=self.child_path())
        resolved = os.path.abspath(self.binary)
        return resolved if os.path.isfile(resolved) else None


@dataclass(frozen=True)
class HttpTargetSpec:
    """An HTTP endpoint a run's dispatch payload is POSTed to; 2xx success, 4xx final, 5xx retried."""

    url: str
    timeout: timedelta = timedelta(seconds=30)
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TargetSpec:
    """A target engine by MEID with the CMI versions it is compatible with, and how to reach it:
    exactly one of ``handler`` (``module:function``), ``runner`` (a runners-registry name) or ``http``."""

    meid: str
    cmis: tuple[str, ...] = ()
    handler: str | None = None
    runner: str | None = None
    http: HttpTargetSpec | None = None
    description: str = ""


@dataclass(frozen=True)
class Registries:
    runners: dict[str, RunnerSpec] = field(default_factory=dict)
    targets: dict[str, TargetSpec] = field(default_factory=dict)
