"""Conditions over recorded facts, and the episode rule that fires a policy once per episode.

A condition is ``<fact> <op> <number>`` (``replay.drift_ratio > 0.05``), with ``>``, ``>=``,
``<``, ``<=``, ``==``, ``!=``. An *episode* starts when the condition becomes true and ends when
it becomes false: a policy schedule fires at the start of each episode and never again until
the condition has been false in between, however often the fact is re-recorded meanwhile.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from jobgate.core.errors import ValidationError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_SHAPE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.:-]{0,199})\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*")


@dataclass(frozen=True)
class Condition:
    fact: str
    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.fact} {self.op} {self.threshold!r}"


def parse(text: str) -> Condition:
    """``fact op number``, or a ``ValidationError`` naming ``condition``."""
    match = _SHAPE.fullmatch(text or "")
    if match is None:
        raise ValidationError(
            f"{text!r}: expected '<fact> <op> <number>' with op one of {', '.join(_OPS)}", field="condition"
        )
    try:
        threshold = float(match.group(3))
    except ValueError:
        raise ValidationError(f"{text!r}: {match.group(3)!r} is not a number", field="condition") from None
    if not math.isfinite(threshold):
        raise ValidationError(f"{text!r}: the threshold must be finite", field="condition")
    return Condition(match.group(1), match.group(2), threshold)


@dataclass(frozen=True)
class EpisodeStep:
    fire: bool  # this observation starts an episode
    open: bool  # an episode is open after it


def step(was_open: bool, holds: bool) -> EpisodeStep:
    """The episode rule: fire on false -> true, re-arm on true -> false, nothing otherwise."""
    return EpisodeStep(fire=holds and not was_open, open=holds)
