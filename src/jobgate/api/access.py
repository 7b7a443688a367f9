"""Who may call which route: one rule per route, deny by default.

Every route handler carries a ``Rule`` (set with ``@allow(rule)``); the application-wide
``enforce`` dependency looks the rule up on the matched route before any handler code runs.
A route without a rule is refused with 403 — forgetting to write a rule can only make a
route unusable, never open. The matrix test walks the same rules, so the documentation of
who may do what and the behaviour cannot drift apart.

Roles include nothing implicitly (an admin is listed wherever an admin may act), so reading
a rule tells the whole story.
"""

from __future__ import annotations

import hmac
import json
from collections import abc
from collections.abc import Callable
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from jobgate.api.errors import BadRequest, Forbidden, TenantClaimMismatch
from jobgate.api.forms import form_of
from jobgate.core.audit import ACTING, Acting
from jobgate.core.models import JobRun
from jobgate.core.tokens import Role
from jobgate.identity.sessions import SESSION_COOKIE
from jobgate.service.tokens import Principal

F = TypeVar("F", bound=Callable[..., Any])
RULE_ATTRIBUTE = "__jobgate_rule__"


@dataclass(frozen=True)
class Rule:
    """``roles`` None: anonymous. ``scope`` names the permission in a 403 and in the docs.
    Roles in ``owner_roles`` may act only on runs they requested themselves."""

    scope: str
    roles: frozenset[Role] | None
    owner_roles: frozenset[Role] = frozenset()

    @property
    def anonymous(self) -> bool:
        return self.roles is None


ALL_ROLES = frozenset(Role)
PUBLIC = Rule("public", None)
READ = Rule("read", ALL_ROLES)
RUN = Rule("runs.run", frozenset({Role.ACTIVATOR, Role.OPERATOR, Role.ADMIN}))
# Activators act on their own runs only; operators and admins on any run of their tenant.
RUN_CONTROL = Rule("runs.control", frozenset({Role.ACTIVATOR, Role.OPERATOR, Role.ADMIN}), frozenset({Role.ACTIVATOR}))
OPERATE = Rule("operate", frozenset({Role.OPERATOR, Role.ADMIN}))
ADMIN = Rule("admin", frozenset({Role.ADMIN}))
AUDIT = Rule("audit", frozenset({Role.AUDITOR, Role.ADMIN}))
PROPOSE = Rule("requests.propose", frozenset({Role.CONSUMER, Role.ACTIVATOR, Role.OPERATOR, Role.ADMIN}))
REVIEW = Rule("requests.review", frozenset({Role.OPERATOR, Role.ADMIN}))
GOVERNANCE_READ = Rule("governance.read", frozenset({Role.OPERATOR, Role.AUDITOR, Role.ADMIN}))


def allow(rule: Rule) -> Callable[[F], F]:
    """Attach ``rule`` to a route handler (apply below the ``@router.get(...)`` line)."""

    def mark(handler: F) -> F:
        setattr(handler, RULE_ATTRIBUTE, rule)
        return handler

    return mark


CONSOLE_ATTRIBUTE = "__jobgate_console__"


def console(handler: F) -> F:
    """Mark a console page: its caller is the browser's session (a cookie) and its state-changing
    forms carry the session's CSRF token; an API route's caller is its ``Authorization`` header."""
    setattr(handler, CONSOLE_ATTRIBUTE, True)
    return handler


def rule_of(endpoint: Any) -> Rule | None:
    return getattr(endpoint, RULE_ATTRIBUTE, None)


def check_role(rule: Rule, principal: Principal) -> None:
    """Raise ``Forbidden`` naming the scope and the roles that have it."""
    if rule.roles is not None and principal.role not in rule.roles:
        needed = ", ".join(sorted(r.value for r in rule.roles))
        raise Forbidden(f"role {principal.role.value} lacks {rule.scope!r} (needs one of: {needed})", field="role")


def may_act_on(rule: Rule, principal: Principal, run: JobRun) -> bool:
    """Whether ``rule`` lets ``principal`` act on ``run``: its role, and for an owner-limited
    role, a run it requested itself. (A console page asks before drawing a button.)"""
    if rule.roles is not None and principal.role not in rule.roles:
        return False
    return principal.role not in rule.owner_roles or run.requested_by == principal.actor


def check_run_access(rule: Rule, principal: Principal, run: JobRun) -> None:
    """Ownership: an owner-limited role acts only on the runs it requested."""
    if principal.role in rule.owner_roles and not may_act_on(rule, principal, run):
        raise Forbidden(f"role {principal.role.value} may act on its own runs only", field="job_run_id")


