"""Reading operator documents (YAML and JSON) and their typed fields, naming every refusal.

Definitions and the configuration file are both hand-written documents whose digest or
meaning must not depend on parser leniency, so the rules are stricter than the parsers':

- a duplicate key is an error (YAML and JSON parsers silently keep the last one, which would
  let a reviewer approve a file whose effective value is not the one they read);
- YAML timestamps stay strings (``2026-06-25`` is not turned into a ``date``), because every
  document must have a canonical JSON form and instants are written as ISO 8601 text;
- ``NaN`` and ``Infinity`` are refused, for the same reason;
- a syntax error names the line and column.

``Reader`` checks one value at a time against a rule and raises the caller's error class
(``ValidationError`` for definitions, ``ConfigurationError`` for the configuration file) with
the source file and the dotted key path, so both loaders say "file: field: rule" the same way.
This module is a leaf: it imports nothing from the rest of jobgate but the error classes, so
``jobgate.config`` can use it without an import cycle.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from datetime import timedelta
from difflib import get_close_matches
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import yaml

from jobgate.core.errors import ValidationError
from jobgate.core.tokens import TENANT_NAME, TENANT_RULE

MAX_DOCUMENT_BYTES = 1 << 20
"""Definitions and configuration are small; a larger file is almost surely a mistake."""

MAX_DURATION_SECONDS = 100 * 365 * 86400
"""Longer durations are typos (and ``1e300`` seconds overflows ``timedelta``)."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")
"""Identifiers (definition ids, runner and profile names, MEIDs, queues, tenants)."""

HANDLER_PATTERN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
HANDLER_RULE = "must be 'module:function' (e.g. jobgate.standins:hello)"

E = TypeVar("E", bound=StrEnum)

if TYPE_CHECKING:
    _BaseLoader = yaml.SafeLoader
else:  # the libyaml parser when available: same behaviour, several times faster
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(_BaseLoader):
    """Safe loader without implicit timestamps that refuses duplicate mapping keys."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
            seen.add(key)
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return result


def read_text(path: Path, *, error: type[ValidationError] = ValidationError) -> str:
    """Read a UTF-8 document, refusing missing, oversized or undecodable files by name."""
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise error(f"file is {size} bytes, larger than the {MAX_DOCUMENT_BYTES} allowed", source=source)
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error("no such file", source=source) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", source=source) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", source=source) from None


def parse_yaml(text: str, *, source: str, error: type[ValidationError] = ValidationError) -> Any:
    """Parse one YAML document with the strict rules above; a syntax error names its line."""
    try:
        value = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        raise error("invalid YAML" + _describe_yaml_error(exc), source=source) from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}", source=source) from None
    check_json_value(value, field="", source=source, error=error)
    return value


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    """`` at line 3, column 9: did not find expected ',' (while parsing ... started at line 2, ...)``."""

    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    mark = exc.problem_mark or exc.context_mark
    text = f" at {at(mark)}" if mark is not None else ""
    text += f": {exc.problem or exc.context or 'syntax error'}"
    if exc.problem and exc.context and exc.context_mark is not None:
        text += f" ({exc.context} started at {at(exc.context_mark)})"
    return text


def parse_json(text: str, *, source: str, error: type[ValidationError] = ValidationError) -> Any:
    """Parse JSON refusing duplicate keys and non-finite numbers; a syntax error names its line."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise error(f"duplicate key {key!r}", source=source)
            out[key] = value
        return out

    def constant(name: str) -> NoReturn:
        raise error(f"{name} has no canonical JSON form", source=source)

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise error(f"invalid JSON at {where}: {exc.msg}", source=source) from None


def check_json_value(value: Any, *, field: str, source: str, error: type[ValidationError]) -> None:
    """Refuse anything without a canonical JSON form (binary, sets, non-string keys, NaN)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise error(f"key {key!r} must be a string", field=field or None, source=source)
            _check_unicode(key, field=field, source=source, error=error)
            check_json_value(item, field=join(field, key), source=source, error=error)
    elif isinstance(value, str):
        _check_unicode(value, field=field, source=source, error=error)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_value(item, field=f"{field}[{index}]", source=source, error=error)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise error("must be a finite number", field=field or None, source=source)
    elif value is not None and not isinstance(value, str | int | bool):
        message = f"a {type(value).__name__} has no JSON form; quote it"
        raise error(message, field=field or None, source=source)


def _check_unicode(text: str, *, field: str, source: str, error: type[ValidationError]) -> None:
    """A lone surrogate (``"\\ud800"`` in JSON) is not Unicode text and has no UTF-8 encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        message = "contains a lone surrogate: not valid Unicode text"
        raise error(message, field=field or None, source=source) from None


