"""A real OpenID Connect issuer for the tests, on 127.0.0.1 over HTTPS.

It makes a throwaway CA and a server certificate for 127.0.0.1 with ``cryptography``, serves
the discovery document and the key set (JWKS) from a thread, signs tokens with its current
keys (PyJWT), and can rotate its keys, go down and come back: what jobgate must survive. The
CA's certificate is written to ``ca.pem`` for ``auth.oidc.ca_bundle``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

AUDIENCE = "jobgate-tests"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it issued for 127.0.0.1: (ca.pem, server.pem, server.key)."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("jobgate test CA"))
        .issuer_name(_name("jobgate test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (folder / "ca.pem", folder / "server.pem", folder / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        jwk: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.alg}


def new_key(alg: str = "RS256") -> SigningKey:
    private: Any = ec.generate_private_key(ec.SECP256R1()) if alg == "ES256" else rsa.generate_private_key(65537, 2048)
    return SigningKey(uuid.uuid4().hex[:12], alg, private)


@dataclass
class Issuer:
    """The running issuer: ``url`` is its issuer identifier, ``ca_bundle`` its CA's certificate."""

    url: str
    ca_bundle: Path
    keys: list[SigningKey]
    key_reads: int = 0  # how many times the key set was fetched
    down: bool = False  # answer 503 to everything
    extra: dict[str, Any] = field(default_factory=dict)  # discovery document overrides
    user: str = "alice"  # who signs in at the authorization endpoint (no password page: a test)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)  # code -> what it was issued for

    def token(
        self,
        subject: str = "alice",
        *,
        tenant: str | None = "acme",
        roles: Any = ("jobgate-admins",),
        key: SigningKey | None = None,
        lifetime: timedelta = timedelta(minutes=5),
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token as the provider would issue it; ``claims`` add or override (None removes)."""
        key = key or self.keys[0]
        now = datetime.now(UTC)
        body: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": subject,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
            "name": f"{subject.title()} Example",
            "tenant": tenant,
            "roles": list(roles) if isinstance(roles, tuple | list) else roles,
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def rotate(self, alg: str = "RS256") -> SigningKey:
        """A new signing key replaces every old one (the old kid is no longer published)."""
        key = new_key(alg)
        self.keys = [key]
        return key

    def config(self, **overrides: Any) -> dict[str, Any]:
        """An ``auth.oidc`` section for this issuer (``jobgate.yaml`` form)."""
        doc: dict[str, Any] = {
            "issuer": self.url,
            "audience": AUDIENCE,
            "ca_bundle": str(self.ca_bundle),
            "algorithms": ["RS256", "ES256"],
            "roles": {
                "jobgate-admins": "admin",
                "jobgate-operators": "operator",
                "jobgate-activators": "activator",
                "jobgate-auditors": "auditor",
                "jobgate-consumers": "consumer",
            },
            "refetch_interval_seconds": 0,
        }
        doc.update(overrides)
        return doc


def _handler(issuer: Issuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if issuer.down:
                self._send(503, {"error": "down"})
            elif self.path == "/.well-known/openid-configuration":
                endpoints = {
                    "jwks_uri": f"{issuer.url}/keys",
                    "authorization_endpoint": f"{issuer.url}/authorize",
                    "token_endpoint": f"{issuer.url}/token",
                }
                self._send(200, {"issuer": issuer.url, **endpoints, **issuer.extra})
            elif self.path.startswith("/authorize?"):
                self._authorize(dict(parse_qsl(urlsplit(self.path).query)))
            elif self.path == "/keys":
                issuer.key_reads += 1
                self._send(200, {"keys": [k.public_jwk() for k in issuer.keys]})
            else:
                self._send(404, {"error": "not found"})

        def _authorize(self, query: dict[str, str]) -> None:
            """Sign ``issuer.user`` in at once and send the browser back with a one-time code."""
            if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
                self._send(400, {"error": "invalid_request"})
                return
            code = uuid.uuid4().hex
            issuer.codes[code] = {**query, "user": issuer.user}
            back = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query.get('state', '')})}"
            self.send_response(302)
            self.send_header("Location", back)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = dict(parse_qsl(self.rfile.read(length).decode()))
            if self.path != "/token":
                self._send(404, {"error": "not found"})
                return
            issued = issuer.codes.pop(form.get("code", ""), None)  # one use only
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if (
                issued is None
                or form.get("grant_type") != "authorization_code"
                or form.get("redirect_uri") != issued["redirect_uri"]
                or form.get("client_id") != issued["client_id"]
                or challenge != issued["code_challenge"]
            ):
                self._send(400, {"error": "invalid_grant"})
                return
            id_token = issuer.token(issued["user"], aud=issued["client_id"], nonce=issued.get("nonce"))
            self._send(200, {"id_token": id_token, "access_token": "opaque", "token_type": "Bearer"})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def running_issuer(folder: Path) -> Iterator[Issuer]:
    ca, cert, key = make_certificates(folder)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    issuer = Issuer(f"https://127.0.0.1:{server.server_address[1]}", ca, [new_key()])
    server.RequestHandlerClass = _handler(issuer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
