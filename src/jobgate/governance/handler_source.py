"""What a handler's module defines, read from its source without running it.

Applying a definition refuses, before anything is stored, a handler that cannot work here: a
module that is not there, a name it does not define, a coroutine, a handler asking for
jobgate's host from a module nobody trusted. Importing the module to find out ran its
module-level code in the process that applies (the server at start-up, the CLI): code no one
had approved yet, next to the database and the tokens. So the module is found as the import
system would find it (``code.locate_handler``) and its source parsed (``ast``): what its top
level binds, and how. A worker still imports it (after the gates) and checks it again there,
so what cannot be told from the source (a name made at run time, a star import) is let
through here and refused there if it is wrong.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from jobgate.core.errors import ValidationError
from jobgate.governance import code


def check_handler_source(handler: str, trusted: Sequence[str]) -> None:
    """Refuse (``ValidationError``, field ``handler``) what ``handler``'s module source shows
    cannot run: its module is not importable here, it binds no such name at its top level, the
    name is a coroutine function or a constant, or it asks for the host from an untrusted module."""
    code.locate_handler(handler)  # found without running anything, or CodeUnreadable
    module_name, _, attr_path = handler.partition(":")
    origin = code.module_source(module_name)
    if origin is None:  # compiled, built in, in an archive: only an import can tell
        return
    try:
        with open(origin, "rb") as fh:
            tree = ast.parse(fh.read(), filename=origin)
    except SyntaxError as exc:
        raise ValidationError(
            f"cannot import module {module_name!r}: SyntaxError: {exc.msg} (line {exc.lineno})", field="handler"
        ) from None
    except (OSError, ValueError) as exc:
        raise ValidationError(f"cannot read module {module_name!r}: {exc}", field="handler") from None
    bound = dict(_bindings(tree.body))
    if "*" in bound or "__getattr__" in bound:  # names this source alone cannot list
        return
    first, _, rest = attr_path.partition(".")
    node = bound.get(first)
    if node is None:
        raise ValidationError(
            f"{handler!r}: {module_name!r} has no attribute {first!r} (nothing of that name at its top level)",
            field="handler",
        )
    if rest:  # Class.method: the class's own body, no deeper (the worker's import tells)
        if isinstance(node, ast.ClassDef) and rest.partition(".")[0] not in dict(_bindings(node.body)):
            raise ValidationError(f"{handler!r}: {module_name!r} has no attribute {attr_path!r}", field="handler")
        return
    if isinstance(node, ast.AsyncFunctionDef):
        raise ValidationError(f"{handler!r} is a coroutine function; handlers are synchronous", field="handler")
    if isinstance(node, ast.Constant):
        raise ValidationError(f"{handler!r} is not callable", field="handler")
    if isinstance(node, ast.FunctionDef) and any(_names_host_job(d) for d in node.decorator_list):
        code.check_host_allowed(handler, trusted)


def _bindings(body: list[ast.stmt]) -> Iterator[tuple[str, ast.AST]]:
    """The names a block binds at its own level (through ``if``, ``try``, ``with`` and loops,
    not into functions or classes), each with what it binds: the definition itself, the
    constant assigned, or the statement (an import, an assignment of anything else)."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield stmt.name, stmt
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            for target in targets:
                for name in _target_names(target):
                    yield name, value if isinstance(value, ast.Constant) else stmt
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                yield (alias.asname or alias.name.split(".")[0]), stmt
        elif isinstance(stmt, ast.If | ast.Try | ast.While | ast.For | ast.With):
            for block in ("body", "orelse", "finalbody"):
                yield from _bindings(getattr(stmt, block, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _bindings(handler.body)
            if isinstance(stmt, ast.For):
                for name in _target_names(stmt.target):
                    yield name, stmt


def _target_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)


def _names_host_job(decorator: ast.expr) -> bool:
    """``@host_job`` or ``@anything.host_job``."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    if isinstance(decorator, ast.Name):
        return decorator.id == "host_job"
    return isinstance(decorator, ast.Attribute) and decorator.attr == "host_job"
