"""Parameter validation and template rendering for command runners and body templates.

Rules, in order: an undeclared parameter is refused; a required one must be present; every
value must fully match its declared pattern (``re.fullmatch``, so a trailing newline cannot
sneak past ``$``), or the default safe pattern when none is declared; control characters
are refused everywhere. Rendering is plain substitution of ``{{name}}`` or ``{{.name}}``
(the seed 004 spelling); it never evaluates anything, and argv is passed to the process
without a shell, so a value can at worst be a strange but inert argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec

# No '/', no whitespace, no shell metacharacters, no leading '-' (a value must never become an
# option of the program it is passed to), not '.' or '..' (never a path step): safe as one argv
# element and as a file name.
DEFAULT_PARAM_PATTERN = r"(?!-)(?!\.{1,2}$)[A-Za-z0-9_.:@+=,-]{0,256}"
# C0 and C1 controls and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PLACEHOLDER = re.compile(r"\{\{\s*\.?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
RESERVED = frozenset({"tmpfile", "workdir", "run_id", "attempt"})


def validate_params(
    specs: Iterable[ParamSpec], values: Mapping[str, object], *, source: str = "params"
) -> dict[str, str]:
    """Return the complete, validated parameter map (defaults filled in) or raise."""
    by_name = {spec.name: spec for spec in specs}
    for name in values:
        if name not in by_name:
            raise ValidationError("not a declared parameter", field=f"params.{name}", source=source)
    out: dict[str, str] = {}
    for spec in by_name.values():
        raw = values.get(spec.name, spec.default)
        if raw is None:
            if spec.required:
                raise ValidationError("required parameter is missing", field=f"params.{spec.name}", source=source)
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise ValidationError("must be a string or a number", field=f"params.{spec.name}", source=source)
        value = str(raw)
        if _CONTROL.search(value):
            raise ValidationError(
                "control characters (newline, NUL, ...) are not allowed", field=f"params.{spec.name}", source=source
            )
        pattern = spec.pattern or DEFAULT_PARAM_PATTERN
        if re.fullmatch(pattern, value) is None:
            raise ValidationError(
                f"value does not match the declared pattern {pattern!r}", field=f"params.{spec.name}", source=source
            )
        out[spec.name] = value
    return out


def placeholders(template: str) -> set[str]:
    return set(_PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str], *, source: str = "template") -> str:
    """Substitute every placeholder; a placeholder with no value is an error, never blank."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValidationError(f"template references {{{{{name}}}}} which has no value", field=name, source=source)
        return values[name]

    return _PLACEHOLDER.sub(substitute, template)


def check_pattern(pattern: str, *, field: str, source: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValidationError(f"invalid regular expression: {exc}", field=field, source=source) from None
