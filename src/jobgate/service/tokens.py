"""Creating, checking and revoking API tokens.

A token is shown once, when it is created; afterwards only its id, tenant, role, limits and
dates are ever shown. ``authenticate`` gives the same answer (``Unauthenticated``, a 401) for
a missing, malformed, unknown, wrong, revoked or expired token, so a caller learns nothing
about which; the reason goes to the log for the operator.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from jobgate.core import tokens as rules
from jobgate.core.audit import AuditEvent
from jobgate.core.errors import JobgateError, NotFoundError, ValidationError
from jobgate.core.governance import Person, folded
from jobgate.core.params import check_text
from jobgate.core.records import AuditFilter, StoredToken
from jobgate.core.tokens import TENANT_RULE, Role, is_tenant_name
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.tokens")

MAX_LIFETIME = timedelta(days=3650)
MINTED_WITH = "minted_with"  # the ``token.created`` entry's name for the credential that minted it


class Unauthenticated(JobgateError):
    code = "unauthenticated"


# A principal's name: what records name as the actor. ``token:`` is reserved (a token without a
# named principal is a principal of its own, ``token:<id>``), and so are the identity providers'
# prefixes (``oidc:<subject>``, ``ldap:<uid>``): no token can be minted in a signed-in person's name.
# jobgate's own processes are named in records too (``system``, ``scheduler``, ``jobgate:…``):
# a token named so would write entries that read as the system's.
RESERVED_PREFIXES = ("token:", "oidc:", "ldap:", "jobgate:", "offline-seed:")
RESERVED_NAMES = frozenset(
    {
        "jobgate", "system", "scheduler", "pubsub", "sla-monitor", "retention", "rescuer",
        "workflow-coordinator", "backfill", "bootstrap", "worker", "demo",
    }
)  # fmt: skip
# ... and the names a worker, a scheduler, a publisher or an SLA monitor gives itself when the
# operator names it not (``worker-<12 hex digits>``): they are the actors of claims and settlements.
GENERATED_NAME = re.compile(r"(?i:(?:worker|scheduler|publisher|sla)-[0-9a-f]{12})")
PRINCIPAL_NAME = re.compile(
    r"(?!(?i:token:|oidc:|ldap:|jobgate:|offline-seed:))[A-Za-z0-9_][A-Za-z0-9_.@:+=-]{0,199}"
)  # any case


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a named person (or service account), in one tenant, with one role,
    optionally limited to a list of definitions, through one credential: ``token:<id>`` for a
    jobgate token, ``oidc:<issuer>`` for a provider's JWT. ``minted_by``: the principals whose
    tokens minted this token, nearest first (four eyes treats them as one). ``display_name``:
    what the provider calls the person, for people reading records. ``expires_at``: a token's
    expiry, a JWT's ``exp``: no token it mints outlives it."""

    credential: str
    tenant_id: str
    role: Role
    jobs: tuple[str, ...] | None
    name: str | None = None
    minted_by: tuple[str, ...] = ()
    display_name: str | None = None
    expires_at: datetime | None = None  # when the credential itself stops being accepted (None: not by time)

    def may_use(self, job_definition_id: str) -> bool:
        return self.jobs is None or job_definition_id in self.jobs

    @property
    def actor(self) -> str:
        """How this principal is named in runs, transitions and records (``requested_by``): the
        person, or ``token:<id>`` for a token that names none."""
        return self.name or self.credential

    @property
    def holder(self) -> str:
        """What per-caller limits count against (open streams): a token, or a signed-in person
        (every person signed in through one provider shares its credential)."""
        return self.credential if self.credential.startswith("token:") else f"{self.credential}|{self.actor}"

    @property
    def person(self) -> Person:
        return Person(self.actor, self.minted_by)


@dataclass(frozen=True)
class CreatedToken:
    token: str  # the only time the raw value exists outside the caller's hands
    stored: StoredToken


