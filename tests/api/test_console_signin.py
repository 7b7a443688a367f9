"""Signing in to the console: with a token, a directory account, or the identity provider's
authorization-code flow with PKCE; the session cookie, its CSRF token, and sign-out."""

from __future__ import annotations

import re
import ssl
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.api.conftest import World
from tests.helpers import make_config
from tests.ldap_directory import USERS
from tests.oidc_issuer import Issuer

from jobgate.api.access import CONSOLE_ATTRIBUTE
from jobgate.core.records import AuditFilter
from jobgate.core.tokens import Role
from jobgate.identity.authenticator import Authenticator
from jobgate.identity.sessions import PENDING_COOKIE, SESSION_COOKIE
from jobgate.service import audit, tokens

CLIENT_ID = "jobgate-console"


def _form_csrf(client: TestClient) -> str:
    page = client.get("/login")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def _sign_in(client: TestClient, **fields: str) -> Any:
    return client.post("/login", data={"csrf": _form_csrf(client), **fields}, follow_redirects=False)


def _fresh_client(w: World) -> TestClient:
    return TestClient(w.client.app, follow_redirects=False)


def test_a_token_signs_in_and_its_revocation_ends_the_session(world: World) -> None:
    client = _fresh_client(world)
    assert client.get("/").status_code == 303  # a page: sign in first
    assert client.get("/").headers["location"] == "/login"
    made = tokens.create(world.engine, tenant_id="acme", role="operator", actor="test", principal="olive")
    signed = _sign_in(client, method="token", token=made.token)
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    home = client.get("/")
    assert home.status_code == 200 and "olive" in home.text and "operator" in home.text
    secret = made.token.split("_", 2)[2]  # jgt_<id>_<secret>; the secret itself may hold "_"
    assert secret not in home.text and secret not in cookie  # the secret is nowhere
    tokens.revoke(world.engine, "acme", made.stored.token_id, actor="test")
    assert client.get("/").status_code == 303


def _session_lifetime(w: World, response: Any) -> float:
    """How long the session a sign-in answered with lasts: its cookie's Max-Age, checked
    against the signed expiry inside the value (what the server holds the browser to)."""
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith(f"{SESSION_COOKIE}="))
    max_age = int(re.search(r"Max-Age=(\d+)", cookie).group(1))  # type: ignore[union-attr]
    value = cookie.split(";", 1)[0].split("=", 1)[1].strip('"')
    signer = w.client.app.state.server.signer("session")  # type: ignore[attr-defined]
    assert signer.loads(value) is not None
    assert signer.loads(value, now=time.time() + max_age + 2) is None  # the value itself ends then
    return float(max_age)


def test_a_session_from_a_pasted_credential_ends_when_the_credential_does(oidc_world: World, issuer: Issuer) -> None:
    """A JWT or a jobgate token pasted into the form gives a session that ends with it, not
    ``session_hours`` later; one already expired gives none."""
    w = oidc_world
    jwt_in = _sign_in(_fresh_client(w), method="token", token=issuer.token(lifetime=timedelta(seconds=90)))
    assert jwt_in.status_code == 303, jwt_in.text
    assert 0 < _session_lifetime(w, jwt_in) <= 90
    made = tokens.create(w.engine, tenant_id="acme", role="operator", actor="test", expires_in=timedelta(minutes=10))
    token_in = _sign_in(_fresh_client(w), method="token", token=made.token)
    assert token_in.status_code == 303 and 500 < _session_lifetime(w, token_in) <= 600
    lasting = tokens.create(w.engine, tenant_id="acme", role="operator", actor="test")
    assert _session_lifetime(w, _sign_in(_fresh_client(w), method="token", token=lasting.token)) == 8 * 3600


def test_a_failed_sign_in_says_one_thing_and_sets_no_session(world: World) -> None:
    client = _fresh_client(world)
    revoked = tokens.create(world.engine, tenant_id="acme", role="admin", actor="test")
    tokens.revoke(world.engine, "acme", revoked.stored.token_id, actor="test")
    for fields in (
        {"method": "token", "token": "jgt_000000000000_" + "x" * 43},
        {"method": "token", "token": revoked.token},
        {"method": "token", "token": ""},
        {"method": "ldap", "username": "alice", "password": "x"},  # no directory configured here
        {"method": "nothing"},
    ):
        response = _sign_in(client, **fields)
        assert response.status_code == 401, (fields, response.text)
        assert "Sign-in failed" in response.text and SESSION_COOKIE not in response.headers.get("set-cookie", "")
    assert client.get("/").status_code == 303