def join(path: str, key: str | int) -> str:
    """``runners`` + ``etl`` -> ``runners.etl``; ``args`` + ``1`` -> ``args[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _host_encodable(host: str, url: str) -> bool:
    """Whether a URL's host can be asked for: an IP address, or a name every label of which
    encodes (1-63 characters once in IDNA form, a valid A-label where it is one). A host that
    cannot (``a..b``, a 70-character label, ``xn--zz``) failed only when a request was made, as
    an internal error."""
    import ipaddress

    import httpx

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        host.encode("idna")
        httpx.URL(url).host  # noqa: B018 -- the host decoded as httpx decodes it (A-labels checked)
    except (ValueError, UnicodeError, httpx.InvalidURL):  # InvalidURL is neither (found by a review)
        return False
    return True


class Reader:
    """Typed access to document values; every refusal names ``source``, the field path and the rule."""

    def __init__(self, source: str, error: type[ValidationError] = ValidationError) -> None:
        self.source = source
        self.error = error

    def fail(self, field: str | None, message: str) -> NoReturn:
        raise self.error(message, field=field or None, source=self.source)

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, f"must be a mapping, not {kind_of(value)}")
        return value

    def only_keys(self, data: Mapping[str, Any], field: str, known: Collection[str]) -> None:
        """Refuse unknown keys, suggesting the nearest known one: a typo must not be ignored."""
        for key in data:
            if key not in known:
                close = get_close_matches(key, list(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(join(field, key), f"unknown field{hint}")

    def string(self, value: Any, field: str, *, pattern: re.Pattern[str] | None = None, rule: str = "") -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, "must be a non-empty string")
        if pattern is not None and pattern.fullmatch(value) is None:
            self.fail(field, rule or f"must match {pattern.pattern!r}")
        return value

    def http_url(self, value: Any, field: str) -> str:
        """An ``http://`` or ``https://`` URL that can be taken apart: a host, a port that is a
        port, no space or control character. A URL that only starts right (``http://u:p@[::1/``)
        failed later, where it was used, as an internal error (exit 70). What is said about a
        refused URL never repeats it: it may carry a credential."""
        text = self.string(value, field)
        try:
            parts = urlsplit(text)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok, parts = False, None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or not port_ok
            or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text)
            or not _host_encodable(parts.hostname, text)
        ):
            self.fail(field, "must be an http:// or https:// URL with a host (and a port from 1 to 65535)")
        return text

    def text(self, value: Any, field: str) -> str:
        """A string that may be empty (descriptions, templates)."""
        if not isinstance(value, str):
            self.fail(field, f"must be a string, not {kind_of(value)}")
        return value

    def name(self, value: Any, field: str) -> str:
        return self.string(
            value,
            field,
            pattern=NAME_PATTERN,
            rule="must be 1-200 characters: letters, digits and _ . : - (starting with a letter or digit)",
        )

    def tenant(self, value: Any, field: str) -> str:
        """A tenant's name by the one rule tokens, ``--tenant`` and the API use: a name the
        configuration accepted but no token could name was served with ``--no-auth`` only, and
        refused by every command that asks for it (found by a review)."""
        return self.string(value, field, pattern=TENANT_NAME, rule=f"must be {TENANT_RULE}")

    def strings(self, value: Any, field: str, *, unique: bool = False) -> list[str]:
        items = self.sequence(value, field)
        out = [self.string(item, join(field, i)) for i, item in enumerate(items)]
        if unique:
            for i, item in enumerate(out):
                if item in out[:i]:
                    self.fail(join(field, i), f"duplicate entry {item!r}")
        return out

    def sequence(self, value: Any, field: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(field, f"must be a list, not {kind_of(value)}")
        return value

    def integer(self, value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, f"must be an integer, not {kind_of(value)}")
        if minimum is not None and value < minimum:
            self.fail(field, f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            self.fail(field, f"must be <= {maximum}")
        return value

    def number(self, value: Any, field: str, *, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(field, f"must be a number, not {kind_of(value)}")
        if positive and value <= 0:
            self.fail(field, "must be greater than 0")
        if not positive and value < 0:
            self.fail(field, "must not be negative")
        return float(value)

    def duration(self, value: Any, field: str, *, unit: float = 1.0, allow_zero: bool = False) -> timedelta:
        """A number of ``unit``-second steps as a ``timedelta``, bounded so it cannot overflow."""
        seconds = self.number(value, field, positive=not allow_zero) * unit
        if seconds > MAX_DURATION_SECONDS:
            self.fail(field, f"must be at most {MAX_DURATION_SECONDS / unit:.0f} (100 years)")
        return timedelta(seconds=seconds)

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, f"must be true or false, not {kind_of(value)}")
        return value

    def choice(self, value: Any, field: str, enum: type[E]) -> E:
        try:
            return enum(value)
        except (ValueError, TypeError):
            self.fail(field, "must be one of: " + ", ".join(member.value for member in enum))

    def known(self, value: Any, field: str, what: str, names: Iterable[str]) -> str:
        """A reference to a named entry of configuration (policy, profile, runner, target)."""
        text = self.string(value, field)
        options = sorted(names)
        if text not in options:
            listed = ", ".join(options) if options else "none are configured"
            self.fail(field, f"unknown {what} {text!r} (known: {listed})")
        return text


def kind_of(value: Any) -> str:
    """``a mapping``, ``a list``, ``null``...: how a refusal names what it found instead."""
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), f"a {type(value).__name__}"
    )
