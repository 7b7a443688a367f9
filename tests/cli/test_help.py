"""Every command and every option says what it is for in ``--help`` (found by a review: sixteen
commands printed no description, seventy-eight options no help, ``--tenant`` almost everywhere)."""

from __future__ import annotations

import click

from jobgate.cli.root import cli


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        where = (*path, name)
        found.append((" ".join(where), command))
        if isinstance(command, click.Group):
            found += _commands(command, click.Context(command, parent=ctx), where)
    return found


def test_every_command_and_option_has_help() -> None:
    commands = _commands(cli, click.Context(cli))
    assert len(commands) > 100  # the whole tree was walked
    silent = [name for name, command in commands if not (command.help or command.short_help)]
    assert silent == []
    unexplained = [
        f"{name} {param.opts[0]}"
        for name, command in commands
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert unexplained == []