def test_the_sign_in_form_cannot_be_submitted_from_elsewhere(world: World) -> None:
    """Login CSRF: a page of another site posting the form lacks the value set with ours."""
    client = _fresh_client(world)
    token = world.tokens[("acme", Role.ADMIN)]
    forged = client.post("/login", data={"method": "token", "token": token, "csrf": "guess"}, follow_redirects=False)
    assert forged.status_code == 403 and SESSION_COOKIE not in forged.headers.get("set-cookie", "")


def test_sign_out_needs_the_session_csrf_token(world: World) -> None:
    client = _fresh_client(world)
    _sign_in(client, method="token", token=world.tokens[("acme", Role.CONSUMER)])
    home = client.get("/")
    csrf = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert csrf is not None
    forged = client.post("/logout", data={"csrf": "not-it"})
    assert forged.status_code == 403 and forged.headers["content-type"].startswith("text/html")
    assert "(forbidden, csrf)" in forged.text and "Sign out" in forged.text  # a page of the console
    # Its audit entry names the credential it rode on, as every other refusal's does (found by
    # a review: the refusal was recorded before the credential was known to the request).
    (entry,) = audit.search(world.engine, AuditFilter(tenant_id="acme", action="access.refused"))
    assert entry.event.payload["via"]["credential"].startswith("token:")
    assert client.get("/").status_code == 200  # still signed in
    out = client.post("/logout", data={"csrf": csrf.group(1)})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert client.get("/").status_code == 303


def test_sign_out_ends_the_session_on_the_server_not_only_in_the_browser(world: World) -> None:
    """A copy of the cookie (a shared machine, a proxy's log) opens nothing after sign-out; the
    same principal's other sessions are not ended with it."""
    client, other = _fresh_client(world), _fresh_client(world)
    token = world.tokens[("acme", Role.OPERATOR)]
    _sign_in(client, method="token", token=token)
    _sign_in(other, method="token", token=token)
    copied = client.cookies.get(SESSION_COOKIE)
    assert copied is not None
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/").text)
    assert csrf is not None
    assert client.post("/logout", data={"csrf": csrf.group(1)}).status_code == 303
    replay = _fresh_client(world)
    replay.cookies.set(SESSION_COOKIE, copied)
    for path in ("/", "/runs"):
        refused = replay.get(path)
        assert refused.status_code == 303 and refused.headers["location"] == "/login", path
    forged_post = replay.post("/logout", data={"csrf": csrf.group(1)})
    assert forged_post.status_code == 303 and forged_post.headers["location"] == "/login"  # a form: sign in again
    assert other.get("/").status_code == 200  # the same operator's other session goes on


def test_a_changed_cookie_is_no_session_and_the_api_ignores_cookies(world: World) -> None:
    client = _fresh_client(world)
    _sign_in(client, method="token", token=world.tokens[("acme", Role.ADMIN)])
    session = client.cookies.get(SESSION_COOKIE)
    assert session is not None
    body, mac = session.split(".")
    flipped = mac[:10] + ("C" if mac[10] == "B" else "B") + mac[11:]  # a middle character: all six bits count
    for forged in (f"{body}x.{mac}", f"{body}.{flipped}", "garbage", f"{body}.{body}"):
        other = _fresh_client(world)
        other.cookies.set(SESSION_COOKIE, forged)
        assert other.get("/").status_code == 303
    api = client.get("/api/v1/runs")  # the API reads the Authorization header alone: no CSRF surface
    assert api.status_code == 401


def test_every_console_route_has_an_access_rule() -> None:
    from jobgate.api.access import rule_of
    from jobgate.console import signin, views

    routes = [*signin.router.routes, *views.router.routes]
    console = [r for r in routes if getattr(getattr(r, "endpoint", None), CONSOLE_ATTRIBUTE, False)]
    assert {r.path for r in console} >= {"/", "/runs", "/login", "/logout", "/login/oidc", "/login/oidc/callback"}
    assert [r.path for r in console if rule_of(r.endpoint) is None] == []


