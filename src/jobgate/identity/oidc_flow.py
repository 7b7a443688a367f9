"""The console's sign-in through an OpenID Connect provider: the authorization-code flow with
PKCE (RFC 7636) and a nonce.

``start`` makes a random ``state``, ``nonce`` and PKCE verifier, and the provider's
authorization URL carrying the state, the nonce and the verifier's S256 challenge; the browser
keeps the three in a signed, short-lived cookie (``identity.sessions``). ``finish`` checks the
returned state against it, exchanges the code at the token endpoint with the verifier (and the
client secret of a confidential client), checks the ID token like any bearer JWT of the
provider — but for the console's client id as audience — and that its nonce is the one sent.
A code intercepted on its way back is useless without the verifier; a replayed or forged
callback fails the state or the nonce.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from urllib.parse import urlencode

from jobgate.config.auth import OidcSettings
from jobgate.identity.errors import IdentityProviderUnavailable
from jobgate.identity.jwks import ProviderRefused
from jobgate.identity.oidc import OidcVerifier, principal_of
from jobgate.service.tokens import Principal, refused

log = logging.getLogger("jobgate.identity")

SCOPES = "openid profile email"


@dataclass(frozen=True)
class Pending:
    """What the browser carries, signed, from the redirect to the callback."""

    state: str
    nonce: str
    verifier: str


def challenge(verifier: str) -> str:
    """PKCE's S256: base64url(SHA-256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


class CodeFlow:
    def __init__(self, verifier: OidcVerifier) -> None:
        settings = verifier.settings
        if settings.client_id is None or settings.redirect_url is None:
            raise ValueError("auth.oidc has no client_id/redirect_url: no console sign-in")
        self.settings: OidcSettings = settings
        self.client_id: str = settings.client_id
        self.redirect_url: str = settings.redirect_url
        self.verifier = verifier

    def start(self) -> tuple[str, Pending]:
        """The provider's authorization URL to send the browser to, and what to keep for the callback."""
        pending = Pending(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))
        endpoint = self._endpoint("authorization_endpoint")
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": self.redirect_url,
                "scope": SCOPES,
                "state": pending.state,
                "nonce": pending.nonce,
                "code_challenge": challenge(pending.verifier),
                "code_challenge_method": "S256",
            }
        )
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", pending

    def finish(self, code: str, state: str, pending: Pending) -> Principal:
        """The principal the provider signed in, or ``Unauthenticated`` (a forged, replayed or
        refused callback) / ``IdentityProviderUnavailable``."""
        if not hmac.compare_digest(state.encode(), pending.state.encode()):
            raise refused("a sign-in callback whose state is not the one sent")
        if not code or len(code) > 2048:
            raise refused("a sign-in callback without a usable code")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_url,
            "client_id": self.client_id,
            "code_verifier": pending.verifier,
        }
        if self.settings.client_secret is not None:
            form["client_secret"] = self.settings.client_secret
        try:
            answer = self.verifier.keys.post_form(self._endpoint("token_endpoint"), form)
        except ProviderRefused as exc:
            raise refused(f"the provider refused the code: {exc}") from None
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise refused("the provider's answer holds no ID token")
        claims = self.verifier.verified_claims(id_token, audience=self.client_id)
        if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), pending.nonce.encode()):
            raise refused("an ID token whose nonce is not the one sent")
        return principal_of(claims, self.settings)

    def _endpoint(self, name: str) -> str:
        value = self.verifier.keys.discovery().get(name)
        if not isinstance(value, str) or not value.startswith("https://"):
            log.warning("identity provider %s: no https:// %s", self.settings.issuer, name)
            raise IdentityProviderUnavailable()
        return value
