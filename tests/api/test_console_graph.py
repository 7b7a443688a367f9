"""The workflow drawing's layout: every arrow points right, no two boxes overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobgate.console.graph import BOX_HEIGHT, BOX_WIDTH, layout


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    n = draw(st.integers(min_value=1, max_value=12))
    ids = [f"s{i}" for i in range(n)]
    return [(sid, draw(st.lists(st.sampled_from(ids[:i]), unique=True)) if i else []) for i, sid in enumerate(ids)]


@given(dags())
def test_every_arrow_points_right_and_no_boxes_overlap(steps: list[tuple[str, list[str]]]) -> None:
    drawn = layout(steps)
    assert len(drawn.boxes) == len(steps) and len(drawn.edges) == sum(len(d) for _, d in steps)
    for edge in drawn.edges:
        assert edge.x2 > edge.x1
    corners = {(b.x, b.y) for b in drawn.boxes}
    assert len(corners) == len(drawn.boxes)
    for box in drawn.boxes:
        assert box.x + BOX_WIDTH <= drawn.width and box.y + BOX_HEIGHT <= drawn.height


def test_parallel_steps_share_a_column_after_their_dependency() -> None:
    drawn = layout([("build", []), ("test", ["build"]), ("scan", ["build"]), ("release", ["test", "scan"])])
    x = {b.step_id: b.x for b in drawn.boxes}
    assert x["build"] < x["test"] == x["scan"] < x["release"]
