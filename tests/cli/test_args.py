"""The command line's ``--param key=value`` pairs: every value kept as typed, nothing guessed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


SERVER_GIVEN = [
    (["--server", "http://127.0.0.1:9"], {}, "--server"),
    ([], {"JOBGATE_SERVER": "http://127.0.0.1:9"}, "$JOBGATE_SERVER"),
]


@pytest.mark.parametrize(("args", "env", "named"), SERVER_GIVEN)
def test_a_local_command_through_a_server_names_where_the_server_came_from(
    args: list[str], env: dict[str, str], named: str
) -> None:
    """Found by a review: with ``$JOBGATE_SERVER`` set, a local command blamed ``--server``,
    which was never typed."""
    from click.testing import CliRunner

    from jobgate.cli.root import cli

    result = CliRunner().invoke(cli, [*args, "definitions", "list"], env=env)
    refused = result.exception
    assert isinstance(refused, ValidationError) and refused.field == named
    assert f"({named} is set)" in refused.message


@pytest.mark.parametrize(
    "command",
    [
        ["submit", "job-a", "--tenant", "default"],
        ["submit", "job-a", "--tenant", "acme"],
        ["runs", "list", "--tenant", "default"],
    ],
)
def test_a_tenant_written_out_through_a_server_is_refused_whichever_it_names(command: list[str]) -> None:
    """Found by a review: through ``--server`` the token decides the tenant, and ``--tenant``
    was refused only when it differed from the default's name: ``--tenant default`` with
    another tenant's token acted in that other tenant, silently. A ``--tenant`` written out is
    refused, whatever it names, before anything is sent."""
    from click.testing import CliRunner

    from jobgate.cli.root import cli

    result = CliRunner().invoke(cli, ["--server", "http://127.0.0.1:9", "--token", "t", *command])
    refused = result.exception
    assert isinstance(refused, ValidationError) and refused.field == "--tenant"
    without = [word for word in command if word not in ("--tenant", command[-1])]
    unrefused = CliRunner().invoke(cli, ["--server", "http://127.0.0.1:9", "--token", "t", *without]).exception
    assert not (isinstance(unrefused, ValidationError) and unrefused.field == "--tenant")  # it got to the server


def _commands(group: Any, ctx: Any, path: str = "jobgate") -> Iterator[tuple[str, Any]]:
    import click

    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, f"{path} {name}")
        elif command is not None:
            yield f"{path} {name}", command


def test_every_tenant_option_takes_only_a_tenant_name() -> None:
    """Found by a review: ``--tenant ' default'`` (or a quote, or a name no tenant has the form
    of) gave read and maintenance commands "0 to delete", "none" or empty series, rc 0. Every
    command's ``--tenant`` now goes through one rule, which refuses it naming the option."""
    import click

    from jobgate.cli.args import _tenant_name
    from jobgate.cli.root import cli

    ctx = click.Context(cli)
    taking = [
        (path, option)
        for path, command in _commands(cli, ctx)
        for option in command.params
        if "--tenant" in getattr(option, "opts", ())
    ]
    assert len(taking) > 30, "the walk found the commands"
    assert [path for path, option in taking if option.callback is not _tenant_name] == []
    for bad in (" default", 'a"b', "", "x" * 65, "default\n"):
        with pytest.raises(ValidationError) as err:
            _tenant_name(ctx, taking[0][1], bad)
        assert err.value.field == "--tenant"
    assert _tenant_name(ctx, taking[0][1], "acme.eu") == "acme.eu"


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"server": {"tenant": "acme:prod"}}, "server.tenant"),
        ({"pubsub": {"tenant": "acme:prod"}}, "pubsub.tenant"),
    ],
)
def test_the_configuration_names_tenants_by_the_same_rule(tmp_path: Any, section: dict[str, Any], field: str) -> None:
    """Found by a regression review: ``server.tenant: acme:prod`` was accepted by the
    configuration, served with ``--no-auth``, and then refused by every ``--tenant`` and by the
    bootstrap token: one rule wherever a tenant's name comes from."""
    from jobgate.config import build_config
    from jobgate.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as err:
        build_config(section, base_dir=tmp_path, path=None)
    assert err.value.field == field and "1-64 letters" in err.value.message


@pytest.mark.parametrize("option", ["--job", "--class"])
def test_an_empty_runs_filter_is_refused_not_read_as_absent(tmp_path: Any, option: str) -> None:
    """Found by a regression review: ``runs list --job "$JOB"`` with the variable unset listed
    every run, where the API refuses ``?job_definition_id=``. The same rule at every door."""
    from click.testing import CliRunner

    from jobgate.cli.root import cli

    db = ["--db", f"sqlite:///{tmp_path}/x.db"]
    assert CliRunner().invoke(cli, [*db, "migrate"]).exit_code == 0
    result = CliRunner().invoke(cli, [*db, "runs", "list", option, " "])
    assert isinstance(result.exception, ValidationError) and result.exception.field in ("job", "job_class")
