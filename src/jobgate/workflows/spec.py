"""What a workflow is: its steps, their dependencies, conditions, outputs and compensations.

A workflow is a definition whose document carries a ``workflow`` block instead of a handler,
runner or target. Each step names another definition (``job``): the step's code is governed by
that definition's own approved digest, the workflow's approval pins its structure. Steps run
in order unless they say otherwise: a step without ``depends_on`` follows the step before it,
``depends_on: []`` makes it a root, so a DAG is written by naming its edges.

Everything here is pure and checked when the definition loads, so a typo in a step reference,
a cycle or an output nobody declares is refused with the field named, before anything runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jobgate.core.errors import ValidationError
from jobgate.documents import NAME_PATTERN, Reader, join


class FailurePolicy(StrEnum):
    """What a step's failure does to its workflow (after the step's own retries are spent)."""

    FAIL = "fail"  # stop the workflow: FAILED
    ESCALATE = "escalate"  # stop and hand to a human: ESCALATED
    COMPENSATE = "compensate"  # undo the completed steps in reverse order, then FAILED


STEP_FIELDS = (
    "id",
    "job",
    "params",
    "depends_on",
    "when",
    "outputs",
    "on_failure",
    "compensate",
    "retry_policy",
    "timeout_policy",
    "description",
)
WORKFLOW_FIELDS = ("steps", "on_failure", "description")
COMPENSATION_FIELDS = ("job", "params")
MAX_STEPS = 200

# ${params.NAME}, ${steps.STEP.outputs.KEY}, ${workflow.workflow_run_id}
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_PARAM_REF = re.compile(r"params\.([A-Za-z_][A-Za-z0-9_]*)")
_OUTPUT_REF = re.compile(r"steps\.([A-Za-z0-9][A-Za-z0-9_.:-]*)\.outputs\.([A-Za-z_][A-Za-z0-9_]*)")
_WORKFLOW_REF = re.compile(r"workflow\.(workflow_run_id|tenant_id)")
_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_CONDITION = re.compile(r"\s*(\S+)\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*")


@dataclass(frozen=True)
class Reference:
    """One ``${...}`` a template or condition reads: ``("params", name)``, ``("step", step, key)``
    or ``("workflow", attribute)``."""

    kind: str
    name: str
    key: str = ""

    def render(self) -> str:
        if self.kind == "step":
            return f"steps.{self.name}.outputs.{self.key}"
        return f"{self.kind}.{self.name}" if self.kind == "params" else f"workflow.{self.name}"


@dataclass(frozen=True)
class Condition:
    """``<reference> <op> <JSON literal>``: the whole language, so a condition can be checked at
    load and evaluated without ``eval``."""

    reference: Reference
    op: str
    literal: Any
    text: str


@dataclass(frozen=True)
class Compensation:
    job: str
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StepSpec:
    step_id: str
    job: str
    position: int
    depends_on: tuple[str, ...]
    params: Mapping[str, str] = field(default_factory=dict)
    when: Condition | None = None
    outputs: tuple[str, ...] = ()
    on_failure: FailurePolicy = FailurePolicy.FAIL
    compensate: Compensation | None = None
    retry_policy: str | None = None
    timeout_policy: str | None = None


@dataclass(frozen=True)
class WorkflowSpec:
    steps: tuple[StepSpec, ...]

    def step(self, step_id: str) -> StepSpec:
        for s in self.steps:
            if s.step_id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def jobs(self) -> tuple[str, ...]:
        """Every definition the workflow may run (steps and compensations), in order, once each."""
        seen: dict[str, None] = {}
        for s in self.steps:
            seen[s.job] = None
            if s.compensate is not None:
                seen[s.compensate.job] = None
        return tuple(seen)


def parse_workflow(
    value: Any,
    *,
    source: str,
    retry_policies: Mapping[str, Any] | None = None,
    timeout_policies: Mapping[str, Any] | None = None,
    param_names: Collection[str] | None = None,
    at: str = "workflow",
) -> WorkflowSpec:
    """Validate a ``workflow`` block. Policy names are checked when the registries are given
    (at load); a stored definition is re-read without them, its content already checked."""
    r = Reader(source)
    doc = r.mapping(value, at)
    r.only_keys(doc, at, WORKFLOW_FIELDS)
    default_policy = r.choice(doc.get("on_failure", FailurePolicy.FAIL.value), join(at, "on_failure"), FailurePolicy)
    if "description" in doc:
        r.text(doc["description"], join(at, "description"))
    if "steps" not in doc:
        r.fail(join(at, "steps"), "required: a list of at least one step")
    raw_steps = r.sequence(doc["steps"], join(at, "steps"))
    if not raw_steps:
        r.fail(join(at, "steps"), "must hold at least one step")
    if len(raw_steps) > MAX_STEPS:
        r.fail(join(at, "steps"), f"at most {MAX_STEPS} steps")
    ids: list[str] = []
    for i, raw in enumerate(raw_steps):
        where = join(join(at, "steps"), i)
        step_doc = r.mapping(raw, where)
        if "id" not in step_doc:
            r.fail(join(where, "id"), "required: the step's name, unique in the workflow")
        step_id = r.string(step_doc["id"], join(where, "id"), pattern=NAME_PATTERN, rule="letters, digits, _ . : -")
        if len(step_id) > 100:
            r.fail(join(where, "id"), "must be at most 100 characters")
        if step_id in ids:
            r.fail(join(where, "id"), f"duplicate step id {step_id!r}")
        ids.append(step_id)

    steps: list[StepSpec] = []
    for i, raw in enumerate(raw_steps):
        where = join(join(at, "steps"), i)
        steps.append(_step(r, raw, where, i, ids, default_policy, retry_policies, timeout_policies))
    spec = WorkflowSpec(tuple(steps))
    _check_acyclic(r, spec, at)
    for i, s in enumerate(spec.steps):
        _check_references(r, spec, s, join(join(at, "steps"), i), param_names)
    return spec


def _step(
    r: Reader,
    doc: dict[str, Any],
    where: str,
    position: int,
    ids: list[str],
    default_policy: FailurePolicy,
    retry_policies: Mapping[str, Any] | None,
    timeout_policies: Mapping[str, Any] | None,
) -> StepSpec:
    r.only_keys(doc, where, STEP_FIELDS)
    step_id = ids[position]
    if "job" not in doc:
        r.fail(join(where, "job"), "required: the job_definition_id this step runs")
    job = r.name(doc["job"], join(where, "job"))
    if "depends_on" in doc:
        depends = tuple(r.strings(doc["depends_on"], join(where, "depends_on"), unique=True))
        for k, dep in enumerate(depends):
            if dep not in ids:
                r.fail(join(join(where, "depends_on"), k), f"unknown step {dep!r} (steps: {', '.join(ids)})")
            if dep == step_id:
                r.fail(join(join(where, "depends_on"), k), "a step cannot depend on itself")
    else:
        depends = (ids[position - 1],) if position > 0 else ()
    params = _templates(r, doc.get("params", {}), join(where, "params"))
    when = _condition(r, doc["when"], join(where, "when")) if "when" in doc else None
    outputs: tuple[str, ...] = ()
    if "outputs" in doc:
        names = r.strings(doc["outputs"], join(where, "outputs"), unique=True)
        for k, name in enumerate(names):
            if not _OUTPUT_NAME.fullmatch(name):
                r.fail(join(join(where, "outputs"), k), "an output name is a letter or _ then letters, digits, _")
        outputs = tuple(names)
    on_failure = r.choice(doc.get("on_failure", default_policy.value), join(where, "on_failure"), FailurePolicy)
    compensate = None
    if "compensate" in doc:
        cdoc = r.mapping(doc["compensate"], join(where, "compensate"))
        r.only_keys(cdoc, join(where, "compensate"), COMPENSATION_FIELDS)
        if "job" not in cdoc:
            r.fail(join(join(where, "compensate"), "job"), "required: the job_definition_id that undoes this step")
        compensate = Compensation(
            r.name(cdoc["job"], join(join(where, "compensate"), "job")),
            _templates(r, cdoc.get("params", {}), join(join(where, "compensate"), "params")),
        )
    retry = None
    if "retry_policy" in doc:
        retry = (
            r.known(doc["retry_policy"], join(where, "retry_policy"), "retry policy", retry_policies)
            if retry_policies is not None
            else r.string(doc["retry_policy"], join(where, "retry_policy"))
        )
    timeout = None
    if "timeout_policy" in doc:
        timeout = (
            r.known(doc["timeout_policy"], join(where, "timeout_policy"), "timeout policy", timeout_policies)
            if timeout_policies is not None
            else r.string(doc["timeout_policy"], join(where, "timeout_policy"))
        )
    if "description" in doc:
        r.text(doc["description"], join(where, "description"))
    return StepSpec(
        step_id=step_id,
        job=job,
        position=position,
        depends_on=depends,
        params=params,
        when=when,
        outputs=outputs,
        on_failure=on_failure,
        compensate=compensate,
        retry_policy=retry,
        timeout_policy=timeout,
    )


def _templates(r: Reader, value: Any, where: str) -> dict[str, str]:
    doc = r.mapping(value, where)
    out: dict[str, str] = {}
    for name, template in doc.items():
        if isinstance(template, bool) or not isinstance(template, str | int | float):
            r.fail(join(where, name), "a parameter value is a string (or a number), and may hold ${...} references")
        text = template if isinstance(template, str) else json.dumps(template)
        for ref_text in _REFERENCE.findall(text):
            _reference(r, ref_text, join(where, name))
        out[str(name)] = text
    return out


def _reference(r: Reader, text: str, where: str) -> Reference:
    text = text.strip()
    if m := _PARAM_REF.fullmatch(text):
        return Reference("params", m.group(1))
    if m := _OUTPUT_REF.fullmatch(text):
        return Reference("step", m.group(1), m.group(2))
    if m := _WORKFLOW_REF.fullmatch(text):
        return Reference("workflow", m.group(1))
    r.fail(
        where,
        f"unknown reference ${{{text}}}: use ${{params.NAME}}, ${{steps.STEP.outputs.NAME}} "
        "or ${workflow.workflow_run_id}",
    )


def _condition(r: Reader, value: Any, where: str) -> Condition:
    text = r.string(value, where)
    m = _CONDITION.fullmatch(text)
    if m is None:
        r.fail(where, "a condition is '<reference> <op> <JSON value>', e.g. 'steps.check.outputs.changed == true'")
    ref_text, op, literal_text = m.groups()
    ref_text = ref_text[2:-1] if ref_text.startswith("${") and ref_text.endswith("}") else ref_text
    reference = _reference(r, ref_text, where)
    try:
        # NaN, Infinity and numbers past a float's range are no JSON values (Python reads them)
        literal = json.loads(literal_text, parse_constant=_not_json)
        if isinstance(literal, float) and not math.isfinite(literal):
            raise ValueError(literal_text)
    except ValueError:
        r.fail(where, f"{literal_text!r} is not a JSON value (strings need double quotes)")
    if isinstance(literal, dict | list):
        r.fail(where, "compare with a number, string, true, false or null")
    if op in {"<", "<=", ">", ">="} and (isinstance(literal, bool) or not isinstance(literal, int | float)):
        r.fail(where, f"{op} compares numbers")
    return Condition(reference, op, literal, text)


def _not_json(constant: str) -> Any:
    raise ValueError(constant)


def _check_acyclic(r: Reader, spec: WorkflowSpec, at: str) -> None:
    """Kahn's algorithm; the refusal names a step on the cycle."""
    indegree = {s.step_id: len(s.depends_on) for s in spec.steps}
    children: dict[str, list[str]] = {s.step_id: [] for s in spec.steps}
    for s in spec.steps:
        for dep in s.depends_on:
            children[dep].append(s.step_id)
    ready = [sid for sid, n in indegree.items() if n == 0]
    seen = 0
    while ready:
        sid = ready.pop()
        seen += 1
        for child in children[sid]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if seen != len(spec.steps):
        stuck = next(s for s in spec.steps if indegree[s.step_id] > 0)
        r.fail(join(join(at, "steps"), stuck.position), f"step {stuck.step_id!r} is on a dependency cycle")


