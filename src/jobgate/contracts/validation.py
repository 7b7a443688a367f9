"""Loading the CSI contracts (JSON Schema, draft 2020-12) and checking documents against them.

Each seed 000 §41 contract is one file in this package, named by its CSI id
(``comp.TG.OUTPUT.JOB-RUN.v1_0.json``), written from what jobgate actually produces or accepts.
The files are self-contained (no references between them), so another engine can take one file
and validate what it receives without jobgate. Outputs and events are closed
(``additionalProperties: false``): a field jobgate starts writing without changing its contract
fails the contract tests instead of reaching consumers unannounced.

Instants are checked twice: ``format: date-time`` (a real RFC 3339 instant, checked here
without extra packages) and, for what jobgate writes, a pattern requiring UTC spelt ``Z``.
A violation names the document path (``steps[0].status``) and the rule, like every other
refusal in jobgate.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema import ValidationError as SchemaError
from jsonschema.exceptions import relevance

from jobgate.core.errors import ValidationError

CSI_PATTERN = re.compile(r"comp\.[A-Z]+\.(INPUT|OUTPUT|EVENT)\.[A-Z0-9-]+\.v[0-9]+_[0-9]+")
EVENT_CSI_PREFIX = "comp.TG.EVENT."
EVENT_CSI_VERSION = ".v1_0"
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)

FORMATS = FormatChecker(formats=())


@FORMATS.checks("date-time", raises=ValueError)
def _is_instant(value: object) -> bool:
    """RFC 3339 ``date-time``: the grammar, then a real calendar instant (no 30 February)."""
    if not isinstance(value, str):
        return True  # formats constrain strings only; ``type`` judges the rest
    if _RFC3339.fullmatch(value) is None:
        raise ValueError("not an RFC 3339 date-time with an offset")
    datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return True


@dataclass(frozen=True)
class Violation:
    """One way a document breaks its contract: where (a dotted path, ``""`` for the whole
    document) and which rule."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path or '(document)'}: {self.reason}"


class ContractError(ValidationError):
    """A document does not conform to its contract; ``field`` is the first violation's path,
    ``source`` the CSI id, ``violations`` all of them sorted by path."""

    code = "contract_violation"

    def __init__(self, csi_id: str, violations: list[Violation]) -> None:
        first = violations[0]
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(first.reason + more, field=first.path or "(document)", source=csi_id)
        self.csi_id = csi_id
        self.violations = violations


def contract_ids() -> tuple[str, ...]:
    """Every contract shipped in this package, sorted."""
    names = (entry.name for entry in resources.files(__package__).iterdir())
    return tuple(sorted(n.removesuffix(".json") for n in names if n.endswith(".json")))


@functools.cache
def schema(csi_id: str) -> Mapping[str, Any]:
    """The contract's JSON Schema; an unknown id is refused naming the known ones."""
    if csi_id not in contract_ids():
        raise ValidationError(f"unknown contract {csi_id!r} (known: {', '.join(contract_ids())})", field="csi_id")
    text = resources.files(__package__).joinpath(f"{csi_id}.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator(csi_id: str) -> Draft202012Validator:
    document = schema(csi_id)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document, format_checker=FORMATS)


def violations(csi_id: str, document: Any) -> list[Violation]:
    """Every violation of ``document`` against the contract, sorted by path (empty: it conforms)."""
    found: dict[tuple[str, str], Violation] = {}
    for error in _validator(csi_id).iter_errors(document):
        for v in _explain(error):
            found.setdefault((v.path, v.reason), v)
    return sorted(found.values(), key=lambda v: (v.path, v.reason))


def validate(csi_id: str, document: Any) -> None:
    """Raise ``ContractError`` naming the first violation's path and rule unless ``document``
    conforms to the contract ``csi_id``."""
    problems = violations(csi_id, document)
    if problems:
        raise ContractError(csi_id, problems)


def event_contract(event_type: str) -> str:
    """The contract of an event, by its type as the outbox records it (``job_started``) or as
    delivered (``trustgate.scheduler.job_started``; the seed's ``dead_lettered`` included)."""
    short = event_type.removeprefix("trustgate.scheduler.")
    if short == "dead_lettered":
        short = "job_dead_lettered"
    return f"{EVENT_CSI_PREFIX}{short.upper().replace('_', '-')}{EVENT_CSI_VERSION}"


def _path(parts: Iterator[str | int] | Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _explain(error: SchemaError) -> list[Violation]:
    """One schema error as violations a person can act on: a missing or unexpected field is
    named as the path itself; ``oneOf``/``anyOf`` failures are explained by their most
    relevant branch, not as "is not valid under any of the given schemas"."""
    path = _path(error.absolute_path)
    kind = error.validator
    rule: Any = error.validator_value
    if kind == "required" and isinstance(error.instance, Mapping):
        return [Violation(_child(path, name), "required field missing") for name in _missing(error)]
    if kind == "additionalProperties" and isinstance(error.instance, Mapping):
        known = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        return [Violation(_child(path, str(key)), "unexpected field") for key in error.instance if key not in known]
    if kind in ("oneOf", "anyOf"):
        return _explain_alternatives(error, path)
    if kind == "enum":
        return [Violation(path, "must be one of: " + ", ".join(str(v) for v in rule))]
    if kind == "const":
        return [Violation(path, f"must be {json.dumps(rule)}")]
    if kind == "pattern":
        return [Violation(path, f"{error.instance!r} does not match {rule}")]
    if kind == "format":
        return [Violation(path, f"{error.instance!r} is not a {rule}")]
    return [Violation(path, error.message)]


def _explain_alternatives(error: SchemaError, path: str) -> list[Violation]:
    """Alternatives that differ by which fields are present (exactly one executor source) are
    explained by those fields; otherwise by the branch that came closest (fewest errors)."""
    alternatives: list[Any] = list(error.validator_value)  # type: ignore[arg-type]
    branches: dict[int, list[SchemaError]] = {}
    for e in error.context or ():
        branches.setdefault(int(e.relative_schema_path[0]), []).append(e)
    options = [
        ", ".join(branch.get("required", ()))
        for branch in alternatives
        if isinstance(branch, Mapping) and set(branch) == {"required"}
    ]
    if options and len(options) == len(alternatives):
        how = "exactly one" if branches else "only one"
        return [Violation(path, f"must have {how} of: {' | '.join(options)}")]
    if not branches:
        return [Violation(path, error.message)]
    closest = min(branches.values(), key=lambda errs: (len(errs), min(relevance(e) for e in errs)))
    return [v for e in closest for v in _explain(e)]


def _missing(error: SchemaError) -> list[str]:
    present = error.instance if isinstance(error.instance, Mapping) else {}
    names: list[Any] = list(error.validator_value)  # type: ignore[arg-type]
    return [str(name) for name in names if name not in present]
