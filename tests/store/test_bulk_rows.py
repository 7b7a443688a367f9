"""Bulk rows through ``driver``: what goes in comes back unchanged, and what a column cannot
hold is refused, on both backends (PostgreSQL takes the rows as binary arrays)."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from jobgate.service.engine import Engine
from jobgate.store.codec import TRANSITION_COLUMNS
from jobgate.store.sql import driver
from jobgate.store.tables import run_transitions
from jobgate.testing import connection

# Text as a driver can carry it: no NUL (PostgreSQL's text cannot hold one) and no lone surrogates.
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


def _row(i: int, reason: str, detail: str | None, attempt: int = 1) -> tuple[object, ...]:
    previous = None if i % 2 else "SCHEDULED"
    return (f"run-{i}", "default", previous, "RUNNING", attempt, reason, "tester", 10**15 + i, detail)


def _stored(engine: Engine) -> list[tuple[object, ...]]:
    with engine.store.read() as tx:
        names = ", ".join(TRANSITION_COLUMNS)
        return [tuple(r) for r in connection(tx).execute(text(f"SELECT {names} FROM run_transitions ORDER BY id"))]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(_TEXT, st.one_of(st.none(), _TEXT)), min_size=1, max_size=30))
def test_rows_come_back_exactly_as_they_went_in(engine: Engine, values: list[tuple[str, str | None]]) -> None:
    rows = [_row(i, reason[:64], detail) for i, (reason, detail) in enumerate(values)]
    with engine.store.write() as tx:
        connection(tx).execute(text("DELETE FROM run_transitions"))
        driver.insert_rows(connection(tx), run_transitions, TRANSITION_COLUMNS, rows)
    assert _stored(engine) == rows


@pytest.mark.parametrize("rows", [1, 2], ids=["one row (scalar parameters)", "two rows (arrays)"])
def test_a_value_longer_than_its_column_is_refused_not_cut_short(engine: Engine, rows: int) -> None:
    if engine.store.dialect == "sqlite":
        pytest.skip("SQLite does not enforce declared lengths")
    too_long = "r" * 65  # reason is VARCHAR(64)
    given = [_row(2, too_long, None)] if rows == 1 else [_row(1, "ok", None), _row(2, too_long, None)]
    with pytest.raises(psycopg.errors.StringDataRightTruncation), engine.store.write() as tx:
        driver.insert_rows(connection(tx), run_transitions, TRANSITION_COLUMNS, given)
    assert _stored(engine) == []  # nothing of the refused statement was stored


def test_only_arrays_of_one_value_become_scalar_parameters() -> None:
    sql = "SELECT * FROM unnest(%b::VARCHAR[], %b::BIGINT[]) AS x(a, b), unnest(%b::TEXT[]) AS y(c) WHERE %s = '%%'"
    text_, params = driver._one_row_form(sql, [["a"], [1], ["c1", "c2"], "k"])
    assert text_ == (
        "SELECT * FROM unnest(ARRAY[%b::VARCHAR], ARRAY[%b::BIGINT]) AS x(a, b), unnest(%b::TEXT[]) AS y(c)"
        " WHERE %s = '%%'"
    )
    assert params == ["a", 1, ["c1", "c2"], "k"]
    assert driver._one_row_form(sql, [["a", "b"], [1, 2], ["c"], "k"]) == (
        "SELECT * FROM unnest(%b::VARCHAR[], %b::BIGINT[]) AS x(a, b), unnest(ARRAY[%b::TEXT]) AS y(c) WHERE %s = '%%'",
        [["a", "b"], [1, 2], "c", "k"],
    )
    # a one-value array holding None stays a value: the row's NULL
    assert driver._one_row_form("SELECT unnest(%b::TEXT[])", [[None]]) == ("SELECT unnest(ARRAY[%b::TEXT])", [None])
    # statements without arrays, named parameters and SQLite's tuples go unchanged
    assert driver._one_row_form("SELECT %s", ["x"]) == ("SELECT %s", ["x"])
    assert driver._one_row_form("SELECT %(a)s", {"a": [1]}) == ("SELECT %(a)s", {"a": [1]})
    assert driver._one_row_form("SELECT ?", (["x"],)) == ("SELECT ?", (["x"],))