def check_principal_name(name: str) -> str:
    if not PRINCIPAL_NAME.fullmatch(name) or name.lower() in RESERVED_NAMES or GENERATED_NAME.fullmatch(name):
        raise ValidationError(
            "1-200 letters, digits and _ . @ : + = -, starting with a letter, digit or _"
            " (token:, oidc:, ldap:, jobgate: and offline-seed: are reserved, and so are the names"
            f" jobgate's own processes act under: {', '.join(sorted(RESERVED_NAMES))}, and worker-,"
            " scheduler-, publisher- or sla- followed by 12 hexadecimal digits)",
            field="principal",
        )
    return name


def create(
    engine: Engine,
    *,
    tenant_id: str,
    role: str,
    actor: str,
    label: str = "",
    jobs: list[str] | None = None,
    expires_in: timedelta | None = None,
    now: datetime | None = None,
    principal: str | None = None,
    minted_by: Principal | None = None,
) -> CreatedToken:
    """Mint a token. ``principal``: the person (or service account) it belongs to. ``minted_by``:
    the API caller minting it; its principal and theirs are recorded as the new token's lineage,
    and without ``principal`` the token belongs to the minter (a second credential of the same
    person, never a second person). A token minted on the host names only its principal."""
    try:
        valid_role = Role(role)
    except ValueError:
        raise ValidationError(
            f"unknown role {role!r} (known: {', '.join(r.value for r in Role)})", field="role"
        ) from None
    if not is_tenant_name(tenant_id):
        raise ValidationError(TENANT_RULE, field="tenant")
    if len(label) > 200:
        raise ValidationError("at most 200 characters", field="label")
    check_text(label, "label")
    if expires_in is not None and not timedelta(0) < expires_in <= MAX_LIFETIME:
        raise ValidationError("must be positive and at most ten years", field="expires_in")
    if jobs is not None and (not jobs or any(not j for j in jobs)):
        raise ValidationError("name at least one definition, none empty", field="jobs")
    if principal is not None:
        check_principal_name(principal)
    now = now or engine.clock.now()
    expires_at = None if expires_in is None else now + expires_in
    if minted_by is not None and minted_by.expires_at is not None:
        # A credential cannot mint one that outlives it: a five-minute token (or JWT) minting a
        # token for ever was a way round its own expiry.
        expires_at = minted_by.expires_at if expires_at is None else min(expires_at, minted_by.expires_at)
        if expires_at <= now:
            raise ValidationError("the credential minting this token has expired", field="expires_in")
    lineage: tuple[str, ...] = ()
    if minted_by is not None:
        if principal is None:  # another credential of the minter: the same principal, the same lineage
            principal, lineage = minted_by.actor, minted_by.minted_by
        else:
            lineage = (minted_by.actor, *minted_by.minted_by)
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    stored = StoredToken(
        token_id=token_id,
        tenant_id=tenant_id,
        role=valid_role.value,
        jobs=None if jobs is None else tuple(dict.fromkeys(jobs)),
        label=label,
        secret_hash=rules.secret_hash(secret),
        created_by=actor,
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
        revoked_by=None,
        principal=principal,
        minted_by=lineage,
    )
    with engine.store.write() as tx:
        if minted_by is not None and minted_by.credential.startswith("token:"):
            _minter_still_valid(tx, minted_by.credential.removeprefix("token:"), now)
        tx.token_put(stored)
        payload = {
            "role": valid_role.value,
            "jobs": None if jobs is None else list(stored.jobs or ()),
            "label": label,
            "principal": stored.principal_name,
            "minted_by": list(lineage),
            # The credential that minted it (``token:<id>``): revoking that token revokes this one.
            MINTED_WITH: None if minted_by is None else minted_by.credential,
        }
        audit.record(tx, audit.event(tenant_id, actor, "token.created", "token", token_id, now, payload=payload))
    log.info(
        "token %s created for tenant %s, role %s, by %s",
        token_id,
        tenant_id,
        valid_role.value,
        actor,
        extra={"action": "token_created", "token_id": token_id},
    )
    return CreatedToken(rules.compose(token_id, secret), stored)


