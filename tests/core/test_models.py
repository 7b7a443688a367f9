"""Small value types the decision core is built on: errors, priorities, scopes."""

from __future__ import annotations

import pytest

from jobgate.core.errors import (
    ConfigurationError,
    ConflictError,
    IllegalTransitionError,
    JobgateError,
    LeaseLostError,
    NonRetryableError,
    NotFoundError,
    RetryableError,
    ValidationError,
)
from jobgate.core.models import DEFAULT_TENANT, Priority, Scope


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({}, "bad"),
        ({"field": "max_attempts"}, "max_attempts: bad"),
        ({"source": "cfg.yaml"}, "cfg.yaml: bad"),
        ({"field": "jitter", "source": "cfg.yaml"}, "cfg.yaml: jitter: bad"),
    ],
)
def test_error_message_names_source_and_field(kwargs: dict[str, str], text: str) -> None:
    error = ValidationError("bad", **kwargs)
    assert str(error) == text
    assert error.message == "bad"
    assert (error.field, error.source) == (kwargs.get("field"), kwargs.get("source"))


@pytest.mark.parametrize(
    ("cls", "code", "base"),
    [
        (JobgateError, "jobgate_error", Exception),
        (ValidationError, "validation_error", JobgateError),
        (ConfigurationError, "configuration_error", ValidationError),
        (NotFoundError, "not_found", JobgateError),
        (ConflictError, "conflict", JobgateError),
        (IllegalTransitionError, "illegal_transition", ConflictError),
        (LeaseLostError, "lease_lost", ConflictError),
    ],
)
def test_error_codes_and_hierarchy(cls: type[JobgateError], code: str, base: type[Exception]) -> None:
    assert cls.code == code
    assert issubclass(cls, base)


def test_handler_errors_carry_codes() -> None:
    assert NonRetryableError("x").error_code == "NON_RETRYABLE"
    assert NonRetryableError("x", error_code="BAD_PERIOD").error_code == "BAD_PERIOD"
    assert RetryableError("x").error_code == "RETRYABLE"
    assert not issubclass(NonRetryableError, JobgateError)


def test_priority_rank_orders_claims() -> None:
    assert [p.rank for p in Priority] == [0, 1, 2, 3, 4]
    assert sorted(Priority, key=lambda p: p.rank)[0] is Priority.CRITICAL
    assert Priority.BACKGROUND.rank > Priority.LOW.rank


def test_scope_round_trip() -> None:
    data = {"tenant_id": "acme", "environment": "prod", "region": "eu", "eco_number": "ECO-7", "b": 2}
    scope = Scope.from_dict(data)
    assert scope == Scope("acme", "prod", "eu", (("b", "2"), ("eco_number", "ECO-7")))
    assert scope.as_dict() == {
        "tenant_id": "acme",
        "environment": "prod",
        "region": "eu",
        "b": "2",
        "eco_number": "ECO-7",
    }
    assert Scope.from_dict(scope.as_dict()) == scope
    assert data["b"] == 2  # the input is not consumed


@pytest.mark.parametrize("data", [None, {}])
def test_scope_defaults(data: dict[str, str] | None) -> None:
    scope = Scope.from_dict(data)
    assert scope == Scope(DEFAULT_TENANT)
    assert scope.as_dict() == {"tenant_id": "default"}


def test_scope_key_order_does_not_matter() -> None:
    assert Scope.from_dict({"z": "1", "a": "2"}) == Scope.from_dict({"a": "2", "z": "1"})


def test_evolve_equals_dataclasses_replace_and_leaves_the_original_alone() -> None:
    import dataclasses

    from jobgate.core.states import RunStatus

    from .support import make_run

    run = make_run(status=RunStatus.DISPATCHED, attempt=1)
    evolved = run.evolve(status=RunStatus.RUNNING, attempt=2)
    assert evolved == dataclasses.replace(run, status=RunStatus.RUNNING, attempt=2)
    assert (run.status, run.attempt) == (RunStatus.DISPATCHED, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolved.attempt = 3  # type: ignore[misc]


def test_evolve_refuses_an_unknown_field() -> None:
    from .support import make_run

    with pytest.raises(TypeError, match="statuss"):
        make_run().evolve(statuss="RUNNING")
