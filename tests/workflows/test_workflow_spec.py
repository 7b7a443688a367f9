"""The workflow block of a definition: every refusal names its field; conditions and templates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core.errors import ValidationError
from jobgate.workflows.spec import (
    FailurePolicy,
    MissingInput,
    WorkflowSpec,
    holds,
    parse_workflow,
    render,
)


def parse(steps: list[dict[str, Any]], **extra: Any) -> WorkflowSpec:
    return parse_workflow({"steps": steps, **extra}, source="test")


def refusal(doc: Any) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_workflow(doc, source="test")
    return info.value


def test_steps_without_depends_on_run_in_order() -> None:
    spec = parse([{"id": "a", "job": "j"}, {"id": "b", "job": "j"}, {"id": "c", "job": "j"}])
    assert [s.depends_on for s in spec.steps] == [(), ("a",), ("b",)]


def test_an_empty_depends_on_makes_a_root_and_names_make_a_dag() -> None:
    spec = parse(
        [
            {"id": "a", "job": "j"},
            {"id": "b", "job": "j", "depends_on": []},
            {"id": "c", "job": "j", "depends_on": ["a", "b"]},
        ]
    )
    assert [s.depends_on for s in spec.steps] == [(), (), ("a", "b")]


def test_policies_default_from_the_workflow() -> None:
    spec = parse([{"id": "a", "job": "j"}, {"id": "b", "job": "j", "on_failure": "fail"}], on_failure="compensate")
    assert [s.on_failure for s in spec.steps] == [FailurePolicy.COMPENSATE, FailurePolicy.FAIL]


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ([], "workflow", "mapping"),
        ({}, "workflow.steps", "required"),
        ({"steps": []}, "workflow.steps", "at least one"),
        ({"steps": [{"job": "j"}]}, "workflow.steps[0].id", "required"),
        ({"steps": [{"id": "a"}]}, "workflow.steps[0].job", "required"),
        ({"steps": [{"id": "a", "job": "j"}, {"id": "a", "job": "j"}]}, "workflow.steps[1].id", "duplicate"),
        ({"steps": [{"id": "a", "job": "j", "depends_on": ["zz"]}]}, "workflow.steps[0].depends_on[0]", "unknown step"),
        ({"steps": [{"id": "a", "job": "j", "depends_on": ["a"]}]}, "workflow.steps[0].depends_on[0]", "itself"),
        (
            {"steps": [{"id": "a", "job": "j", "depends_on": ["b"]}, {"id": "b", "job": "j", "depends_on": ["a"]}]},
            "workflow.steps",
            "cycle",
        ),
        ({"steps": [{"id": "a", "job": "j", "colour": 1}]}, "workflow.steps[0].colour", "unknown field"),
        ({"steps": [{"id": "a", "job": "j", "on_failure": "ignore"}]}, "workflow.steps[0].on_failure", "one of"),
        (
            {"steps": [{"id": "a", "job": "j", "params": {"x": "${nope}"}}]},
            "workflow.steps[0].params.x",
            "unknown reference",
        ),
        (
            {"steps": [{"id": "a", "job": "j"}, {"id": "b", "job": "j", "params": {"x": "${steps.a.outputs.v}"}}]},
            "workflow.steps[1].params.x",
            "declares no output",
        ),
        (
            {
                "steps": [
                    {"id": "a", "job": "j", "outputs": ["v"]},
                    {"id": "b", "job": "j", "depends_on": [], "params": {"x": "${steps.a.outputs.v}"}},
                ]
            },
            "workflow.steps[1].params.x",
            "does not run before",
        ),
        ({"steps": [{"id": "a", "job": "j", "when": "params.x ~ 3"}]}, "workflow.steps[0].when", "condition"),
        ({"steps": [{"id": "a", "job": "j", "when": "params.x == nope"}]}, "workflow.steps[0].when", "JSON"),
        # Python's JSON reader takes these; JSON has no such values (found by a review)
        ({"steps": [{"id": "a", "job": "j", "when": "params.x == NaN"}]}, "workflow.steps[0].when", "JSON"),
        ({"steps": [{"id": "a", "job": "j", "when": "params.x > Infinity"}]}, "workflow.steps[0].when", "JSON"),
        ({"steps": [{"id": "a", "job": "j", "when": "params.x < -Infinity"}]}, "workflow.steps[0].when", "JSON"),
        ({"steps": [{"id": "a", "job": "j", "when": "params.x > 1e999"}]}, "workflow.steps[0].when", "JSON"),
        ({"steps": [{"id": "a", "job": "j", "when": 'params.x > "a"'}]}, "workflow.steps[0].when", "numbers"),
        ({"steps": [{"id": "a", "job": "j", "outputs": ["1x"]}]}, "workflow.steps[0].outputs[0]", "output name"),
        ({"steps": [{"id": "a", "job": "j", "compensate": {}}]}, "workflow.steps[0].compensate.job", "required"),
        ({"steps": [{"id": "a", "job": "j", "params": {"x": True}}]}, "workflow.steps[0].params.x", "string"),
    ],
)
def test_refusals_name_the_field(doc: Any, field: str, words: str) -> None:
    error = refusal(doc)
    assert error.field is not None and error.field.startswith(field), (error.field, error.message)
    assert words in error.message


def test_unknown_policy_names_are_refused_when_the_registry_is_given() -> None:
    with pytest.raises(ValidationError) as info:
        parse_workflow(
            {"steps": [{"id": "a", "job": "j", "retry_policy": "nope"}]},
            source="t",
            retry_policies={"ok": 1},
            timeout_policies={},
        )
    assert info.value.field == "workflow.steps[0].retry_policy"


def test_a_compensation_may_read_its_own_steps_outputs() -> None:
    spec = parse(
        [{"id": "a", "job": "j", "outputs": ["v"], "compensate": {"job": "u", "params": {"x": "${steps.a.outputs.v}"}}}]
    )
    assert spec.jobs == ("j", "u")


def test_render_fills_params_outputs_and_the_workflow_id() -> None:
    out = render(
        {"a": "${params.p}/${steps.s.outputs.n}", "b": "${workflow.workflow_run_id}", "c": "plain"},
        {"p": "x"},
        {"s": {"n": 3}},
        {"workflow_run_id": "W1", "tenant_id": "t"},
    )
    assert out == {"a": "x/3", "b": "W1", "c": "plain"}
    with pytest.raises(MissingInput):
        render({"a": "${steps.s.outputs.n}"}, {}, {}, {"workflow_run_id": "W1", "tenant_id": "t"})


def _condition(text: str) -> Any:
    spec = parse([{"id": "s", "job": "j", "outputs": ["v"]}, {"id": "t", "job": "j", "when": text}])
    return spec.steps[1].when


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("steps.s.outputs.v == true", True, True),
        ("steps.s.outputs.v == true", 1, False),  # JSON equality: true is not 1
        ("steps.s.outputs.v == 1", True, False),
        ("steps.s.outputs.v != true", False, True),
        ('steps.s.outputs.v == "a"', "a", True),
        ("steps.s.outputs.v > 2", 3, True),
        ("steps.s.outputs.v > 2", "3", True),  # a number written as text compares as a number
        ("steps.s.outputs.v > 2", "x", False),
        ("steps.s.outputs.v <= 2", None, False),
        ("steps.s.outputs.v == null", None, True),
    ],
)
def test_conditions(text: str, value: Any, expected: bool) -> None:
    workflow = {"workflow_run_id": "W", "tenant_id": "t"}
    assert holds(_condition(text), {}, {"s": {"v": value}}, workflow) is expected


@given(st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_numeric_comparisons_agree_with_python(a: int, b: int) -> None:
    workflow = {"workflow_run_id": "W", "tenant_id": "t"}
    for op, fn in (("<", a.__lt__), ("<=", a.__le__), (">", a.__gt__), (">=", a.__ge__), ("==", a.__eq__)):
        cond = _condition(f"steps.s.outputs.v {op} {b}")
        assert holds(cond, {}, {"s": {"v": a}}, workflow) is fn(b)


def test_a_reference_to_an_undeclared_parameter_is_refused_at_load() -> None:
    doc = {"steps": [{"id": "a", "job": "j", "when": "params.modee == 1"}]}
    with pytest.raises(ValidationError) as info:
        parse_workflow(doc, source="t", param_names=["mode"])
    assert info.value.field == "workflow.steps[0].when" and "modee" in info.value.message
    parse_workflow(doc, source="t", param_names=["modee"])  # declared: fine


@pytest.mark.parametrize("text", ["1_000", " 1000 ", "\u0661\u0662", "1e", "0x10", "Infinity", "NaN"])
def test_only_a_json_number_written_as_text_compares_as_a_number(text: str) -> None:
    workflow = {"workflow_run_id": "W", "tenant_id": "t"}
    assert holds(_condition("steps.s.outputs.v > 2"), {}, {"s": {"v": text}}, workflow) is False
    assert holds(_condition("steps.s.outputs.v != 2"), {}, {"s": {"v": text}}, workflow) is True
