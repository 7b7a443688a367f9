"""The overview's 24-hour chart: every run ended in the window is in one bar, stacked by
outcome, and every bar stays inside the drawing."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from jobgate.console.chart import BOTTOM, HOURS, OUTCOMES, TOP, throughput_chart, window_start
from jobgate.core.states import TERMINAL

SINCE = datetime(2026, 12, 3, 0, 0, tzinfo=UTC)
counts = st.lists(
    st.tuples(st.integers(min_value=-3, max_value=HOURS + 3), st.sampled_from(OUTCOMES), st.integers(0, 10**6)),
    max_size=60,
)


def test_every_final_status_has_its_place_in_the_stack() -> None:
    assert set(OUTCOMES) == {s.value for s in TERMINAL}


def test_the_window_ends_with_the_hour_under_way() -> None:
    now = datetime(2026, 12, 3, 14, 37, 5, tzinfo=UTC)
    assert window_start(now) == datetime(2026, 12, 2, 15, 0, tzinfo=UTC)


@given(counts)
def test_every_count_in_the_window_is_drawn_once_inside_the_plot(found: list[tuple[int, str, int]]) -> None:
    chart = throughput_chart(found, SINCE)
    inside = [(i, o, n) for i, o, n in found if 0 <= i < HOURS and n > 0]
    assert chart.total == sum(n for _, _, n in inside)
    assert sum(b.count for b in chart.bars) == chart.total
    assert chart.peak >= max((h.total for h in chart.hours), default=0)
    plot = chart.height - BOTTOM - TOP
    for bar in chart.bars:
        assert bar.y >= TOP - 1e-6 and bar.y + bar.height <= chart.height - BOTTOM + 1e-6
        assert abs(bar.height - plot * bar.count / chart.peak) < 1e-6
        assert bar.x >= 0 and bar.x + bar.width <= chart.width


def test_an_hours_outcomes_stack_with_success_at_the_base() -> None:
    chart = throughput_chart([(5, "FAILED", 2), (5, "COMPLETED", 6), (5, "CANCELLED", 2)], SINCE)
    stacked = [b for b in chart.bars if b.start == chart.hours[5].start]
    assert [b.outcome for b in stacked] == ["COMPLETED", "FAILED", "CANCELLED"]
    assert all(upper.y + upper.height == lower.y for lower, upper in pairwise(stacked))
    assert chart.peak == 10 and [v for _, v in chart.ticks] == [0, 5, 10]


def test_the_grid_rounds_up_to_one_two_or_five() -> None:
    assert [throughput_chart([(0, "COMPLETED", n)], SINCE).peak for n in (0, 1, 3, 7, 11, 101, 4000)] == [
        1,
        1,
        5,
        10,
        20,
        200,
        5000,
    ]
