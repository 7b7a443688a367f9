"""People of an LDAP directory, signed in with HTTP Basic and checked by a bind (seed 004).

A request's ``Authorization: Basic`` credentials are checked in three steps, with ldap3: the
service account (``bind_dn``; else an anonymous bind) finds the one entry ``user_filter``
matches under ``user_base`` — the name escaped, so ``*`` or ``)(`` match only themselves; a
bind as that entry with the given password proves the password; the entry's group attribute
(``memberOf``) gives the role through the ``groups`` map, else ``default_role``. An empty
password is refused before the directory is asked: LDAP treats a bind with a name and no
password as an anonymous bind that succeeds.

A success is remembered for ``cache`` (keyed by a hash of the name and password, never the
password itself), a failure never, so a changed password or a removed user takes effect within
``cache`` and a wrong guess is always asked of the directory. At most ``pool_size`` requests
talk to the directory at once, over service connections kept open between them; a request
that cannot get a turn within ``timeout``, or a directory that cannot be reached, is 503.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import ldap3
from ldap3.core import exceptions as ldap_errors
from ldap3.utils.conv import escape_filter_chars

from jobgate.config.auth import LdapSettings
from jobgate.core.tokens import Role
from jobgate.identity.errors import IdentityProviderUnavailable
from jobgate.service.tokens import Principal, refused

log = logging.getLogger("jobgate.identity")

PREFIX = "ldap:"  # records name a person ``ldap:<uid>``; no native token may take the name
MAX_NAME_CHARS = 256
MAX_PASSWORD_CHARS = 1024


class DirectoryDown(Exception):
    """The directory could not be reached or answered out of protocol."""


class PasswordUnusable(DirectoryDown):
    """A password the client library refuses to send (SASLprep: a control character, say): for
    a person signing in it is a wrong password (401); for the service account a broken setting."""


class LdapDirectory:
    def __init__(self, settings: LdapSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        tls = ldap3.Tls(
            validate=ssl.CERT_REQUIRED,
            ca_certs_file=None if settings.ca_bundle is None else str(settings.ca_bundle),
            version=ssl.PROTOCOL_TLS_CLIENT,
        )
        timeout = settings.timeout.total_seconds()
        self._server = ldap3.Server(
            settings.url,
            use_ssl=settings.url.startswith("ldaps://"),
            tls=tls,
            connect_timeout=timeout,
            get_info=ldap3.NONE,
        )
        self._turns = threading.BoundedSemaphore(settings.pool_size)
        self._idle: list[ldap3.Connection] = []
        self._idle_lock = threading.Lock()
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._cache_lock = threading.Lock()

    def close(self) -> None:
        """Close the kept service connections (the server is stopping)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)

    def authenticate(self, username: str, password: str) -> Principal:
        """The principal of a directory user, or ``Unauthenticated`` / ``IdentityProviderUnavailable``."""
        if not username or not password:
            raise refused("LDAP sign-in with an empty name or password")
        if len(username) > MAX_NAME_CHARS or len(password) > MAX_PASSWORD_CHARS:
            raise refused("LDAP sign-in with an over-long name or password")
        key = hashlib.sha256(f"{username}\0{password}".encode()).hexdigest()
        now = self._clock()
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        principal = self._ask_directory(username, password)
        if self.settings.cache.total_seconds() > 0:
            with self._cache_lock:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}  # drop the expired
                self._cache[key] = (now + self.settings.cache.total_seconds(), principal)
        return principal

    def still_member(self, principal: Principal) -> Principal:
        """The directory's answer now for a person signed in earlier (a console session): found
        again by the service account (no password asked), with the role their groups give now,
        remembered for ``cache`` like a sign-in. ``Unauthenticated`` when the entry is gone or in
        no mapped group: a person removed from the directory, or from its groups, keeps no
        console session (found by a review: one kept it for its eight hours, and minted admin
        tokens with it). ``IdentityProviderUnavailable`` when the directory does not answer."""
        uid = (principal.name or "").removeprefix(PREFIX)
        if not uid or principal.name == uid:
            raise refused("a directory session names no directory user")
        key = f"session\0{uid}"
        now = self._clock()
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        if not self._turns.acquire(timeout=self.settings.timeout.total_seconds()):
            raise IdentityProviderUnavailable()
        try:
            found = self._find(uid)
        except DirectoryDown as exc:
            log.warning("LDAP %s: %s", self.settings.url, exc, extra={"action": "idp_unreachable"})
            raise IdentityProviderUnavailable() from None
        finally:
            self._turns.release()
        if found is None:
            raise refused(f"LDAP user {uid!r} is no longer in the directory")
        current = principal_of(found[0], found[1], self.settings, fallback_uid=uid)
        if self.settings.cache.total_seconds() > 0:
            with self._cache_lock:
                self._cache[key] = (now + self.settings.cache.total_seconds(), current)
        return current

    def _ask_directory(self, username: str, password: str) -> Principal:
        if not self._turns.acquire(timeout=self.settings.timeout.total_seconds()):
            log.warning("LDAP %s: every connection busy", self.settings.url, extra={"action": "idp_busy"})
            raise IdentityProviderUnavailable()
        try:
            found = self._find(username)
            if found is None:
                raise refused(f"LDAP user {username!r} not found (or not unique) under {self.settings.user_base}")
            dn, attributes = found
            if not self._bind_as(dn, password):
                raise refused(f"LDAP bind refused for {dn}")
        except DirectoryDown as exc:
            log.warning("LDAP %s: %s", self.settings.url, exc, extra={"action": "idp_unreachable"})
            raise IdentityProviderUnavailable() from None
        finally:
            self._turns.release()
        return principal_of(dn, attributes, self.settings, fallback_uid=username)

    def _find(self, username: str) -> tuple[str, Mapping[str, Any]] | None:
        try:
            return self._search(username, fresh=False)
        except DirectoryDown:  # a kept connection the directory closed (a restart): once more, anew
            return self._search(username, fresh=True)

    def _search(self, username: str, *, fresh: bool) -> tuple[str, Mapping[str, Any]] | None:
        s = self.settings
        query = s.user_filter.replace("{username}", escape_filter_chars(username))
        with self._service_connection(fresh=fresh) as conn:
            try:
                conn.search(
                    s.user_base,
                    query,
                    search_scope=ldap3.SUBTREE,
                    attributes=[s.uid_attribute, s.name_attribute, s.group_attribute],
                    size_limit=2,
                    time_limit=max(1, int(s.timeout.total_seconds())),
                )
            except ldap_errors.LDAPException as exc:
                raise DirectoryDown(f"search failed: {type(exc).__name__}") from None
            entries = [e for e in conn.response or [] if e.get("type") == "searchResEntry"]
        if len(entries) != 1:
            return None
        return str(entries[0]["dn"]), dict(entries[0].get("attributes") or {})

    @contextmanager
    def _service_connection(self, *, fresh: bool) -> Iterator[ldap3.Connection]:
        """A connection bound as the service account, from the pool (unless ``fresh``) or new;
        one that failed is closed, not returned."""
        conn = None
        if not fresh:
            with self._idle_lock:
                conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect(self.settings.bind_dn, self.settings.bind_password)
            if not conn.bound:
                raise DirectoryDown(f"the service bind was refused: {conn.result.get('description')}")
        try:
            yield conn
        except BaseException:
            _close(conn)
            raise
        with self._idle_lock:
            self._idle.append(conn)

    def _bind_as(self, dn: str, password: str) -> bool:
        try:
            conn = self._connect(dn, password)
        except PasswordUnusable:  # a password no directory takes is a wrong one, not an outage
            return False
        try:
            if conn.bound:
                return True
            code = conn.result.get("result")
            if code in (49, 50, 53):  # invalidCredentials, insufficientAccessRights, unwillingToPerform
                return False
            raise DirectoryDown(f"the user bind answered {conn.result.get('description')}")
        finally:
            _close(conn)

    def _connect(self, user: str | None, password: str | None) -> ldap3.Connection:
        """A connection bound as ``user`` (``bound`` False when the directory refused it)."""
        s = self.settings
        conn = ldap3.Connection(
            self._server,
            user=user,
            password=password,
            authentication=ldap3.SIMPLE if user else ldap3.ANONYMOUS,
            auto_bind=ldap3.AUTO_BIND_NONE,
            receive_timeout=max(1, round(s.timeout.total_seconds())),  # whole seconds (SO_RCVTIMEO)
            read_only=True,
            raise_exceptions=False,
        )
        try:
            conn.open()
            if s.start_tls and not conn.start_tls():
                raise DirectoryDown("StartTLS refused")
            conn.bind()
        except ldap_errors.LDAPSASLPrepError:
            _close(conn)
            raise PasswordUnusable("the password holds characters SASLprep refuses") from None
        except ldap_errors.LDAPException as exc:
            _close(conn)
            raise DirectoryDown(f"{type(exc).__name__}: {exc}") from None
        return conn


