"""Tables print what they are given: a value is never read as rich's markup."""

from __future__ import annotations

import pytest

from jobgate.cli import render


def test_a_table_cell_prints_brackets_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    # A pattern in a refusal ("the pattern '[a-z0-9]{0,10}'") lost its brackets to markup.
    render.table("t", ["problem"], [["the pattern '[a-z0-9]{0,10}'"], ["[bold]not bold[/bold]"]])
    shown = capsys.readouterr().out
    assert "'[a-z0-9]{0,10}'" in shown and "[bold]not bold[/bold]" in shown
