"""The ``auth`` section of ``jobgate.yaml``: which credentials the API accepts, and how an
identity provider's answer becomes a principal with a tenant and a role.

    auth:
      tokens: true                 # jobgate's own jgt_ tokens (service accounts); default true
      oidc:                        # bearer JWTs from an OpenID Connect provider
        issuer: https://idp.example.com/realms/acme
        audience: jobgate
        jwks_url: https://idp.example.com/realms/acme/certs   # else discovery from the issuer
        ca_bundle: idp-ca.pem      # a relative path is beside this file; default: the system store
        algorithms: [RS256]        # asymmetric only: RS*, PS*, ES*, EdDSA
        tenant_claim: tenant
        roles_claim: roles
        roles: {jobgate-admins: admin, jobgate-operators: operator}
        tenant_roles: {acme: {acme-admins: admin}}   # per tenant, consulted before ``roles``
      ldap:                        # people of a directory, HTTP Basic checked by a bind (seed 004)
        url: ldaps://ldap.example.com
        bind_dn: cn=jobgate,ou=services,dc=example,dc=com
        bind_password_env: JOBGATE_LDAP_PASSWORD
        user_base: ou=people,dc=example,dc=com
        groups: {cn=jobgate-admins,ou=groups,dc=example,dc=com: admin}

Every rule here is checked when the file loads: a provider reached over plain HTTP, a
symmetric or ``none`` algorithm (the classic key-confusion attack: a public key used as an
HMAC secret), a directory reached without TLS, a role that does not exist — each is refused naming the key, because an
authentication setting that silently does not apply is an open door.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jobgate.core.tokens import Role
from jobgate.documents import Reader, join

# What a JWT may be signed with: public-key algorithms only. ``none`` and the HMAC family are
# refused by configuration, so no key of the provider can ever be used as a shared secret.
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)

_ATTRIBUTE = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,63}")


@dataclass(frozen=True)
class OidcSettings:
    """One OpenID Connect provider whose bearer JWTs the API accepts (seed 001/002)."""

    issuer: str
    audience: str
    jwks_url: str | None = None  # None: read ``jwks_uri`` from the issuer's discovery document
    ca_bundle: Path | None = None  # None: the system's certificate store
    algorithms: tuple[str, ...] = ("RS256",)
    clock_skew: timedelta = timedelta(seconds=60)
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"
    roles: Mapping[str, Role] = field(default_factory=dict)  # claim value -> role, first match wins
    tenant_roles: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)
    default_role: Role | None = None  # None: a token with no mapped role is refused (deny by default)
    name_claims: tuple[str, ...] = ("name", "preferred_username", "email")  # the display name
    timeout: timedelta = timedelta(seconds=5)
    refetch_interval: timedelta = timedelta(seconds=30)  # an unknown key id refetches at most this often
    # Keys are read again after this long: a key the provider retires (compromised, rotated out)
    # stops verifying tokens within it.
    keys_max_age: timedelta = timedelta(minutes=5)
    # The console's sign-in (authorization-code flow with PKCE): None without a client id.
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)  # None: a public client (PKCE alone)
    redirect_url: str | None = None  # https://<jobgate>/login/oidc/callback, registered at the provider


@dataclass(frozen=True)
class LdapSettings:
    """A directory whose people sign in with HTTP Basic, checked by a bind per request (seed 004)."""

    url: str  # ldaps://host[:port], or ldap://host[:port] with ``start_tls``
    user_base: str
    tenant: str
    start_tls: bool = False
    ca_bundle: Path | None = None
    bind_dn: str | None = None  # None: the user search binds anonymously
    bind_password: str | None = field(default=None, repr=False)
    user_filter: str = "(uid={username})"
    uid_attribute: str = "uid"
    name_attribute: str = "cn"
    group_attribute: str = "memberOf"
    groups: Mapping[str, Role] = field(default_factory=dict)  # group DN (any case) -> role, first held wins
    default_role: Role | None = Role.CONSUMER  # seed 004: a user of no mapped group is a consumer
    cache: timedelta = timedelta(seconds=60)  # successful binds only; zero: no cache
    pool_size: int = 4
    timeout: timedelta = timedelta(seconds=5)


@dataclass(frozen=True)
class AuthSettings:
    tokens: bool = True  # jobgate's own ``jgt_`` tokens
    oidc: OidcSettings | None = None
    ldap: LdapSettings | None = None
    session: timedelta = timedelta(hours=8)  # how long a console sign-in lasts


_AUTH_KEYS = ("tokens", "oidc", "ldap", "session_hours")
_LDAP_KEYS = (
    "url",
    "start_tls",
    "ca_bundle",
    "bind_dn",
    "bind_password_env",
    "bind_password_file",
    "user_base",
    "user_filter",
    "uid_attribute",
    "name_attribute",
    "group_attribute",
    "groups",
    "default_role",
    "tenant",
    "cache_seconds",
    "pool_size",
    "timeout_seconds",
)
_OIDC_KEYS = (
    "issuer",
    "audience",
    "jwks_url",
    "ca_bundle",
    "algorithms",
    "clock_skew_seconds",
    "tenant_claim",
    "roles_claim",
    "roles",
    "tenant_roles",
    "default_role",
    "name_claims",
    "timeout_seconds",
    "refetch_interval_seconds",
    "keys_max_age_seconds",
    "client_id",
    "client_secret_env",
    "redirect_url",
)


_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _is_callback_url(url: str) -> bool:
    """``https://<host>/…/login/oidc/callback``, or ``http://`` to a loopback host exactly (a
    host that only starts with ``localhost`` is another machine); no user part, query or fragment."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # a malformed port or bracket
        return False
    if not host or parts.query or parts.fragment:
        return False
    named = f"[{host}]" if ":" in host else host
    if parts.netloc.lower() not in (named, f"{named}:{port}"):  # no user part, nothing after the host
        return False
    secure = parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK_HOSTS)
    return secure and parts.path.endswith("/login/oidc/callback")


