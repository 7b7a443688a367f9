"""What a handler's module defines, read from its source without running it.

Applying a definition refuses, before anything is stored, a handler that cannot work here: a
module that is not there, a name it does not define, a coroutine, a handler asking for
jobgate's host from a module nobody trusted. Importing the module to find out ran its
module-level code in the process that applies (the server at start-up, the CLI): code no one
had approved yet, next to the database and the tokens. So the module is found as the import
system would find it (``code.locate_handler``) and its source parsed (``ast``).

Only what the source shows for certain is refused: a name bound nowhere in a module that makes
no names at run time, a name bound only by ``async def`` (undecorated), only to a constant or
only by ``import`` (a module),
a function decorated with ``host_job`` (under any name it was imported as) or assigned from a
call of it. Everything else (a name a ``global`` statement, ``globals()``, ``setattr`` or
``exec`` may make, a star import, a module ``__getattr__``, a re-export) is the worker's to
check: it imports the handler after the gates, and checks it again there.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Sequence

from jobgate.core.errors import ValidationError
from jobgate.governance import code

# Calls through which a module can bind names this reading cannot list.
_DYNAMIC_CALLS = frozenset({"globals", "vars", "setattr", "exec", "eval", "__import__", "locals"})
_HOST_MODULES = frozenset({"jobgate.governance.code", "jobgate"})
_HOST_CODE = frozenset(sys.stdlib_module_names) | {"jobgate"}  # top-level packages no job approval binds


def check_handler_source(handler: str, trusted: Sequence[str]) -> None:
    """Refuse (``ValidationError``, field ``handler``) what ``handler``'s module source shows
    for certain cannot run (see the module's docstring)."""
    code.locate_handler(handler)  # found without running anything, or CodeUnreadable
    module_name, _, attr_path = handler.partition(":")
    origin = code.module_source(module_name)
    if origin is None:  # compiled, built in, in an archive: only an import can tell
        return
    try:
        with open(origin, "rb") as fh:
            scope = _scope_of(origin, fh.read())
    except SyntaxError as exc:
        raise ValidationError(
            f"cannot import module {module_name!r}: SyntaxError: {exc.msg} (line {exc.lineno})", field="handler"
        ) from None
    except (OSError, ValueError) as exc:
        raise ValidationError(f"cannot read module {module_name!r}: {exc}", field="handler") from None
    if scope.dynamic:
        return
    first, _, rest = attr_path.partition(".")
    bindings = scope.bindings.get(first, [])
    if not bindings:
        raise ValidationError(
            f"{handler!r}: {module_name!r} has no attribute {first!r} (its source binds no such name)",
            field="handler",
        )
    if rest:  # Class.method: only a class bound once, whose own body binds no such name, is refused
        if len(bindings) == 1 and isinstance(bindings[0], ast.ClassDef):
            inner = _ModuleScope(ast.Module(body=bindings[0].body, type_ignores=[]))
            if not inner.dynamic and rest.partition(".")[0] not in inner.bindings:
                raise ValidationError(f"{handler!r}: {module_name!r} has no attribute {attr_path!r}", field="handler")
        return
    if all(isinstance(b, ast.AsyncFunctionDef) and not b.decorator_list for b in bindings):
        raise ValidationError(f"{handler!r} is a coroutine function; handlers are synchronous", field="handler")
    if all(isinstance(b, ast.Assign | ast.AnnAssign) and isinstance(b.value, ast.Constant) for b in bindings):
        raise ValidationError(f"{handler!r} is not callable", field="handler")
    if all(isinstance(b, ast.Import) for b in bindings):  # ``import os``: the name is a module
        raise ValidationError(f"{handler!r} is a module (imported by {module_name!r}), not callable", field="handler")
    if any(scope.asks_for_host(b) for b in bindings):
        code.check_host_allowed(handler, trusted)


def reexported_from(module_name: str, name: str, *, limit: int = 32) -> list[str]:
    """The modules ``name`` may come from when ``module_name`` does not define it itself, as
    their sources show: imported (``from .helper import run``, under another name too), assigned
    (``run = impl.run`` after ``from . import impl``; ``run = _r``), or offered by a star import
    (``from .impl import *``), followed from module to module, every branch (a ``try``/``except``
    fallback's too). An approval narrowed by ``code:`` binds these (``code.CodeReader``): editing
    the function's own body would otherwise run under the approval of a file that merely
    re-exports it (found by two reviews)."""
    out: list[str] = []
    queue: list[tuple[str, str]] = [(module_name, name)]
    seen: set[tuple[str, str]] = set()
    while queue and len(seen) < limit:
        current, wanted = queue.pop(0)
        if (current, wanted) in seen:
            continue
        seen.add((current, wanted))
        read = _read_module(current)
        if read is None:
            continue
        scope, package = read
        for source, source_name in _sources(current, scope, wanted, package=package, depth=0):
            if source != module_name and source not in out:
                out.append(source)
            queue.append((source, source_name))
    return out


def _read_module(module_name: str) -> tuple[_ModuleScope, bool] | None:
    """A module's top-level bindings, read from its source (None: no source to read), and
    whether it is a package."""
    try:
        origin = code.module_source(module_name)
    except code.CodeUnreadable:
        return None
    if origin is None:
        return None
    try:
        with open(origin, "rb") as fh:
            return _scope_of(origin, fh.read()), origin.endswith("__init__.py")
    except (OSError, SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _scope_of(origin: str, source: bytes) -> _ModuleScope:
    """A module's top-level bindings from its source text (``SyntaxError``, ``ValueError``
    when it does not parse), parsed once per content: applying a batch of definitions of one
    module parsed it for each (half an apply's time), and reading the bytes is what tells a
    changed file, whatever its times say."""
    return _ModuleScope(ast.parse(source, filename=origin))


def _sources(module_name: str, scope: _ModuleScope, name: str, *, package: bool, depth: int) -> list[tuple[str, str]]:
    """Where the module's binding(s) of ``name`` come from: (module, name there) pairs."""
    if depth > 8:
        return []
    out: list[tuple[str, str]] = []
    for bound in scope.bindings.get(name, []):
        if isinstance(bound, ast.ImportFrom):
            base = _absolute(module_name, bound, package=package)
            for alias in bound.names:
                if base is not None and (alias.asname or alias.name) == name:
                    out.append((base, alias.name))
                    out.append((f"{base}.{alias.name}", alias.name))  # ``from pkg import sub``: a submodule
        elif isinstance(bound, ast.Assign | ast.AnnAssign) and bound.value is not None:
            value = bound.value
            if isinstance(value, ast.Name) and value.id != name:  # ``run = _r``
                out += _sources(module_name, scope, value.id, package=package, depth=depth + 1)
            else:  # ``run = impl.run``, ``run = a.b.run``, or built by a call or another expression
                # (``functools.partial(impl.real)``, ``impl.make()``, ``make()``): the body may be
                # in any module the expression names (found by two reviews: an edit of the body
                # ran under an approval narrowed to the assigning file).
                out += _expression_sources(module_name, scope, value, name, package=package, depth=depth)
        elif isinstance(bound, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for decorator in bound.decorator_list:  # ``@helper.wrap``: what runs may be the decorator's
                out += _expression_sources(module_name, scope, decorator, name, package=package, depth=depth)
    for star in scope.stars:  # ``from .impl import *`` may offer any name
        base = _absolute(module_name, star, package=package)
        if base is not None:
            out.append((base, name))
    # The standard library is the interpreter's and jobgate the host's (``@jobgate.job``), not code
    # an approval of a job binds.
    return [pair for pair in out if pair[0].partition(".")[0] not in _HOST_CODE and _read_module(pair[0]) is not None]


def _expression_sources(
    module_name: str, scope: _ModuleScope, expr: ast.AST, name: str, *, package: bool, depth: int
) -> list[tuple[str, str]]:
    """The (module, name there) pairs an expression names: each dotted name through the modules
    its first part is bound to (``a.b.run`` after ``import a.b``: ``a``'s ``b``, ``a.b``'s
    ``run``), and each plain name through where the module binds it."""
    out: list[tuple[str, str]] = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute):
            chain: list[str] = []
            current: ast.AST = node
            while isinstance(current, ast.Attribute):
                chain.insert(0, current.attr)
                current = current.value
            if isinstance(current, ast.Name):
                for held in _modules_bound_as(module_name, scope, current.id, package=package):
                    out += [(".".join([held, *chain[:i]]), chain[i]) for i in range(len(chain))]
        elif isinstance(node, ast.Name) and node.id != name:
            out += _sources(module_name, scope, node.id, package=package, depth=depth + 1)
    return out


def _modules_bound_as(module_name: str, scope: _ModuleScope, alias_name: str, *, package: bool) -> list[str]:
    """The modules a name stands for: ``import a.b as x`` (``a.b``), ``import a`` (``a``),
    ``from . import impl`` (the package's ``impl``)."""
    out: list[str] = []
    for bound in scope.bindings.get(alias_name, []):
        if isinstance(bound, ast.Import):
            for alias in bound.names:
                if alias.asname == alias_name:
                    out.append(alias.name)
                elif alias.asname is None and alias.name.split(".")[0] == alias_name:
                    out.append(alias_name)
        elif isinstance(bound, ast.ImportFrom):
            base = _absolute(module_name, bound, package=package)
            for alias in bound.names:
                if base is not None and (alias.asname or alias.name) == alias_name:
                    out.append(f"{base}.{alias.name}")
    return out


def _absolute(module_name: str, imp: ast.ImportFrom, *, package: bool) -> str | None:
    """The module an ``ImportFrom`` in ``module_name`` reads from (relative ones resolved)."""
    if not imp.level:
        return imp.module
    parts = module_name.split(".") if package else module_name.split(".")[:-1]
    if imp.level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (imp.level - 1)]
    return ".".join([*base, imp.module] if imp.module else base) or None


def _binds_at_run_time(node: ast.AST) -> bool:
    if isinstance(node, ast.Global):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC_CALLS


class _ModuleScope(ast.NodeVisitor):
    """Every statement binding a name at a module's own level (through any compound statement,
    not into functions, classes or lambdas), by name; ``dynamic`` when the module may bind
    names this cannot list."""

    def __init__(self, tree: ast.Module) -> None:
        self.bindings: dict[str, list[ast.AST]] = {}
        self.stars: list[ast.ImportFrom] = []  # ``from X import *``: any name may come from X
        self.host_names: set[str] = {"host_job"}
        self.dynamic = False
        self._statement: ast.AST | None = None
        for stmt in tree.body:
            self._visit_statement(stmt)
        # Anywhere, functions included: a ``global`` statement or such a call may bind any name.
        self.dynamic = self.dynamic or any(_binds_at_run_time(node) for node in ast.walk(tree))

    def asks_for_host(self, bound: ast.AST) -> bool:
        """A function decorated with ``host_job``, or a name assigned from a call of it."""
        if isinstance(bound, ast.FunctionDef):
            return any(self._is_host(d.func if isinstance(d, ast.Call) else d) for d in bound.decorator_list)
        if isinstance(bound, ast.Assign | ast.AnnAssign) and isinstance(bound.value, ast.Call):
            return self._is_host(bound.value.func)
        return False

    def _is_host(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.host_names
        return isinstance(node, ast.Attribute) and node.attr == "host_job"

    def _bind(self, name: str, node: ast.AST) -> None:
        self.bindings.setdefault(name, []).append(node)

    def _visit_statement(self, stmt: ast.stmt) -> None:
        self._statement = stmt
        self.visit(stmt)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__getattr__":  # PEP 562: any name may be answered at run time
            self.dynamic = True
        self._bind(node.name, node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._bind(node.name, node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name, node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass  # its parameters are its own

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0], node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.dynamic = True
                self.stars.append(node)
                continue
            if alias.name == "host_job" and node.module in _HOST_MODULES:
                self.host_names.add(alias.asname or alias.name)
            self._bind(alias.asname or alias.name, node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            assert self._statement is not None
            self._bind(node.id, self._statement)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            assert self._statement is not None
            self._bind(node.name, self._statement)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            assert self._statement is not None
            self._bind(node.name, self._statement)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            assert self._statement is not None
            self._bind(node.name, self._statement)
        for stmt in node.body:
            self.visit(stmt)

    def generic_visit(self, node: ast.AST) -> None:
        # A compound statement's inner statements bind at the module's level too: each is the
        # binding statement of what it binds (``run = None`` inside an ``if`` is that assignment).
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                outer = self._statement
                self._statement = child
                self.visit(child)
                self._statement = outer
            else:
                self.visit(child)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if "__getattr__" in names:
            self.dynamic = True
        if self._is_host(node.value):  # ``hj = code.host_job``: another name for the decorator
            self.host_names |= names
        self.generic_visit(node)
