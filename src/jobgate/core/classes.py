"""Job classes: the seed's twelve, built in, and the ones a deployment declares in ``jobgate.yaml``.

A definition's ``job_class`` names either a built-in class (``JobClass``, seed 000 §7) or a class
declared under ``job_classes:``. A declared class is a name, not a new set of rules: it names the
built-in class whose trust-gate, safe-mode and scheduler-policy rules it follows (``gates_as``),
and there is no declared class without one (deny by default: nothing escapes the rules by being
new). A rule that names a declared class binds its runs; a rule that names its ``gates_as``
class binds them too, so declaring a class can tighten what applies to its runs, never loosen it:

- safe mode's ``suspend_job_classes`` suspends a declared class named there, and every declared
  class that gates as a built-in class named there;
- the scheduler policy's ``trigger_types.by_job_class`` rules of both names must allow the
  trigger, and a blackout listing either name covers the run.

``SAFE_MODE_JOB`` cannot be borrowed (a run of it is never held by safe mode; a declared class
gating as it would escape safe mode), nor can a declared name repeat a built-in one.

A declared class may also give its definitions a ``default_priority`` (when the document names
no ``priority``) and make them audit-material (``audit_material``: every end of their runs is
recorded in the audit log, ``audit_required`` defaults to true and ``audit_required: false`` is
refused). The content digest stays over the document as written; what the class resolved to is
recorded with each run's creation (``record``, in ``core.runs.binding``), so an audit replay
reads it from the record even after the class is gone from ``jobgate.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobgate.core.models import JobClass, Priority

BUILTIN_CLASSES: tuple[str, ...] = tuple(c.value for c in JobClass)
CLASS_NAME_PATTERN = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*_JOB")  # as the contracts' declared_job_class
CLASS_NAME_MAX = 64  # the width of the job_class columns
CLASS_NAME_RULE = (
    f"must be UPPER_SNAKE_CASE ending in _JOB, at most {CLASS_NAME_MAX} characters (e.g. RECONCILIATION_JOB)"
)
UNBORROWABLE = frozenset({JobClass.SAFE_MODE_JOB})
_BUILTIN: dict[str, JobClass] = {c.value: c for c in JobClass}


@dataclass(frozen=True)
class JobClassSpec:
    """A class declared in ``jobgate.yaml`` (``job_classes:``): its name, the built-in class whose
    rules it follows, and what it gives its definitions by default."""

    name: str
    gates_as: JobClass
    default_priority: Priority | None = None
    audit_material: bool = False
    description: str = ""

    def record(self) -> dict[str, Any]:
        """What a run's creation records of the class (``core.runs.binding``): enough to rebuild
        the run's definition without today's configuration."""
        doc: dict[str, Any] = {"name": self.name, "gates_as": self.gates_as.value}
        if self.default_priority is not None:
            doc["default_priority"] = self.default_priority.value
        if self.audit_material:
            doc["audit_material"] = True
        return doc

    @classmethod
    def from_record(cls, doc: Any) -> JobClassSpec | None:
        """``record``'s reader; None when ``doc`` is not a class record."""
        if not isinstance(doc, Mapping):
            return None
        try:
            priority = doc.get("default_priority")
            return cls(
                name=str(doc["name"]),
                gates_as=JobClass(doc["gates_as"]),
                default_priority=None if priority is None else Priority(priority),
                audit_material=doc.get("audit_material") is True,
            )
        except (KeyError, ValueError):
            return None


def job_class_name(name: str) -> str:
    """The class name as the code holds it: the ``JobClass`` member for a built-in class (so
    ``is JobClass.X`` keeps working), the plain string for a declared one."""
    return _BUILTIN.get(name, name)


def is_builtin(name: str) -> bool:
    return name in _BUILTIN


def rule_names(name: str, gates_as: JobClass | None) -> tuple[str, ...]:
    """The class names whose rules bind a run of class ``name``: its own, and its ``gates_as``."""
    if gates_as is None or gates_as.value == name:
        return (name,)
    return (name, gates_as.value)


def known_classes(declared: Mapping[str, JobClassSpec]) -> str:
    """The classes a definition may name, for a refusal: the built-in ones, then the declared ones."""
    listed = f"built in: {', '.join(BUILTIN_CLASSES)}"
    if declared:
        listed += f"; declared in jobgate.yaml: {', '.join(sorted(declared))}"
    else:
        listed += "; none declared in jobgate.yaml (job_classes)"
    return listed
