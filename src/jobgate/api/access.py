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

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from jobgate.api.errors import BadRequest, Forbidden
from jobgate.core.models import JobRun
from jobgate.core.tokens import Role
from jobgate.service import tokens
from jobgate.service.tokens import Principal

F = TypeVar("F", bound=Callable[..., Any])
RULE_ATTRIBUTE = "__jobgate_rule__"


# Decoded control characters (NUL above all: no database text type stores it), or their
# percent-encodings in the raw query.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]|%[01][0-9a-fA-F]|%7[fF]")


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


def rule_of(endpoint: Any) -> Rule | None:
    return getattr(endpoint, RULE_ATTRIBUTE, None)


def check_role(rule: Rule, principal: Principal) -> None:
    """Raise ``Forbidden`` naming the scope and the roles that have it."""
    if rule.roles is not None and principal.role not in rule.roles:
        needed = ", ".join(sorted(r.value for r in rule.roles))
        raise Forbidden(f"role {principal.role.value} lacks {rule.scope!r} (needs one of: {needed})", field="role")


def check_run_access(rule: Rule, principal: Principal, run: JobRun) -> None:
    """Ownership: an owner-limited role acts only on the runs it requested."""
    if principal.role in rule.owner_roles and run.requested_by != principal.actor:
        raise Forbidden(f"role {principal.role.value} may act on its own runs only", field="job_run_id")


async def enforce(request: Request) -> None:
    """Application-wide dependency: authenticate and authorise before the handler runs."""
    route = request.scope.get("route")
    rule = rule_of(getattr(route, "endpoint", None))
    if _CONTROL.search(request.url.path) or _CONTROL.search(request.url.query):
        raise BadRequest("control characters are not accepted in the path or the query", field="url")
    if rule is None:
        raise Forbidden("this route has no access rule (deny by default)")
    if rule.anonymous:
        return
    server = request.app.state.server
    principal: Principal
    if server.auth:
        principal = await run_in_threadpool(tokens.authenticate, server.engine, request.headers.get("authorization"))
    else:
        principal = server.local_principal
    request.state.principal = principal  # known before the role check: a refusal is attributed
    request.state.rule = rule
    check_role(rule, principal)


def principal(request: Request) -> Principal:
    """The caller, as ``enforce`` established it (a handler dependency)."""
    found: Principal = request.state.principal
    return found


def route_rule(request: Request) -> Rule:
    found: Rule = request.state.rule
    return found