def ancestors(spec: WorkflowSpec, step_id: str) -> set[str]:
    out: set[str] = set()
    todo = list(spec.step(step_id).depends_on)
    while todo:
        sid = todo.pop()
        if sid not in out:
            out.add(sid)
            todo.extend(spec.step(sid).depends_on)
    return out


def _check_references(
    r: Reader, spec: WorkflowSpec, step: StepSpec, where: str, param_names: Collection[str] | None
) -> None:
    """A step reads outputs only of steps that surely ran before it, and only declared ones;
    and only parameters the workflow declares (a typo must not silently skip a step)."""
    before = ancestors(spec, step.step_id)
    templates = [(join(join(where, "params"), k), v) for k, v in step.params.items()]
    if step.compensate is not None:
        # A compensation runs after its own step completed: it may read that step's outputs too.
        before_comp = before | {step.step_id}
        templates += [
            (join(join(join(where, "compensate"), "params"), k), v) for k, v in step.compensate.params.items()
        ]
    else:
        before_comp = before
    refs: list[tuple[str, Reference, set[str]]] = []
    for field_path, text in templates:
        scope = before_comp if ".compensate." in field_path else before
        refs += [(field_path, _reference(r, t, field_path), scope) for t in _REFERENCE.findall(text)]
    if step.when is not None:
        refs.append((join(where, "when"), step.when.reference, before))
    for field_path, ref, scope in refs:
        if ref.kind == "params" and param_names is not None and ref.name not in param_names:
            declared = ", ".join(sorted(param_names)) or "none"
            r.fail(
                field_path, f"reads parameter {ref.name!r}, which the workflow does not declare (declared: {declared})"
            )
        if ref.kind != "step":
            continue
        if ref.name not in scope:
            r.fail(field_path, f"reads step {ref.name!r}, which does not run before this step (add it to depends_on)")
        if ref.key not in spec.step(ref.name).outputs:
            r.fail(field_path, f"step {ref.name!r} declares no output {ref.key!r}")


