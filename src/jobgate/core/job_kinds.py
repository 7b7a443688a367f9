"""The job-kind catalogue: every kind of job jobgate knows, and whether it may carry code.

Seed 001 §4.1 / seed 002 "Job Code Boundary": kinds are classified *in source* before any file,
registry entry or database row can make them executable. This table is that source:

- ``built-in``: part of jobgate itself (its release is its evidence), so it needs no plugin
  signature; every built-in is required, and one that cannot be resolved fails startup
  (``require_builtins``) rather than serving a host that cannot run what it accepts;
- ``optional-plugin``: code from outside jobgate, admitted only when enabled in ``jobgate.yaml``
  and signed file by file (``jobgate.plugins.admission``); a plugin's kind is its name;
- ``declarative``: data that names a built-in (a scenario names a configured runner); it can
  never become code;
- ``placeholder``: a kind the seed documents name for services jobgate does not have; listed
  so that enabling one is refused by name instead of being read as an unknown plugin.

Pure data: ``jobgate.plugins.catalog.require_builtins`` resolves the built-ins at startup.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KindClass(enum.Enum):
    BUILT_IN = "built-in"
    OPTIONAL_PLUGIN = "optional-plugin"
    DECLARATIVE = "declarative"
    PLACEHOLDER = "placeholder"


@dataclass(frozen=True)
class JobKind:
    """One kind: ``provider`` is the ``module:attribute`` that implements a built-in."""

    name: str
    kind_class: KindClass
    description: str
    provider: str | None = None


BUILT_INS = (
    JobKind("python", KindClass.BUILT_IN, "a Python handler module:function (handler:)",
            "jobgate.runtime.executors.python:PythonExecutor"),
    JobKind("command", KindClass.BUILT_IN, "a configured command runner (runner:)",
            "jobgate.runtime.executors.command:CommandExecutor"),
    JobKind("http", KindClass.BUILT_IN, "an HTTP target engine by MEID (target_engine_meid:)",
            "jobgate.runtime.executors.http:HttpExecutor"),
    JobKind("workflow", KindClass.BUILT_IN, "a workflow of steps naming definitions (workflow:)",
            "jobgate.workflows.starter:start_workflow_job"),
    JobKind("retention", KindClass.BUILT_IN, "jobgate's own job: retention of finished runs",
            "jobgate.retention:retention_job"),
    JobKind("anchoring", KindClass.BUILT_IN, "jobgate's own job: anchoring the audit chain",
            "jobgate.anchoring:anchor_job"),
    JobKind("replay", KindClass.BUILT_IN, "jobgate's own job: replaying a run's record",
            "jobgate.replay:replay_job"),
)  # fmt: skip
OTHERS = (
    JobKind("scenario", KindClass.DECLARATIVE, "a seed-004 scenario: data naming a configured runner"),
    JobKind("scan", KindClass.PLACEHOLDER, "seed 001's image scan: a service jobgate does not have"),
    JobKind("database-maintenance", KindClass.PLACEHOLDER, "seed 001's maintenance calls to owning services"),
    JobKind("doctor", KindClass.PLACEHOLDER, "seed 002's doctor kind (retired in seed 001)"),
    JobKind("estate-doctor", KindClass.PLACEHOLDER, "seed 001's estate-doctor producer"),
)
CATALOG: dict[str, JobKind] = {k.name: k for k in (*BUILT_INS, *OTHERS)}


def plugin_kind(name: str) -> JobKind:
    """The kind an optional plugin adds: its own name (never one the catalogue holds)."""
    return JobKind(name, KindClass.OPTIONAL_PLUGIN, f"optional plugin {name!r}")
