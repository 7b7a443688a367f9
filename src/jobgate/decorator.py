"""``@jobgate.job``: a job definition declared in Python, next to the code it runs.

The decorator writes the same definition document a YAML file would (``document``), so there is
one definition model: ``jobgate apply --module`` parses it with the YAML's own rules and a YAML
file with the same content has the same digest, hence the same approval. What the decorator
adds is the parameters, read from the function's annotations:

=====================================  =================================================
annotation                             declared param
=====================================  =================================================
``str``                                ``type: string`` (the default safe pattern)
``Annotated[str, Param(pattern=…)]``   ``type: string`` with that pattern
``int`` / ``Decimal`` / ``bool``       ``type: integer`` / ``decimal`` / ``boolean``
``date`` / ``datetime``                ``type: date`` / ``datetime`` (with a UTC offset)
``Literal["a", "b"]``, an ``Enum``     ``choices`` (of strings or of integers)
``X | None = None``                    optional, no default
a default value                        ``default`` in its canonical text
=====================================  =================================================

``Param(description=…, minimum=…, maximum=…)`` in ``Annotated`` adds the rest. A ``float`` is
refused (``Decimal`` holds 0.1 exactly; a regulated amount must not drift). The document is
written in its minimal form (``type`` only when not ``string``, ``required`` only when true),
which is how a hand-written YAML file says the same.

Calling: the worker resolves ``handler`` (``module:function``) to the ``JobFunction`` and calls
it with the run's context; it converts each stored canonical text back to the annotated type
(``Decimal("10.5")``, ``date(2026, 12, 4)``, the ``Enum`` member) and calls the function with
them as keywords, and a parameter named ``ctx`` (or annotated ``ExecutionContext``) receives the
context. A returned dataclass or pydantic model becomes the run's JSON result.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal, get_args, get_origin

from jobgate.context import ExecutionContext
from jobgate.core.definition_fields import DEFINITION_FIELDS
from jobgate.core.params import ParamValueError, canonical, number_text, typed

# What the decorator derives itself, so a caller cannot also pass it.
_DERIVED = frozenset({"job_definition_id", "handler", "runner", "target_engine_meid", "workflow", "params", "body"})
_SCALARS: dict[type, str] = {bool: "boolean", int: "integer", Decimal: "decimal", datetime: "datetime", date: "date"}


@dataclass(frozen=True)
class Param:
    """Extra rules for one parameter, given as ``Annotated[T, Param(...)]``."""

    description: str = ""
    pattern: str | None = None
    minimum: int | Decimal | str | None = None
    maximum: int | Decimal | str | None = None


class DeclarationError(TypeError):
    """A function ``@jobgate.job`` cannot declare: raised at import, naming the parameter."""


@dataclass(frozen=True)
class _Declared:
    """One parameter: its declaration (the document's entry) and how to convert it back."""

    name: str
    entry: dict[str, Any]
    kind: str
    convert: Callable[[Any], Any] | None  # an Enum class, or None for the plain typed value


class JobFunction:
    """A function declared as a job: callable by the worker as ``fn(ctx)``; ``document`` is
    its definition; ``fn`` is the undecorated function (call it directly in unit tests)."""

    def __init__(self, fn: Callable[..., Any], fields: Mapping[str, Any]) -> None:
        self.fn = fn
        self.module = fn.__module__
        self.handler = f"{fn.__module__}:{fn.__qualname__}"
        if "<locals>" in fn.__qualname__ or fn.__module__ == "__main__":
            raise DeclarationError(
                f"{self.handler}: a job must be a module-level function of an importable module, "
                "so a worker can import it by name"
            )
        if inspect.iscoroutinefunction(fn):
            raise DeclarationError(f"{self.handler}: handlers are synchronous functions")
        self._ctx_name, self._params = _declare(fn, self.handler)
        params = [p.entry for p in self._params]
        self.document: dict[str, Any] = {**fields, "handler": self.handler, **({"params": params} if params else {})}
        self.job_definition_id: str = fields["job_definition_id"]
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    def __call__(self, ctx: ExecutionContext) -> object:
        kwargs: dict[str, Any] = {}
        for p in self._params:
            if p.name in ctx.params:
                value = typed(p.kind, ctx.params[p.name])
                kwargs[p.name] = p.convert(value) if p.convert is not None else value
        if self._ctx_name is not None:
            kwargs[self._ctx_name] = ctx
        return _as_json(self.fn(**kwargs))

    def __repr__(self) -> str:
        return f"<jobgate job {self.job_definition_id} ({self.handler})>"


def job(
    job_definition_id: str,
    *,
    job_class: str,
    priority: str | None = None,
    description: str | None = None,
    retry_policy: str | None = None,
    timeout_policy: str | None = None,
    sla_policy: str | None = None,
    queue: str | None = None,
    tenant_id: str | None = None,
    **more: Any,
) -> Callable[[Callable[..., Any]], JobFunction]:
    """Declare the decorated function as job ``job_definition_id``. The keywords are the
    definition's fields (``jobgate.definitions.DEFINITION_FIELDS``: ``trigger_type``,
    ``schedule_expression``, ``concurrency_limit``, ``code``, ...); ``None`` leaves one out."""
    named = {
        "priority": priority,
        "description": description,
        "retry_policy": retry_policy,
        "timeout_policy": timeout_policy,
        "sla_policy": sla_policy,
        "queue": queue,
        "tenant_id": tenant_id,
    }
    for key in more:
        if key in _DERIVED or key not in DEFINITION_FIELDS:
            why = "is derived from the function" if key in _DERIVED else "is not a definition field"
            raise DeclarationError(f"job({job_definition_id!r}): {key!r} {why}")
    fields = {"job_definition_id": job_definition_id, "job_class": job_class, **named, **more}
    fields = {k: v for k, v in fields.items() if v is not None}

    def declare(fn: Callable[..., Any]) -> JobFunction:
        return JobFunction(fn, fields)

    return declare


def _declare(fn: Callable[..., Any], handler: str) -> tuple[str | None, list[_Declared]]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an annotation naming what the module cannot resolve
        raise DeclarationError(f"{handler}: cannot read its annotations: {exc}") from None
    ctx_name: str | None = None
    out: list[_Declared] = []
    for name, parameter in inspect.signature(fn).parameters.items():
        where = f"{handler}: parameter {name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise DeclarationError(f"{where}: a job's parameters are named (no *args, **kwargs or positional-only)")
        hint = hints.get(name, inspect.Parameter.empty)
        if name == "ctx" or hint is ExecutionContext:
            ctx_name = name
            continue
        if hint is inspect.Parameter.empty:
            raise DeclarationError(f"{where}: annotate it (str, int, Decimal, date, datetime, bool, Literal, Enum)")
        out.append(_parameter(where, name, hint, parameter.default))
    return ctx_name, out


def _parameter(where: str, name: str, hint: Any, default: Any) -> _Declared:
    extra = Param()
    if get_origin(hint) is typing.Annotated:
        hint, *metadata = get_args(hint)
        for item in metadata:
            if isinstance(item, Param):
                extra = item
    optional = False
    if get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not type(None)]
        if len(members) != 1 or len(get_args(hint)) != 2:
            raise DeclarationError(f"{where}: one type, optionally `| None` (not a union of {hint})")
        hint, optional = members[0], True
    kind, choices, convert = _kind(where, hint)
    entry: dict[str, Any] = {"name": name}
    if kind != "string":
        entry["type"] = kind
    if choices:
        entry["choices"] = choices
    for key, value in (("pattern", extra.pattern), ("minimum", extra.minimum), ("maximum", extra.maximum)):
        if value is not None:
            entry[key] = value if key == "pattern" else _text(where, kind, value)
    if default is inspect.Parameter.empty:
        if optional:
            raise DeclarationError(f"{where}: an optional parameter needs a default (`= None`)")
        entry["required"] = True
    elif default is not None:
        entry["default"] = _text(where, kind, default.value if isinstance(default, enum.Enum) else default)
    elif not optional:
        raise DeclarationError(f"{where}: a default of None needs the type `{_name(hint)} | None`")
    if extra.description:
        entry["description"] = extra.description
    return _Declared(name, entry, kind, convert)