def test_a_directory_account_signs_in_with_the_form(ldap_world: World) -> None:
    client = _fresh_client(ldap_world)
    assert 'name="username"' in client.get("/login").text
    signed = _sign_in(client, method="ldap", username="bob", password=USERS["bob"][0])
    assert signed.status_code == 303
    home = client.get("/")
    assert "Bob Operator" in home.text and "ldap:bob" in home.text
    wrong = _sign_in(_fresh_client(ldap_world), method="ldap", username="bob", password="nope")
    assert wrong.status_code == 401


@pytest.fixture
def flow_world(oidc_world: World, issuer: Issuer, tmp_path: Path) -> World:
    redirect = "http://127.0.0.1/login/oidc/callback"
    config = make_config(
        tmp_path, auth={"oidc": issuer.config(client_id=CLIENT_ID, redirect_url=redirect, audience="jobgate-api")}
    )
    state: Any = oidc_world.client.app.state.server  # type: ignore[attr-defined]
    state.authenticator = Authenticator(oidc_world.engine, config.auth)
    return oidc_world


def _to_provider(client: TestClient, issuer: Issuer) -> tuple[str, dict[str, str]]:
    """Start the flow; return the provider's redirect back (its path and query) after it signed in."""
    start = client.get("/login/oidc")
    assert start.status_code == 302, start.text
    location = start.headers["location"]
    assert location.startswith(f"{issuer.url}/authorize?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["client_id"] == CLIENT_ID and "openid" in query["scope"].split()
    with httpx.Client(verify=ssl.create_default_context(cafile=str(issuer.ca_bundle))) as browser:
        back = browser.get(location)
    assert back.status_code == 302
    url = urlsplit(back.headers["location"])
    return url.path, {k: v[0] for k, v in parse_qs(url.query).items()}


def test_the_provider_signs_a_person_in_with_pkce(flow_world: World, issuer: Issuer) -> None:
    w = flow_world
    client = _fresh_client(w)
    assert f"Sign in with {issuer.url}" in client.get("/login").text
    issuer.user = "carla"
    path, back = _to_provider(client, issuer)
    signed = client.get(path, params=back)
    assert signed.status_code == 303, signed.text
    # the flow's cookie is deleted where it was set (a cookie is removed by its own path only)
    gone = [c for c in signed.headers.get_list("set-cookie") if c.startswith(f"{PENDING_COOKIE}=")]
    assert len(gone) == 1 and "Path=/login/oidc;" in gone[0] + ";" and "Max-Age=0" in gone[0]
    assert PENDING_COOKIE not in client.cookies
    home = client.get("/")
    assert home.status_code == 200 and "Carla Example" in home.text and "oidc:carla" in home.text
    replayed = _fresh_client(w)
    replayed.cookies = client.cookies  # the same browser state, the code used already
    assert replayed.get(path, params=back).status_code == 401


def test_a_forged_or_crossed_callback_signs_nobody_in(flow_world: World, issuer: Issuer) -> None:
    w = flow_world
    client = _fresh_client(w)
    path, back = _to_provider(client, issuer)
    assert client.get(path, params={**back, "state": "forged"}).status_code == 401  # not the state sent
    victim = _fresh_client(w)  # a browser that never started a flow gets someone else's code
    _, theirs = _to_provider(_fresh_client(w), issuer)
    assert victim.get(path, params=theirs).status_code == 401
    denied = client.get(path, params={"error": "access_denied", "state": back["state"]})
    assert denied.status_code == 401
    # a failed callback spends the flow's state too (found by a review: it stayed 10 minutes)
    assert any(c.startswith(f"{PENDING_COOKIE}=") and "Max-Age=0" in c for c in denied.headers.get_list("set-cookie"))
    assert client.get("/").status_code == 303 and victim.get("/").status_code == 303


def test_an_id_token_with_another_nonce_is_refused(flow_world: World, issuer: Issuer) -> None:
    client = _fresh_client(flow_world)
    path, back = _to_provider(client, issuer)
    issuer.codes[back["code"]]["nonce"] = "another"  # the provider signs a nonce we never sent
    assert client.get(path, params=back).status_code == 401
    assert client.get("/").status_code == 303


def test_every_console_page_forbids_framing_sniffing_and_scripts_from_elsewhere(world: World) -> None:
    client = _fresh_client(world)
    login = client.get("/login")
    _sign_in(client, method="token", token=world.tokens[("acme", Role.OPERATOR)])
    for page in (login, client.get("/"), client.get("/runs")):
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
        assert "<script>" not in page.text  # no inline script the policy would have to admit


def test_console_refusals_made_before_a_page_runs_are_pages(world: World) -> None:
    """Found by a review in a real browser: a form posted after the session ended, a stale CSRF
    token, a form over the size limit and an address that is only a form's action answered with
    the API's JSON (one of them blaming a bearer token). Each is a page now; the API keeps JSON."""
    client = _fresh_client(world)
    _sign_in(client, method="token", token=world.tokens[("acme", Role.ADMIN)])
    home = client.get("/")
    assert home.headers["cache-control"] == "no-store"  # Back after sign-out shows no signed-in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert csrf is not None
    # a reason of 2,000 four-byte characters (the field's maxlength) is a form like any other
    wide = client.post("/admin/safe-mode", data={"csrf": csrf.group(1), "active": "true", "reason": "中" * 2000})
    assert wide.status_code == 303
    from jobgate.service import safemode

    period = safemode.status(world.engine, "acme")
    assert period is not None and period.active and period.reason == "中" * 2000
    huge = client.post("/admin/safe-mode", data={"csrf": csrf.group(1), "active": "false", "reason": "x" * 200_000})
    assert huge.status_code == 422 and huge.headers["content-type"].startswith("text/html")
    assert "longer than a console form may be" in huge.text and "(validation_error, form)" in huge.text
    still = safemode.status(world.engine, "acme")
    assert still is not None and still.active  # refused: nothing changed
    html = {"accept": "text/html,application/xhtml+xml"}
    for path, status in (("/admin/tokens", 405), ("/no-such-page", 404)):
        page = client.get(path, headers=html)
        assert page.status_code == status and page.headers["content-type"].startswith("text/html"), path
        assert "Sign out" in page.text or "Sign in" in page.text
    assert client.get("/no-such-page").json()["error"] == "not_found"  # no page asked for: JSON
    assert client.get("/api/v1/no-such-route", headers=html).json()["error"] == "not_found"  # the API's own
    ended = _fresh_client(world)
    ended.cookies.set(SESSION_COOKIE, "not-a-session")
    after = ended.post("/admin/safe-mode", data={"csrf": csrf.group(1), "active": "false"})
    assert after.status_code == 303 and after.headers["location"] == "/login"
    anonymous = _fresh_client(world).get("/no-such-page", headers=html)
    assert anonymous.status_code == 404 and "Sign in" in anonymous.text


def test_a_directory_session_follows_the_directory_and_mints_nothing_beyond_it(
    ldap_world: World, tmp_path: Path
) -> None:
    """Found by a review: a person removed from the directory (and from its admin group) kept
    an admin console session for its eight hours, and minted admin tokens that never expired
    with it. A directory session asks the directory again (as a sign-in is remembered, for
    ``cache_seconds``): another group, another role; gone, no session. What it mints ends with it."""
    import ldap3
    from tests.api.test_ldap import _use
    from tests.ldap_directory import PEOPLE, group_dn

    w = ldap_world
    assert w.directory is not None
    _use(w, tmp_path, ldap={"cache_seconds": 0})  # the directory decides every time
    client = _fresh_client(w)
    assert _sign_in(client, method="ldap", username="alice", password=USERS["alice"][0]).status_code == 303
    admin = client.get("/admin")
    assert admin.status_code == 200
    csrf = re.search(r'name="csrf" value="([^"]+)"', admin.text)
    assert csrf is not None
    made = client.post("/admin/tokens", data={"csrf": csrf.group(1), "role": "operator", "label": "x"})
    assert made.status_code in (200, 201, 303), made.text
    with w.engine.store.read() as tx:
        minted = [t for t in tx.tokens_list("acme") if t.label == "x"]
    assert minted and all(t.expires_at is not None for t in minted)  # no longer than the session
    member = f"uid=alice,{PEOPLE}"
    with w.directory.root() as conn:
        conn.modify(group_dn("jobgate-admins"), {"member": [(ldap3.MODIFY_DELETE, [member])]})
    try:
        assert client.get("/admin").status_code == 403  # a consumer now: the group is gone
    finally:
        with w.directory.root() as conn:
            conn.modify(group_dn("jobgate-admins"), {"member": [(ldap3.MODIFY_ADD, [member])]})
    assert client.get("/admin").status_code == 200
    _use(w, tmp_path, ldap={"cache_seconds": 0, "user_base": f"ou=gone,{PEOPLE}"})  # no longer found
    assert client.get("/").status_code in (303, 401)
