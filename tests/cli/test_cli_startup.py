"""The command line starts fast: ``--help`` loads no command, a command loads its own module
and what it needs; the table that lists commands without loading them stays true."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from jobgate.cli import cli
from jobgate.cli.root import COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_command_loads_and_its_summary_is_its_help(name: str) -> None:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None and command.name in {name, name.replace("-", "_")} | {command.name}
    first_paragraph = " ".join((command.help or "").split("\n\n")[0].split())
    assert first_paragraph.startswith(COMMANDS[name][2]), (name, first_paragraph)


def test_help_loads_no_command_module_and_no_database_layer() -> None:
    code = (
        "import sys\n"
        "from jobgate.cli import main\n"
        "sys.argv = ['jobgate', '--help']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith(('jobgate.cli.', 'jobgate.store', 'sqlalchemy', "
        "'jobgate.service', 'fastapi', 'pydantic')))\n"
        "    print('LOADED', loaded, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stderr.split("LOADED", 1)[1]
    for heavy in ("jobgate.cli.main", "jobgate.store", "sqlalchemy", "jobgate.service", "fastapi", "pydantic"):
        assert f"'{heavy}" not in loaded, (heavy, loaded)
    assert "Commands:" in proc.stdout and "workflows" in proc.stdout
