"""What a workflow's steps will be given, checked when it starts.

A step's params are checked against its definition only when the step starts, by then after the
steps before it ran (and perhaps had to be compensated). What is known at the start is checked
at the start, and the start refused naming the step and param, before anything is stored:

- a param the step's definition does not declare, or a required one the step never gives;
- a literal value (no ``${...}``) its declaration refuses; a value made only of the workflow's
  own params, filled in, likewise;
- a ``${params.X}`` the workflow was started without (no value, no default), in a step that
  runs whenever the workflow goes forward (no ``when`` on it or on a step it waits for) or in
  such a step's compensation. A step behind a condition may be guarded by it, so is not judged.

Values read from another step's outputs or from the workflow run are known only when the step
starts, and are checked then, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec
from jobgate.core.params import ParamValueError, param_value
from jobgate.workflows.spec import WorkflowSpec, references, render


def check_start(
    spec: WorkflowSpec,
    declared: Mapping[str, tuple[ParamSpec, ...]],
    params: Mapping[str, str],
    *,
    source: str,
    later: Collection[str] = (),
) -> None:
    """Raise ``ValidationError`` for the first step input that cannot be right (module doc).
    ``declared``: each step job's params, as its pinned definition declares them; ``params``:
    the workflow's own, validated, defaults filled in; ``later``: workflow params whose value
    comes only when it fires (an event's payload), judged then."""
    certain = _certain_steps(spec)
    for step in spec.steps:
        where = f"workflow.steps.{step.step_id}"
        judged = step.step_id in certain
        _check(step.job, step.params, declared.get(step.job, ()), params, later, where, judged, source)
        if step.compensate is not None:
            _check(
                step.compensate.job,
                step.compensate.params,
                declared.get(step.compensate.job, ()),
                params,
                later,
                f"{where}.compensate",
                judged,
                source,
            )


def _certain_steps(spec: WorkflowSpec) -> set[str]:
    """The steps that start whenever the workflow goes forward: no condition on them or on any
    step they wait for (steps are in an order where each follows what it depends on)."""
    certain: set[str] = set()
    for step in spec.steps:
        if step.when is None and all(d in certain for d in step.depends_on):
            certain.add(step.step_id)
    return certain


def _check(
    job: str,
    templates: Mapping[str, str],
    declared: tuple[ParamSpec, ...],
    params: Mapping[str, str],
    later: Collection[str],
    where: str,
    certain: bool,
    source: str,
) -> None:
    by_name = {p.name: p for p in declared}
    for name, template in templates.items():
        field = f"{where}.params.{name}"
        decl = by_name.get(name)
        if decl is None:
            raise ValidationError(f"{job} declares no parameter {name!r}", field=field, source=source)
        refs = references(template)
        if any(r.kind == "params" and r.name in later for r in refs):
            continue  # its value comes when the workflow fires
        missing = [r.name for r in refs if r.kind == "params" and r.name not in params]
        if missing:
            if not certain:
                continue  # its condition may be what guards it
            raise ValidationError(
                f"reads the workflow parameter {missing[0]!r}, which this start gives no value (and has no default)",
                field=field,
                source=source,
            )
        if any(r.kind != "params" for r in refs):
            continue  # known when the step starts
        value = render({name: template}, params, {}, {})[name]
        try:
            param_value(decl, value)
        except ParamValueError as exc:
            raise ValidationError(f"{job}: {exc}", field=field, source=source) from None
    for decl in declared:
        if decl.required and decl.default is None and decl.name not in templates:
            raise ValidationError(
                f"{job} requires the parameter {decl.name!r}, which this step never gives",
                field=f"{where}.params.{decl.name}",
                source=source,
            )