# Headers a request gives once: one value counts, so two are refused rather than one guessed.
SINGLE_HEADERS = ("Authorization", "Idempotency-Key", "traceparent", "Last-Event-ID")


async def enforce(request: Request) -> None:
    """Application-wide dependency: authenticate and authorise before the handler runs."""
    route = request.scope.get("route")
    rule = rule_of(getattr(route, "endpoint", None))
    if rule is None:
        raise Forbidden("this route has no access rule (deny by default)")
    if rule.anonymous:
        return
    server = request.app.state.server
    for name in SINGLE_HEADERS:  # given twice, which one counts would be a guess
        if len(request.headers.getlist(name)) > 1:
            raise BadRequest(f"the {name} header is given more than once; send one", field=name)
    principal, csrf = await identify(server, request)
    request.state.principal = principal  # known before any check: a refusal is attributed, and drawn as a page
    # This request's task only; before any check, so every refusal's audit entry names the
    # credential it came through (a forged console form's too).
    ACTING.set(Acting(principal.actor, principal.credential, principal.display_name))
    if is_console(request):
        request.state.csrf = csrf
        if request.method not in ("GET", "HEAD", "OPTIONS") and server.auth:
            await check_csrf(request, csrf)
    request.state.rule = rule
    check_role(rule, principal)
    await check_tenant_claims(request, principal)
    check_query(request, route)
    await check_no_body(request, route)


async def identify(server: Any, request: Request) -> tuple[Principal, str]:
    """``caller_of_request``, on the event loop when that reads only this host's database file
    (``ServerState.identifies_locally``), else in a thread. A hop to a thread and back costs
    the loop, the one thread every request passes through, more than the read itself: with 16
    clients posting runs on SQLite, asking on the loop served 8 % more a second at 8 % less
    CPU a request (``benchmarks/api_load.py``, medians of 3 alternated runs)."""
    if server.identifies_locally(request, console=is_console(request)):
        return caller_of_request(server, request)
    found: tuple[Principal, str] = await run_in_threadpool(caller_of_request, server, request)
    return found


def is_console(request: Request) -> bool:
    """Whether the request is for a console page (its caller is the session)."""
    return bool(getattr(getattr(request.scope.get("route"), "endpoint", None), CONSOLE_ATTRIBUTE, False))


def caller_of_request(server: Any, request: Request) -> tuple[Principal, str]:
    """Who a request acts as, and its session's CSRF token (console pages; "" for the API): the
    session cookie for a console page, the ``Authorization`` header for an API route. Asked
    again by a long stream, so a revoked credential ends it."""
    if is_console(request):
        found: tuple[Principal, str] = server.session_principal(request.cookies.get(SESSION_COOKIE))
        return found
    return server.authenticate(request.headers.get("authorization")), ""


async def check_csrf(request: Request, expected: str) -> None:
    """A console form must carry its session's CSRF token (a field, or the ``X-CSRF-Token``
    header): a page of another site cannot make the browser submit it."""
    given = request.headers.get("x-csrf-token") or (await form_of(request)).get("csrf", "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page", field="csrf")


