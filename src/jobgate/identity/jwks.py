"""An OpenID Connect provider's signing keys: fetched over HTTPS, kept, and refetched when the
provider rotates them.

Keys are read on first use (from ``jwks_url``, else from the ``jwks_uri`` of the issuer's
discovery document, whose ``issuer`` must be the configured one), again once they are older
than ``keys_max_age`` (so a key the provider retired stops verifying within it), and at once
when a token names a key id the set lacks — a rotation — but at most once per
``refetch_interval`` counted from the last such read, so a stream of tokens with made-up key
ids cannot make jobgate hammer the provider, while the first token of a new key after a routine
read is not refused for it. A failed read keeps the keys already known (a provider that is
briefly down does not lock everyone out, and is asked again after ``refetch_interval``, not at
every request); with no key known it is ``IdentityProviderUnavailable``.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import jwt

from jobgate.config.auth import OidcSettings
from jobgate.identity.errors import IdentityProviderUnavailable

log = logging.getLogger("jobgate.identity")

MAX_DOCUMENT_BYTES = 1 << 20  # a key set or discovery document larger than this is refused


class KeyNotFound(Exception):
    """The token names a key the provider does not publish (after a refetch, if one was due)."""


class ProviderRefused(Exception):
    """The provider refused a request of ours (a code already used, a wrong verifier)."""


class ProviderError(Exception):
    """The provider could not be read, or answered something that is not a key set."""


class KeySet:
    def __init__(
        self,
        settings: OidcSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._transport = transport
        self._lock = threading.Lock()
        self._keys: dict[str, Mapping[str, Any]] = {}  # key id ("" for a key without one) -> JWK
        self._prepared: dict[tuple[str, str], jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # when the keys were last read successfully
        self._tried_at: float | None = None  # when a read was last attempted
        self._retried_at: float | None = None  # when a token's unknown key id last made one
        self._jwks_url = settings.jwks_url
        self._discovery: Mapping[str, Any] | None = None

    def key_for(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key to verify a token signed with ``alg`` under key id ``kid``. Raises
        ``KeyNotFound`` (the token is refused: 401) or ``IdentityProviderUnavailable`` (503)."""
        with self._lock:
            now = self._clock()
            if not self._keys or (self._stale(now) and self._due(self._tried_at, now)):
                self._refresh(now, required=not self._keys)
            jwk = self._find(kid)
            if jwk is None and self._due(self._retried_at, now):
                self._retried_at = now
                self._refresh(now, required=True)
                jwk = self._find(kid)
            if jwk is None:
                raise KeyNotFound(f"no key {kid!r} among the provider's {len(self._keys)}")
            return self._prepare(kid or "", jwk, alg)

    def _stale(self, now: float) -> bool:
        return self._fetched_at is None or now - self._fetched_at >= self._settings.keys_max_age.total_seconds()

    def _due(self, last: float | None, now: float) -> bool:
        """Whether a read last made at ``last`` may be made again (``refetch_interval``)."""
        return last is None or now - last >= self._settings.refetch_interval.total_seconds()

    def _find(self, kid: str | None) -> Mapping[str, Any] | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None  # no kid: one key only

    def _prepare(self, kid: str, jwk: Mapping[str, Any], alg: str) -> jwt.PyJWK:
        """The key bound to ``alg``: a key that names another algorithm, or whose type cannot
        carry ``alg`` (an RSA key asked for ES256), is refused, never reinterpreted."""
        cached = self._prepared.get((kid, alg))
        if cached is not None:
            return cached
        if jwk.get("alg") not in (None, alg):
            raise KeyNotFound(f"key {kid!r} is for {jwk.get('alg')}, the token says {alg}")
        if jwk.get("use") not in (None, "sig"):
            raise KeyNotFound(f"key {kid!r} is not a signing key")
        try:
            prepared = jwt.PyJWK(dict(jwk), algorithm=alg)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
            raise KeyNotFound(f"key {kid!r} cannot verify {alg}: {exc}") from None
        self._prepared[(kid, alg)] = prepared
        return prepared

    def _refresh(self, now: float, *, required: bool) -> None:
        self._tried_at = now
        try:
            keys = self._read_keys()
        except ProviderError as exc:
            log.warning("identity provider %s: %s", self._settings.issuer, exc, extra={"action": "idp_unreachable"})
            if required:
                raise IdentityProviderUnavailable() from None
            return
        self._keys, self._prepared, self._fetched_at = keys, {}, now
        log.info(
            "identity provider %s: %d signing keys read",
            self._settings.issuer,
            len(keys),
            extra={"action": "idp_keys_read"},
        )

    def discovery(self) -> Mapping[str, Any]:
        """The issuer's discovery document (read once; ``IdentityProviderUnavailable`` if it
        cannot be read or names another issuer)."""
        with self._lock:
            if self._discovery is None:
                try:
                    with self._client() as client:
                        document = _get_json(client, _discovery_url(self._settings.issuer))
                    _jwks_uri(document, self._settings)  # the issuer check
                except ProviderError as exc:
                    log.warning(
                        "identity provider %s: %s", self._settings.issuer, exc, extra={"action": "idp_unreachable"}
                    )
                    raise IdentityProviderUnavailable() from None
                self._discovery = document
            return self._discovery

    def post_form(self, url: str, form: Mapping[str, str]) -> dict[str, Any]:
        """POST ``form`` to the provider (its token endpoint) and read the JSON answer; a
        refusal (4xx) is ``ProviderRefused``, anything else that fails ``IdentityProviderUnavailable``."""
        try:
            with self._client() as client:
                response = client.post(url, data=dict(form), headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            log.warning("identity provider %s: POST %s: %s", self._settings.issuer, url, type(exc).__name__)
            raise IdentityProviderUnavailable() from None
        if 400 <= response.status_code < 500:
            raise ProviderRefused(f"POST {url} answered {response.status_code}")
        try:
            document = (
                response.json() if response.status_code == 200 and len(response.content) <= MAX_DOCUMENT_BYTES else None
            )
        except ValueError:
            document = None
        if not isinstance(document, dict):
            log.warning("identity provider %s: POST %s answered %s", self._settings.issuer, url, response.status_code)
            raise IdentityProviderUnavailable()
        return document

    def _read_keys(self) -> dict[str, Mapping[str, Any]]:
        with self._client() as client:
            if self._jwks_url is None:
                self._jwks_url = _jwks_uri(_get_json(client, _discovery_url(self._settings.issuer)), self._settings)
            document = _get_json(client, self._jwks_url)
        items = document.get("keys")
        if not isinstance(items, list):
            raise ProviderError("the key set has no 'keys' list")
        keys: dict[str, Mapping[str, Any]] = {}
        for item in items:
            if isinstance(item, dict) and item.get("kty") in ("RSA", "EC", "OKP"):
                keys[str(item.get("kid", ""))] = item
        if not keys:
            raise ProviderError("the key set holds no public signing key")
        return keys

    def _client(self) -> httpx.Client:
        settings = self._settings
        verify: ssl.SSLContext | bool = True
        if settings.ca_bundle is not None:
            verify = ssl.create_default_context(cafile=str(settings.ca_bundle))
        return httpx.Client(
            verify=verify,
            timeout=settings.timeout.total_seconds(),
            follow_redirects=False,
            transport=self._transport,
            trust_env=False,  # a proxy from the environment must not see or reroute key reads
        )


def _discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def _jwks_uri(document: Mapping[str, Any], settings: OidcSettings) -> str:
    """The key set's address from a discovery document that names the configured issuer."""
    if str(document.get("issuer", "")).rstrip("/") != settings.issuer:
        raise ProviderError(f"the discovery document names issuer {document.get('issuer')!r}")
    uri = document.get("jwks_uri")
    if not isinstance(uri, str) or not uri.startswith("https://"):
        raise ProviderError("the discovery document has no https:// jwks_uri")
    return uri


def _get_json(client: httpx.Client, url: str) -> dict[str, Any]:
    try:
        with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise ProviderError(f"GET {url} answered {response.status_code}")
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ProviderError(f"GET {url}: more than {MAX_DOCUMENT_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise ProviderError(f"GET {url}: {type(exc).__name__}") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise ProviderError(f"GET {url}: not JSON") from None
    if not isinstance(document, dict):
        raise ProviderError(f"GET {url}: not a JSON object")
    return document
