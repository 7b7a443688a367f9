"""Argument parsing shared by several commands."""

from __future__ import annotations

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
