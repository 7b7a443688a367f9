"""The command line's ``--param key=value`` pairs: every value kept as typed, nothing guessed."""

from __future__ import annotations

import pytest

from jobgate.cli.args import parse_params
from jobgate.core.errors import ValidationError


def test_pairs_become_params_and_a_value_may_hold_equals_signs() -> None:
    assert parse_params(("name=ada", "expr=a=b", "empty=")) == {"name": "ada", "expr": "a=b", "empty": ""}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("name",), "not of the form key=value"),
        (("=x",), "not of the form key=value"),
        (("name=ada", "name=bob"), "'name' is given more than once ('ada', 'bob')"),
        (("name=ada", "name=ada"), "more than once"),
    ],
)
def test_a_malformed_or_repeated_param_is_refused_naming_it(given: tuple[str, ...], said: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_params(given)
    assert err.value.field == "--param" and said in err.value.message