def _close(conn: ldap3.Connection) -> None:
    with suppress(ldap_errors.LDAPException):
        conn.unbind()
    sock = getattr(conn, "socket", None)  # ldap3 keeps the socket of a connect that failed open
    if sock is not None:
        with suppress(OSError):
            sock.close()


def _values(attributes: Mapping[str, Any], name: str) -> list[str]:
    value = attributes.get(name)
    if value is None:
        return []
    items: Sequence[Any] = value if isinstance(value, list | tuple) else [value]
    return [str(v) for v in items if str(v).strip()]


def normal_dn(dn: str) -> str:
    """A DN compared case- and spacing-insensitively (``CN=Admins, DC=x`` = ``cn=admins,dc=x``)."""
    return ",".join("=".join(p.strip() for p in rdn.split("=", 1)) for rdn in dn.lower().split(","))


def role_of(groups: Sequence[str], settings: LdapSettings) -> Role | None:
    """The first entry of ``groups`` (the file's order) the user is a member of, else the default."""
    held = {normal_dn(g) for g in groups}
    for group, role in settings.groups.items():
        if normal_dn(group) in held:
            return role
    return settings.default_role


def principal_of(dn: str, attributes: Mapping[str, Any], settings: LdapSettings, *, fallback_uid: str) -> Principal:
    """A bound directory entry -> the principal; pure. The directory's own spelling of the uid
    names the person, so ``ALICE`` and ``alice`` signing in are one person."""
    uid = (_values(attributes, settings.uid_attribute) or [fallback_uid])[0]
    role = role_of(_values(attributes, settings.group_attribute), settings)
    if role is None:
        raise refused(f"{dn} is in no group auth.ldap.groups maps, and there is no default role")
    names = _values(attributes, settings.name_attribute)
    return Principal(
        credential=f"{PREFIX}{settings.url}",
        tenant_id=settings.tenant,
        role=role,
        jobs=None,
        name=f"{PREFIX}{uid}"[:200],
        display_name=names[0][:200] if names else None,
    )
