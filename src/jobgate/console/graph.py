"""Where each step of a workflow goes in its drawing: a pure function of the steps and their
dependencies, so the layout is tested without a browser.

A step's column is the length of the longest chain of dependencies before it (a step comes
after everything it depends on: every arrow points right); its row is its order among the
steps of its column, in the definition's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BOX_WIDTH, BOX_HEIGHT = 180, 48
GAP_X, GAP_Y, MARGIN = 60, 24, 12


@dataclass(frozen=True)
class Box:
    step_id: str
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int


def layout(steps: Sequence[tuple[str, Sequence[str]]]) -> Layout:
    """``steps``: (id, the ids it depends on), in the definition's order; dependencies on ids
    not among the steps are ignored (a validated definition has none)."""
    known = {sid for sid, _ in steps}
    needs: Mapping[str, list[str]] = {sid: [d for d in deps if d in known] for sid, deps in steps}
    column: dict[str, int] = {}

    def depth(sid: str, seen: frozenset[str] = frozenset()) -> int:
        if sid in column:
            return column[sid]
        if sid in seen:  # a cycle (refused when a definition loads): drawn, not looped on
            return 0
        found = 1 + max((depth(d, seen | {sid}) for d in needs[sid]), default=-1)
        column[sid] = found
        return found

    rows: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    for sid, _ in steps:
        c = depth(sid)
        r = rows.get(c, 0)
        rows[c] = r + 1
        boxes[sid] = Box(sid, MARGIN + c * (BOX_WIDTH + GAP_X), MARGIN + r * (BOX_HEIGHT + GAP_Y))
    edges = [
        Edge(
            boxes[d].x + BOX_WIDTH,
            boxes[d].y + BOX_HEIGHT // 2,
            boxes[sid].x,
            boxes[sid].y + BOX_HEIGHT // 2,
        )
        for sid, _ in steps
        for d in needs[sid]
    ]
    columns = max(column.values(), default=0) + 1
    most_rows = max(rows.values(), default=1)
    return Layout(
        boxes=list(boxes.values()),
        edges=edges,
        width=2 * MARGIN + columns * BOX_WIDTH + (columns - 1) * GAP_X,
        height=2 * MARGIN + most_rows * BOX_HEIGHT + (most_rows - 1) * GAP_Y,
    )