def parse_auth_settings(r: Reader, value: Any, base_dir: Path, *, tenant: str = "default") -> AuthSettings:
    """``tenant``: the server's tenant (``server.tenant``), the default of a directory's people."""
    spec = r.mapping({} if value is None else value, "auth")
    r.only_keys(spec, "auth", _AUTH_KEYS)
    tokens = r.boolean(spec["tokens"], "auth.tokens") if "tokens" in spec else True
    oidc = None if spec.get("oidc") is None else _oidc(r, spec["oidc"], base_dir)
    ldap = None if spec.get("ldap") is None else _ldap(r, spec["ldap"], base_dir, tenant)
    if not tokens and oidc is None and ldap is None:
        r.fail("auth.tokens", "turning tokens off needs another provider (auth.oidc or auth.ldap)")
    session = AuthSettings().session
    if spec.get("session_hours") is not None:
        session = r.duration(spec["session_hours"], "auth.session_hours", unit=3600)
        if session > timedelta(days=7):
            r.fail("auth.session_hours", "must be at most 168 (a week)")
    return AuthSettings(tokens=tokens, oidc=oidc, ldap=ldap, session=session)


def _ca_bundle(r: Reader, value: Any, field: str, base_dir: Path) -> Path | None:
    if value is None:
        return None
    path = base_dir / r.string(value, field)
    if not path.is_file():
        r.fail(field, f"no such file: {path}")
    return path