# ------------------------------------------------------------------ evaluation (pure)
class MissingInput(ValueError):
    """A reference had no value at run time (the step that declares it was skipped)."""


Values = Mapping[str, Any]


def resolve(ref: Reference, params: Values, outputs: Mapping[str, Values], workflow: Values) -> Any:
    if ref.kind == "params":
        if ref.name not in params:
            raise MissingInput(f"parameter {ref.name!r} was not given")
        return params[ref.name]
    if ref.kind == "workflow":
        return workflow[ref.name]
    step_outputs = outputs.get(ref.name)
    if step_outputs is None or ref.key not in step_outputs:
        raise MissingInput(f"step {ref.name!r} produced no output {ref.key!r}")
    return step_outputs[ref.key]


def render(
    templates: Mapping[str, str], params: Values, outputs: Mapping[str, Values], workflow: Values
) -> dict[str, str]:
    """Fill ``${...}``: a template that is one reference alone keeps the value's text; JSON
    values that are not strings are written as JSON so a number stays ``3``, not ``3.0``."""

    def text_of(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))

    out: dict[str, str] = {}
    for name, template in templates.items():
        out[name] = _REFERENCE.sub(
            lambda m: text_of(resolve(_parse_ref(m.group(1)), params, outputs, workflow)), template
        )
    return out


