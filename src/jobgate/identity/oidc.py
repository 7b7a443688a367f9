"""Bearer JWTs from an OpenID Connect provider, checked with PyJWT.

PyJWT (rather than joserfc or authlib): it is the most widely deployed JOSE library in Python,
it binds each JWK to one algorithm (a token cannot choose how its own signature is checked),
and it validates the registered claims (``iss``, ``aud``, ``exp``, ``nbf``) itself; the key set
is ours (``identity.jwks``) because the provider is reached with the configured CA bundle,
timeouts and rate limit, which PyJWT's own client does not offer.

A token is accepted when its header names an allowed public-key algorithm, its signature
checks against the provider's key of its ``kid``, its issuer and audience are the configured
ones, it is neither expired nor early (within ``clock_skew``), and it carries a subject. Then
its tenant claim gives the tenant (400 ``tenant_missing`` without one) and its roles claim the
role. Everything else is the same 401, whatever the reason, which goes to the log alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import jwt

from jobgate.config.auth import OidcSettings
from jobgate.core.tokens import TENANT_RULE, Role, is_tenant_name, readable
from jobgate.identity.errors import TenantMissing
from jobgate.identity.jwks import KeyNotFound, KeySet
from jobgate.service.tokens import Principal, refused

MAX_TOKEN_CHARS = 16_384  # far above any real ID/access token; a larger header is not parsed
ACTOR_CHARS = 200  # what records hold (``requested_by``, ``actor``)
PREFIX = "oidc:"  # records name a principal ``oidc:<sub>``; no native token may take the name


def looks_like_jwt(raw: str) -> bool:
    """Three base64url parts: how a bearer JWT is told apart from a ``jgt_`` token."""
    return raw.count(".") == 2 and not raw.startswith("jgt_")


class OidcVerifier:
    def __init__(self, settings: OidcSettings, keys: KeySet | None = None) -> None:
        self.settings = settings
        self.keys = keys or KeySet(settings)

    def authenticate(self, raw: str) -> Principal:
        """The principal of a bearer JWT, or ``Unauthenticated`` / ``TenantMissing`` /
        ``IdentityProviderUnavailable``."""
        claims = self.verified_claims(raw)
        return principal_of(claims, self.settings)

    def verified_claims(self, raw: str, *, audience: str | None = None) -> dict[str, Any]:
        """The claims of a token checked as the module says; ``audience``: another than the
        API's (an ID token is for the console's client id)."""
        s = self.settings
        if len(raw) > MAX_TOKEN_CHARS:
            raise refused("a JWT longer than 16 KiB")
        try:
            header = jwt.get_unverified_header(raw)
        except jwt.PyJWTError as exc:
            raise refused(f"a malformed JWT ({exc})") from None
        alg = header.get("alg")
        if alg not in s.algorithms:
            raise refused(f"a JWT signed with {alg!r} (allowed: {', '.join(s.algorithms)})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise refused("a JWT whose kid is not a string")
        try:
            key = self.keys.key_for(kid, alg)
        except KeyNotFound as exc:
            raise refused(f"a JWT the provider's keys cannot check: {exc}") from None
        try:
            claims: dict[str, Any] = jwt.decode(
                raw,
                key=key,
                algorithms=[alg],
                audience=audience or s.audience,
                issuer=s.issuer,
                leeway=s.clock_skew,
                options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
            )
        except jwt.PyJWTError as exc:
            raise refused(f"a JWT refused: {type(exc).__name__}: {exc}") from None
        return claims


def principal_of(claims: Mapping[str, Any], settings: OidcSettings) -> Principal:
    """Verified claims -> the principal: pure, so every rule of the mapping is tested alone."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject.strip() or not readable(subject):
        raise refused("a JWT without a usable subject (empty, or holding invisible characters)")
    actor = f"{PREFIX}{subject}"
    if len(actor) > ACTOR_CHARS:
        raise refused(f"a JWT whose subject is longer than {ACTOR_CHARS - len(PREFIX)} characters")
    tenant = claims.get(settings.tenant_claim)
    if not isinstance(tenant, str) or not tenant.strip():
        raise TenantMissing(settings.tenant_claim)
    if not is_tenant_name(tenant):
        raise refused(f"a JWT whose tenant claim is not a tenant name ({TENANT_RULE})")
    role = role_of(claims.get(settings.roles_claim), settings, tenant)
    if role is None:
        raise refused(f"{actor} holds no role mapped by auth.oidc (claim {settings.roles_claim!r})")
    expires_at = _expiry(claims.get("exp"))
    if expires_at is None and claims.get("exp") is not None:
        # RFC 7519: a NumericDate is a JSON number. The decoder also takes a string of digits,
        # and the tokens such a JWT minted were left with no expiry (found by a review).
        raise refused("a JWT whose exp is not a NumericDate (a JSON number of seconds)")
    return Principal(
        credential=f"{PREFIX}{settings.issuer}",
        tenant_id=tenant,
        role=role,
        jobs=None,
        name=actor,
        display_name=_display_name(claims, settings.name_claims),
        expires_at=expires_at,
    )


def _expiry(exp: Any) -> datetime | None:
    """The JWT's ``exp`` (checked already by the decoder) as the credential's expiry: a token
    this JWT mints never outlives it."""
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def role_of(value: Any, settings: OidcSettings, tenant: str) -> Role | None:
    """The role a roles claim maps to: the tenant's own map first, then the global one; in
    each, the first entry (in the file's order) whose claim value the token holds wins; else
    ``default_role`` (None: refused). A string claim is one value, a list several."""
    held: set[str] = set()
    if isinstance(value, str):
        held = {value}
    elif isinstance(value, list):
        held = {v for v in value if isinstance(v, str)}
    for table in (settings.tenant_roles.get(tenant, {}), settings.roles):
        for name, role in table.items():
            if name in held:
                return role
    return settings.default_role


def _display_name(claims: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    """The first display-name claim a person can read as itself: one with a control, bidi,
    zero-width or lone-surrogate character (a user may often edit their own name at the
    provider) would go into the audit chain as a name that prints like another, or not encode
    at all; it is passed over, as the subject with such characters is refused."""
    for name in names:
        value = claims.get(name)
        if isinstance(value, str) and value.strip() and readable(value.strip()[:200]):
            return value.strip()[:200]
    return None