def _kind(where: str, hint: Any) -> tuple[str, list[Any], Callable[[Any], Any] | None]:
    """The declared type, its choices, and the conversion back (an Enum) for one annotation."""
    if hint is float:
        raise DeclarationError(f"{where}: float cannot hold 0.1 exactly; use Decimal")
    if hint is str:
        return "string", [], None
    if isinstance(hint, type) and hint in _SCALARS:
        return _SCALARS[hint], [], None
    values: list[Any]
    convert: Callable[[Any], Any] | None = None
    if get_origin(hint) is Literal:
        values = list(get_args(hint))
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        values, convert = [member.value for member in hint], hint
    else:
        supported = "str, int, Decimal, bool, date, datetime, Literal, Enum"
        raise DeclarationError(f"{where}: unsupported type {_name(hint)} ({supported})")
    if values and all(isinstance(v, str) for v in values):
        return "string", values, convert
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer", values, convert
    raise DeclarationError(f"{where}: choices must be all strings or all integers")


def _text(where: str, kind: str, value: Any) -> str:
    try:
        return value if kind == "string" else canonical(kind, _plain(value))
    except ParamValueError as exc:
        raise DeclarationError(f"{where}: {value!r}: {exc}") from None


def _plain(value: Any) -> Any:
    """A Python default as the text or number a submission would carry."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return number_text(value)
    return value


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or repr(hint)


def _as_json(value: object) -> object:
    """A dataclass or pydantic model as its JSON object; Decimal, dates and Enums as their text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif hasattr(value, "model_dump") and callable(value.model_dump):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        try:
            return json.loads(json.dumps(value, default=_json_default))
        except (TypeError, ValueError):
            return value  # the executor refuses it as INVALID_RESULT, naming the cause
    return value


def _json_default(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")