def _ldap(r: Reader, value: Any, base_dir: Path, tenant: str) -> LdapSettings:
    where = "auth.ldap"
    spec = r.mapping(value, where)
    r.only_keys(spec, where, _LDAP_KEYS)
    for required in ("url", "user_base"):
        if spec.get(required) is None:
            r.fail(join(where, required), "is required")
    url = r.string(spec["url"], join(where, "url"))
    start_tls = r.boolean(spec["start_tls"], join(where, "start_tls")) if "start_tls" in spec else False
    if not (url.startswith("ldaps://") or (url.startswith("ldap://") and start_tls)):
        r.fail(
            join(where, "url"),
            "must be ldaps://, or ldap:// with start_tls: true (passwords must not travel in the clear)",
        )
    user_filter = r.string(spec.get("user_filter", "(uid={username})"), join(where, "user_filter"))
    if "{username}" not in user_filter or not (user_filter.startswith("(") and user_filter.endswith(")")):
        r.fail(join(where, "user_filter"), "must be an LDAP filter in parentheses holding {username}")
    password = None
    if spec.get("bind_password_env") is not None and spec.get("bind_password_file") is not None:
        r.fail(join(where, "bind_password_file"), "give the password by one of bind_password_env, bind_password_file")
    if spec.get("bind_password_env") is not None:
        name = r.string(spec["bind_password_env"], join(where, "bind_password_env"))
        password = os.environ.get(name)
        if not password:
            r.fail(join(where, "bind_password_env"), f"the environment variable {name} is not set")
    if spec.get("bind_password_file") is not None:
        path = base_dir / r.string(spec["bind_password_file"], join(where, "bind_password_file"))
        try:
            password = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            r.fail(join(where, "bind_password_file"), f"cannot read {path}: {exc.strerror}")
    bind_dn = None if spec.get("bind_dn") is None else r.string(spec["bind_dn"], join(where, "bind_dn"))
    if bind_dn is not None and not password:
        r.fail(join(where, "bind_dn"), "a bind DN needs bind_password_env or bind_password_file")
    d = LdapSettings(url="", user_base="", tenant=tenant)

    def attribute(key: str, default: str) -> str:
        if spec.get(key) is None:
            return default
        return r.string(spec[key], join(where, key), pattern=_ATTRIBUTE, rule="an LDAP attribute name")

    default_role = d.default_role
    if "default_role" in spec:
        raw = spec["default_role"]
        default_role = None if raw is None else r.choice(raw, join(where, "default_role"), Role)
    cache = d.cache
    if spec.get("cache_seconds") is not None:
        cache = r.duration(spec["cache_seconds"], join(where, "cache_seconds"), allow_zero=True)
    return LdapSettings(
        url=url,
        user_base=r.string(spec["user_base"], join(where, "user_base")),
        tenant=r.tenant(spec["tenant"], join(where, "tenant")) if spec.get("tenant") is not None else tenant,
        start_tls=start_tls,
        ca_bundle=_ca_bundle(r, spec.get("ca_bundle"), join(where, "ca_bundle"), base_dir),
        bind_dn=bind_dn,
        bind_password=password,
        user_filter=user_filter,
        uid_attribute=attribute("uid_attribute", d.uid_attribute),
        name_attribute=attribute("name_attribute", d.name_attribute),
        group_attribute=attribute("group_attribute", d.group_attribute),
        groups={k.lower(): v for k, v in _roles(r, spec.get("groups") or {}, join(where, "groups")).items()},
        default_role=default_role,
        cache=cache,
        pool_size=d.pool_size
        if spec.get("pool_size") is None
        else r.integer(spec["pool_size"], join(where, "pool_size"), minimum=1, maximum=64),
        timeout=d.timeout
        if spec.get("timeout_seconds") is None
        else r.duration(spec["timeout_seconds"], join(where, "timeout_seconds")),
    )


def _https(r: Reader, value: Any, field: str) -> str:
    url = r.string(value, field).rstrip("/") if field.endswith("issuer") else r.string(value, field)
    if not url.startswith("https://") or len(url) > 2000:
        r.fail(field, "must be an https:// URL (keys and claims must not travel in the clear)")
    return url


