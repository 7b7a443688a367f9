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


@pytest.mark.parametrize("given", ["nan", "NaN", "inf", "-inf", "1e400"])
def test_a_seconds_option_refuses_what_is_not_a_finite_number(given: str) -> None:
    """NaN compares false with every bound, so a plain range let it through to a crash."""
    import click
    from click.testing import CliRunner

    from jobgate.cli.args import FiniteFloat

    @click.command()
    @click.option("--every", type=FiniteFloat(-1e9, 1e9), required=True)
    def command(every: float) -> None:
        click.echo(f"every {every}")

    refused = CliRunner().invoke(command, ["--every", given])
    assert refused.exit_code == 2 and "--every" in refused.output
    assert CliRunner().invoke(command, ["--every", "2.5"]).output == "every 2.5\n"