def references(template: str) -> list[Reference]:
    """The ``${...}`` references of a template (each valid: templates are checked at load)."""
    return [_parse_ref(m.group(1)) for m in _REFERENCE.finditer(template)]


def _parse_ref(text: str) -> Reference:
    return _reference(Reader("workflow"), text, "reference")


def holds(condition: Condition, params: Values, outputs: Mapping[str, Values], workflow: Values) -> bool:
    """Evaluate a condition. A parameter (always text) compared with a number is read as one."""
    value = resolve(condition.reference, params, outputs, workflow)
    literal = condition.literal
    if isinstance(literal, int | float) and not isinstance(literal, bool) and isinstance(value, str):
        if not _JSON_NUMBER.fullmatch(value):  # "1_000", " 7 ", "١٢" are text, not numbers
            return condition.op == "!="
        value = float(value)
        if not math.isfinite(value):
            return condition.op == "!="
    if condition.op == "==":
        return _equal(value, literal)
    if condition.op == "!=":
        return not _equal(value, literal)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if condition.op == "<":
        return bool(value < literal)
    if condition.op == "<=":
        return bool(value <= literal)
    if condition.op == ">":
        return bool(value > literal)
    return bool(value >= literal)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def workflow_spec_of(content: Mapping[str, Any], source: str) -> WorkflowSpec:
    """The spec of a stored workflow definition (its content was checked when it was applied)."""
    if "workflow" not in content:
        raise ValidationError("this definition is a job, not a workflow", field="job_definition_id", source=source)
    return parse_workflow(content["workflow"], source=source)