def _minter_still_valid(tx: StoreTx, token_id: str, now: datetime) -> None:
    """The minting token judged again under the write that stores what it mints: a request
    authenticated a moment before its token was revoked (or expired) would otherwise store a
    token the revocation never saw, as valid as ever. The row is locked (PostgreSQL) until the
    mint commits, so a revocation either waits for it and finds its child (``_revoke_with_minted``)
    or commits first and is read here."""
    ended = _ended(tx.token_get(token_id, lock=True), now)
    if ended is not None:
        raise refused(f"token {token_id} {ended} before what it minted was stored")


def _ended(stored: StoredToken | None, now: datetime) -> str | None:
    """Why a token no longer stands (``revoked or gone``, ``expired``), or None: one rule for a
    request's authentication, a console session and a mint judged again under its write."""
    if stored is None or stored.revoked_at is not None:
        return "revoked or gone"
    if stored.expires_at is not None and stored.expires_at <= now:
        return "expired"
    return None


def authenticate(engine: Engine, authorization: str | None, *, now: datetime | None = None) -> Principal:
    """The principal of an ``Authorization: Bearer <token>`` value, or ``Unauthenticated``."""
    scheme, _, raw = (authorization or "").partition(" ")
    parsed = rules.parse(raw) if scheme.lower() == "bearer" else None
    if parsed is None:
        raise refused("missing or malformed")
    token_id, secret = parsed
    with engine.store.read() as tx:
        stored = tx.token_get(token_id)
    if stored is None or not rules.secret_matches(secret, stored.secret_hash):
        raise refused(f"token {token_id} unknown or wrong secret")
    ended = _ended(stored, now or engine.clock.now())
    if ended is not None:
        raise refused(f"token {token_id} {ended}")
    return Principal(
        f"token:{stored.token_id}",
        stored.tenant_id,
        Role(stored.role),
        stored.jobs,
        stored.principal,
        stored.minted_by,
        expires_at=stored.expires_at,
    )


def check_still_valid(engine: Engine, token_id: str, *, now: datetime | None = None) -> None:
    """A console session of a token ends when the token does: revoked, expired or gone."""
    with engine.store.read() as tx:
        stored = tx.token_get(token_id)
    ended = _ended(stored, now or engine.clock.now())
    if ended is not None:
        raise refused(f"a session of token {token_id}, {ended}")


def refused(reason: str) -> Unauthenticated:
    log.info("authentication refused: %s", reason, extra={"action": "auth_refused"})
    return Unauthenticated("a valid bearer token is required")


def revoke(engine: Engine, tenant_id: str, token_id: str, *, actor: str, now: datetime | None = None) -> list[str]:
    """Revoke a token of ``tenant_id``, and every token minted with it (and with those, ...):
    a token minted by a token that is revoked (a leaked or de-provisioned credential) would
    otherwise outlive it. Another tenant's token answers like a missing one. Returns the ids
    revoked now (none when it was revoked already, and nothing it minted is still valid)."""
    now = now or engine.clock.now()
    with engine.store.write() as tx:
        stored = tx.token_get(token_id)
        if stored is None or stored.tenant_id != tenant_id:
            raise NotFoundError(f"no token {token_id!r}", field="token_id")
        revoked = _revoke_with_minted(tx, tenant_id, [token_id], actor, now, because=None)
    _logged(revoked, actor)
    return revoked


def revoke_principal(
    engine: Engine, tenant_id: str, principal: str, *, actor: str, now: datetime | None = None
) -> list[str]:
    """Revoke every token of ``tenant_id`` that belongs to ``principal`` or that it minted (its
    lineage names it), and every token minted with those: how a person who left (removed from
    the directory, ``ldap:<uid>`` / ``oidc:<subject>``) loses the tokens they minted."""
    now = now or engine.clock.now()
    with engine.store.write() as tx:
        who = folded(principal)  # as four eyes compares names: "eve" and "Eve" are one person
        theirs = [
            t.token_id
            for t in tx.tokens_list(tenant_id)
            if folded(t.principal_name) == who or who in {folded(m) for m in t.minted_by}
        ]
        revoked = _revoke_with_minted(tx, tenant_id, theirs, actor, now, because=f"principal {principal}")
    _logged(revoked, actor)
    return revoked