def _declared_query(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return names


def _repeatable_query(dependant: Any) -> set[str]:
    """The declared query parameters that take a list (``?status=A&status=B``)."""
    names = {p.alias for p in dependant.query_params if _is_list(p.field_info.annotation)}
    for sub in dependant.dependencies:
        names |= _repeatable_query(sub)
    return names


def _is_list(annotation: Any) -> bool:
    options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return any(get_origin(a) in (list, tuple, set, frozenset, abc.Sequence) for a in options)


_QUERY_NAMES: dict[int, tuple[frozenset[str], frozenset[str]]] = {}


def check_query(request: Request, route: Any) -> None:
    """A query parameter the route does not declare is refused, naming it: an unknown one (a
    misspelt filter, an ``expected_digest`` the route has no use for) must never be ignored.
    So is one given twice that takes one value (``?limit=2&limit=1``): which one counts would be
    a guess the caller never sees."""
    if not request.url.query:
        return
    key = id(route)
    found = _QUERY_NAMES.get(key)
    if found is None:
        found = _QUERY_NAMES[key] = (
            frozenset(_declared_query(route.dependant)),
            frozenset(_repeatable_query(route.dependant)),
        )
    names, repeatable = found
    for name in request.query_params:
        if name not in names and name not in _TENANT_KEYS:  # a tenant claim is checked on its own
            known = ", ".join(sorted(names)) or "none"
            raise BadRequest(f"this route has no query parameter {name!r} (it takes: {known})", field=name)
        if name not in repeatable and len(request.query_params.getlist(name)) > 1:
            raise BadRequest(f"the query parameter {name!r} takes one value; it is given more than once", field=name)
        if not is_console(request) and "" in request.query_params.getlist(name):
            # ``?job_definition_id=$JOB`` with the variable unset listed every run as if unfiltered
            # (found by a review); a console form's empty choice means "any" and is its own.
            raise BadRequest(f"the query parameter {name!r} is empty: leave it out to not use it", field=name)


def _takes_body(dependant: Any) -> bool:
    """Whether a route reads a body: a declared body model, or the request itself (a raw upload)."""
    return bool(dependant.body_params) or any(_takes_body(sub) for sub in dependant.dependencies)


_BODY_TAKEN: dict[int, bool] = {}
_NO_BODY = (b"", b"{}")


async def check_no_body(request: Request, route: Any) -> None:
    """A body sent to a route that takes none is refused (400, ``body``) unless it is empty or
    ``{}``: its reason or note would otherwise be dropped without a word, and bad JSON pass as
    good (found by a review: a retry's ``{"reason": …}`` was answered 201 and kept nowhere)."""
    if request.method not in ("POST", "PUT", "PATCH", "DELETE") or is_console(request):
        return
    key = id(route)
    takes = _BODY_TAKEN.get(key)
    if takes is None:
        dependant = route.dependant
        takes = _BODY_TAKEN[key] = dependant.request_param_name is not None or _takes_body(dependant)
    if takes:
        return
    if b"".join((await request.body()).split()) not in _NO_BODY:
        raise BadRequest("this route takes no body; send none (or {})", field="body")


# Where a body or a query may claim a tenant: the top level, a scope or a schedule, each document.
_TENANT_KEYS = ("tenant_id", "tenant")
_NESTED = ("scope", "schedule")


async def check_tenant_claims(request: Request, principal: Principal) -> None:
    """Seed 001: the tenant comes from the credential alone. A body or query naming another
    tenant is refused with 403 ``tenant_claim_mismatch``; naming the caller's own is harmless."""
    for key in _TENANT_KEYS:
        if any(value != principal.tenant_id for value in request.query_params.getlist(key)):
            raise TenantClaimMismatch(field=key)
    if request.method not in ("POST", "PUT", "PATCH", "DELETE"):
        return
    body = await request.body()
    if not body:
        return
    try:
        document = json.loads(body, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:  # {"params": ..., "params": ...}: which one counts would be a guess
        raise BadRequest(f"the JSON body gives the key {exc.key!r} more than once", field=exc.key) from None
    except RecursionError:  # nested past any body jobgate takes: said here, no route would
        raise BadRequest("the JSON body is nested too deeply", field="body") from None
    except ValueError:
        return  # not JSON: the route's own parsing says so
    for field, value in _claims(document):
        if value != principal.tenant_id:
            raise TenantClaimMismatch(field=field)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (``json``'s own rule keeps the last)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


def _claims(document: Any) -> list[tuple[str, Any]]:
    if not isinstance(document, dict):
        return []
    found = [(k, document[k]) for k in _TENANT_KEYS if document.get(k) is not None]
    for name in _NESTED:
        nested = document.get(name)
        if isinstance(nested, dict):
            found += [(f"{name}.{k}", nested[k]) for k in _TENANT_KEYS if nested.get(k) is not None]
    items = document.get("definitions")
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, dict) and item.get("tenant_id") is not None:
                found.append((f"definitions[{i}].tenant_id", item["tenant_id"]))
    return found


async def principal(request: Request) -> Principal:
    """The caller, as ``enforce`` established it (a handler dependency). ``async``: FastAPI runs
    a plain function dependency on a thread of its pool, a hop there and back for one attribute."""
    found: Principal = request.state.principal
    return found


def whole_tenant(caller: Annotated[Principal, Depends(principal)]) -> Principal:
    """The caller of a route that reads or changes the whole tenant (tokens, safe mode's switch,
    quotas, doctor, metrics, telemetry, the audit log): a token limited to definitions sees and
    changes only what its limit covers, so it is refused here, naming its limit."""
    if caller.jobs is not None:
        limit = ", ".join(caller.jobs[:5]) + (", ..." if len(caller.jobs) > 5 else "")
        raise Forbidden(
            f"this token is limited to definitions ({limit}); this route reads or changes the whole tenant",
            field="jobs",
        )
    return caller


WholeTenant = Annotated[Principal, Depends(whole_tenant)]


def route_rule(request: Request) -> Rule:
    found: Rule = request.state.rule
    return found
