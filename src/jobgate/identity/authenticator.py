"""The one door every API request's credential goes through.

The ``Authorization`` header's shape says which provider checks it: ``Bearer jgt_…`` is a
jobgate token (``service.tokens``), ``Bearer <header>.<claims>.<signature>`` a JWT of the
configured OpenID Connect provider (``identity.oidc``). A credential no enabled provider
accepts is the same 401 as a wrong one. Nothing here reads a tenant, a role or a name from
any other header: they come from the credential alone.
"""

from __future__ import annotations

from jobgate.config.auth import AuthSettings
from jobgate.core.tokens import TOKEN_PREFIX
from jobgate.identity.oidc import OidcVerifier, looks_like_jwt
from jobgate.service import tokens
from jobgate.service.engine import Engine
from jobgate.service.tokens import Principal, refused


class Authenticator:
    def __init__(self, engine: Engine, settings: AuthSettings | None = None) -> None:
        self.engine = engine
        self.settings = settings or engine.config.auth
        self.oidc = None if self.settings.oidc is None else OidcVerifier(self.settings.oidc)

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller's principal, or ``Unauthenticated`` (401), ``TenantMissing`` (400),
        ``IdentityProviderUnavailable`` (503)."""
        scheme, _, raw = (authorization or "").partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            raise refused("no bearer credential")
        if raw.startswith(TOKEN_PREFIX):
            if not self.settings.tokens:
                raise refused("a jobgate token, but auth.tokens is false")
            return tokens.authenticate(self.engine, authorization)
        if self.oidc is not None and looks_like_jwt(raw):
            return self.oidc.authenticate(raw)
        raise refused("a bearer credential no enabled provider reads")