def _logged(revoked: list[str], actor: str) -> None:
    """Each revocation in the log, once its transaction has committed."""
    for rid in revoked:
        log.info("token %s revoked by %s", rid, actor, extra={"action": "token_revoked", "token_id": rid})


def _revoke_with_minted(
    tx: StoreTx, tenant_id: str, token_ids: list[str], actor: str, now: datetime, *, because: str | None
) -> list[str]:
    """Revoke ``token_ids`` and, breadth first, the tokens the audit log says were minted with
    any of them (its ``token.created`` entries name the minting credential: chained, so no
    database edit hides a child). Each revocation is an audit entry naming why.

    A mint commits only while its minter's row is unchanged (``_minter_still_valid`` locks it):
    once every token found is revoked here, a mint by one of them either committed before and is
    found by reading the log again, or waits and is refused. So the log is read until a reading
    finds no child not yet revoked (on SQLite, whose writes do not overlap, the second reading
    finds nothing new). The audit entries are appended last: the chain's head, locked by an
    append, is taken after the tokens' rows, in the order a mint takes them (no deadlock)."""
    revoked: list[str] = []
    events: list[AuditEvent] = []
    seen: set[str] = set()
    queue: deque[tuple[str, str | None]] = deque((t, because) for t in token_ids)
    minted = _minted_with(tx, tenant_id)
    while queue:
        while queue:
            token_id, why = queue.popleft()
            if token_id in seen:
                continue
            seen.add(token_id)
            if tx.token_revoke(tenant_id, token_id, actor, now):
                payload = None if why is None else {"with": why}
                events.append(audit.event(tenant_id, actor, "token.revoked", "token", token_id, now, payload=payload))
                revoked.append(token_id)
            queue.extend((child, f"token {token_id}") for child in minted.get(token_id, ()))
        minted = _minted_with(tx, tenant_id)
        queue.extend(
            (child, f"token {parent}") for parent in seen for child in minted.get(parent, ()) if child not in seen
        )
    if events:
        audit.record(tx, *events)
    return revoked


def _minted_with(tx: StoreTx, tenant_id: str) -> dict[str, list[str]]:
    """The tokens minted with each token of the tenant, as its ``token.created`` entries say."""
    minted: dict[str, list[str]] = {}
    for entry in tx.audit_list(AuditFilter(tenant_id=tenant_id, action="token.created", limit=1_000_000)):
        parent = entry.event.payload.get(MINTED_WITH)
        if isinstance(parent, str) and parent.startswith("token:"):
            minted.setdefault(parent.removeprefix("token:"), []).append(entry.event.target_id)
    return minted


def bootstrap(engine: Engine, *, tenant_id: str, path: Path | None = None) -> CreatedToken | None:
    """On first start, with no token at all, an admin token for ``tenant_id`` (else None).

    With ``path`` the token is also written there, readable by the owner only (0600, created
    so: never world-readable, not even for a moment). The file is created first, without
    following a symbolic link: anything already at ``path`` (a file, a dangling link) is refused
    before a token exists, so no admin token is ever stored that nobody can see."""
    with engine.store.read() as tx:
        if tx.tokens_exist():
            return None
    fd = None
    if path is not None:
        if os.path.lexists(path):
            raise ValidationError(f"{path} exists; refusing to overwrite it", field="bootstrap_token_file")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise ValidationError(f"{path}: {exc.strerror}", field="bootstrap_token_file") from None
    try:
        made = create(engine, tenant_id=tenant_id, role=Role.ADMIN.value, actor="bootstrap", label="bootstrap admin")
    except BaseException:
        if fd is not None and path is not None:
            os.close(fd)
            path.unlink(missing_ok=True)
        raise
    if fd is not None:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(made.token + "\n")
    return made


def listed(engine: Engine, tenant_id: str | None) -> list[StoredToken]:
    with engine.store.read() as tx:
        return tx.tokens_list(tenant_id)
