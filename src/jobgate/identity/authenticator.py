"""The one door every API request's credential goes through.

The ``Authorization`` header's shape says which provider checks it: ``Bearer jgt_…`` is a
jobgate token (``service.tokens``), ``Bearer <header>.<claims>.<signature>`` a JWT of the
configured OpenID Connect provider (``identity.oidc``), ``Basic <name:password>`` a person of
the configured LDAP directory (``identity.ldap``). A credential no enabled provider
accepts is the same 401 as a wrong one. Nothing here reads a tenant, a role or a name from
any other header: they come from the credential alone.
"""

from __future__ import annotations

import base64
import binascii

from jobgate.config.auth import AuthSettings
from jobgate.core.tokens import TOKEN_PREFIX
from jobgate.identity.ldap import LdapDirectory
from jobgate.identity.oidc import OidcVerifier, looks_like_jwt
from jobgate.service import tokens
from jobgate.service.engine import Engine
from jobgate.service.tokens import Principal, refused


class Authenticator:
    def __init__(self, engine: Engine, settings: AuthSettings | None = None) -> None:
        self.engine = engine
        self.settings = settings or engine.config.auth
        self.oidc = None if self.settings.oidc is None else OidcVerifier(self.settings.oidc)
        self.ldap = None if self.settings.ldap is None else LdapDirectory(self.settings.ldap)

    def close(self) -> None:
        """Let go of what the providers keep open (the directory's connections)."""
        if self.ldap is not None:
            self.ldap.close()

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller's principal, or ``Unauthenticated`` (401), ``TenantMissing`` (400),
        ``IdentityProviderUnavailable`` (503)."""
        scheme, _, raw = (authorization or "").partition(" ")
        raw = raw.strip()
        if scheme.lower() == "basic" and self.ldap is not None:
            username, password = _basic(raw)
            return self.ldap.authenticate(username, password)
        if scheme.lower() != "bearer" or not raw:
            raise refused("no bearer credential")
        if raw.startswith(TOKEN_PREFIX):
            if not self.settings.tokens:
                raise refused("a jobgate token, but auth.tokens is false")
            return tokens.authenticate(self.engine, authorization)
        if self.oidc is not None and looks_like_jwt(raw):
            return self.oidc.authenticate(raw)
        raise refused("a bearer credential no enabled provider reads")


def _basic(raw: str) -> tuple[str, str]:
    """``Basic base64(name:password)`` -> (name, password); the password may hold ``:``."""
    try:
        decoded = base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise refused("a malformed Basic credential") from None
    username, colon, password = decoded.partition(":")
    if not colon:
        raise refused("a Basic credential without a password")
    return username, password