def _oidc(r: Reader, value: Any, base_dir: Path) -> OidcSettings:
    where = "auth.oidc"
    spec = r.mapping(value, where)
    r.only_keys(spec, where, _OIDC_KEYS)
    for required in ("issuer", "audience"):
        if spec.get(required) is None:
            r.fail(join(where, required), "is required")
    d = OidcSettings(issuer="", audience="")

    def seconds(key: str, default: timedelta, *, allow_zero: bool = False) -> timedelta:
        if spec.get(key) is None:
            return default
        return r.duration(spec[key], join(where, key), allow_zero=allow_zero)

    def claim(key: str, default: str) -> str:
        return default if spec.get(key) is None else r.string(spec[key], join(where, key))

    algorithms = d.algorithms
    if spec.get("algorithms") is not None:
        algorithms = tuple(r.strings(spec["algorithms"], join(where, "algorithms"), unique=True))
        for i, name in enumerate(algorithms):
            if name not in ASYMMETRIC_ALGORITHMS:
                r.fail(
                    join(join(where, "algorithms"), i),
                    f"{name!r} is not allowed; public-key algorithms only: {', '.join(ASYMMETRIC_ALGORITHMS)}",
                )
        if not algorithms:
            r.fail(join(where, "algorithms"), "name at least one algorithm")
    ca_bundle = _ca_bundle(r, spec.get("ca_bundle"), join(where, "ca_bundle"), base_dir)
    per_tenant = join(where, "tenant_roles")
    tenant_roles = {
        r.tenant(tenant, join(per_tenant, str(tenant))): _roles(r, doc, join(per_tenant, str(tenant)))
        for tenant, doc in r.mapping(spec.get("tenant_roles") or {}, per_tenant).items()
    }
    default_role = None
    if spec.get("default_role") is not None:
        default_role = r.choice(spec["default_role"], join(where, "default_role"), Role)
    names = d.name_claims
    if spec.get("name_claims") is not None:
        names = tuple(r.strings(spec["name_claims"], join(where, "name_claims")))
    client_id = None if spec.get("client_id") is None else r.string(spec["client_id"], join(where, "client_id"))
    client_secret = None
    if spec.get("client_secret_env") is not None:
        name = r.string(spec["client_secret_env"], join(where, "client_secret_env"))
        client_secret = os.environ.get(name)
        if not client_secret:
            r.fail(join(where, "client_secret_env"), f"the environment variable {name} is not set")
    redirect_url = None
    if spec.get("redirect_url") is not None:
        redirect_url = r.string(spec["redirect_url"], join(where, "redirect_url"))
        if not _is_callback_url(redirect_url):
            r.fail(
                join(where, "redirect_url"),
                "must be https://<this server>/login/oidc/callback (http:// on loopback only)",
            )
    if (client_id is None) != (redirect_url is None):
        r.fail(
            join(where, "client_id" if client_id is None else "redirect_url"),
            "the console's sign-in needs both client_id and redirect_url",
        )
    return OidcSettings(
        client_id=client_id,
        client_secret=client_secret,
        redirect_url=redirect_url,
        issuer=_https(r, spec["issuer"], join(where, "issuer")),
        audience=r.string(spec["audience"], join(where, "audience")),
        jwks_url=None if spec.get("jwks_url") is None else _https(r, spec["jwks_url"], join(where, "jwks_url")),
        ca_bundle=ca_bundle,
        algorithms=algorithms,
        clock_skew=seconds("clock_skew_seconds", d.clock_skew, allow_zero=True),
        tenant_claim=claim("tenant_claim", d.tenant_claim),
        roles_claim=claim("roles_claim", d.roles_claim),
        roles=_roles(r, spec.get("roles") or {}, join(where, "roles")),
        tenant_roles=tenant_roles,
        default_role=default_role,
        name_claims=names,
        timeout=seconds("timeout_seconds", d.timeout),
        refetch_interval=seconds("refetch_interval_seconds", d.refetch_interval, allow_zero=True),
        keys_max_age=seconds("keys_max_age_seconds", d.keys_max_age),
    )


def _roles(r: Reader, value: Any, where: str) -> dict[str, Role]:
    """A claim value -> role map, in the file's order (the first value a token holds wins)."""
    return {
        r.string(name, join(where, str(name))): r.choice(role, join(where, str(name)), Role)
        for name, role in r.mapping(value, where).items()
    }
