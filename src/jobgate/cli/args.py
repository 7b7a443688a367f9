"""Argument parsing shared by several commands."""

from __future__ import annotations

import math
from typing import Any

import click

from jobgate.core.errors import ValidationError


def parse_params(values: tuple[str, ...]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(f"{item!r} is not of the form key=value", field="--param")
        if key in params:  # which value counts would be a guess: say so, store nothing
            raise ValidationError(f"{key!r} is given more than once ({params[key]!r}, {value!r})", field="--param")
        params[key] = value
    return params


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf``: NaN compares false with every
    bound, so it passed the range and crashed later (``timedelta(seconds=nan)``, exit 70)."""

    name = "finite number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
