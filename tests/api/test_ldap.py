"""People of an LDAP directory signing in with HTTP Basic (``auth.ldap``, seed 004), against a
real OpenLDAP server (Debian's slapd) on 127.0.0.1: roles from groups, the same 401 for every
bad credential, the bind cache, a directory that is down, and LDAP-only mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.api.conftest import ACME_JOB, World, basic
from tests.helpers import count, make_config
from tests.ldap_directory import SERVICE_PASSWORD, USERS, Directory, group_dn, running_directory

from jobgate.config.auth import parse_auth_settings
from jobgate.core.errors import ConfigurationError
from jobgate.core.records import AuditFilter
from jobgate.core.tokens import Role
from jobgate.documents import Reader
from jobgate.identity.authenticator import Authenticator
from jobgate.identity.ldap import normal_dn, role_of
from jobgate.service import audit

API = "/api/v1"


def login(uid: str, password: str | None = None) -> dict[str, str]:
    return basic(uid, USERS[uid][0] if password is None else password)


def _refused(response: Any) -> None:
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "unauthenticated", "message": "a valid bearer token is required"}
    assert response.headers["www-authenticate"].startswith('Basic realm="jobgate"')


def _use(w: World, tmp_path: Path, **overrides: Any) -> None:
    """Serve with another ``auth`` section (a fresh authenticator: no cache, no pool)."""
    assert w.directory is not None
    auth = {"ldap": w.directory.config(**overrides.pop("ldap", {})), **overrides}
    state = w.client.app.state.server  # type: ignore[attr-defined]
    state.authenticator.close()
    state.authenticator = Authenticator(w.engine, make_config(tmp_path, auth=auth).auth)


def test_a_directory_user_acts_under_their_own_name(ldap_world: World) -> None:
    w = ldap_world
    made = w.client.post(
        f"{API}/runs", json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=login("bob")
    )
    assert made.status_code == 201, made.text
    run = made.json()["run"]
    assert run["requested_by"] == "ldap:bob"
    cancelled = w.client.post(f"{API}/runs/{run['job_run_id']}/cancel", json={"reason": "test"}, headers=login("bob"))
    assert cancelled.status_code == 200, cancelled.text
    entries = audit.search(w.engine, AuditFilter(tenant_id="acme", target_id=run["job_run_id"]))
    by_bob = [e for e in entries if e.event.actor == "ldap:bob"]
    assert by_bob and all(
        e.event.payload["via"] == {"credential": f"ldap:{w.directory.ldaps_url}", "display_name": "Bob Operator"}  # type: ignore[union-attr]
        for e in by_bob
    )


def test_groups_give_roles_and_no_group_is_a_consumer(ldap_world: World) -> None:
    w = ldap_world
    audit_log = f"{API}/audit"
    assert w.client.get(audit_log, headers=login("alice")).status_code == 200  # admin
    assert w.client.get(audit_log, headers=login("dave")).status_code == 200  # auditor: first in the map
    assert w.client.get(audit_log, headers=login("bob")).status_code == 403  # operator
    reader = login("carol")
    assert w.client.get(f"{API}/runs", headers=reader).status_code == 200
    post = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=reader)
    assert post.status_code == 403 and count(w.engine, "job_runs") == 0


def test_every_bad_credential_is_the_same_401_and_nothing_is_stored(ldap_world: World) -> None:
    w = ldap_world
    bad = {
        "wrong password": login("alice", "nope"),
        "unknown user": basic("zed", "zed-pw"),
        "empty password (an anonymous bind)": basic("alice", ""),
        "empty name": basic("", "x"),
        "wildcard name": basic("*", USERS["alice"][0]),
        "filter injection": basic("alice)(uid=*", USERS["alice"][0]),
        "another user's password": login("alice", USERS["bob"][0]),
        "not base64": {"Authorization": "Basic !!!"},
        "no colon": {"Authorization": "Basic YWxpY2U="},
        "the service account's DN": basic("cn=jobgate,ou=services,dc=example,dc=com", SERVICE_PASSWORD),
        # passwords the client library refuses to send (SASLprep): wrong passwords, not an outage
        "a control character in the password": basic("alice", USERS["alice"][0] + "\x00more"),
        "a non-ASCII space in the password": basic("alice", USERS["alice"][0] + "\u3000"),
    }
    body = {"job_definition_id": ACME_JOB, "params": {"n": "1"}}
    for label, headers in bad.items():
        response = w.client.post(f"{API}/runs", json=body, headers=headers)
        assert response.status_code == 401, (label, response.text)
        _refused(response)
    assert count(w.engine, "job_runs") == 0


def test_a_bind_is_cached_briefly_and_a_failure_never(ldap_world: World, tmp_path: Path) -> None:
    w = ldap_world
    assert w.directory is not None
    try:
        assert w.client.get(f"{API}/runs", headers=login("carol")).status_code == 200
        w.directory.set_password("carol", "changed-pw")
        # Within the cache the old password still opens (one bind per minute, not per request)...
        assert w.client.get(f"{API}/runs", headers=login("carol")).status_code == 200
        # ...the new one was never refused-and-remembered, and works at once.
        assert w.client.get(f"{API}/runs", headers=login("carol", "changed-pw")).status_code == 200
        _use(w, tmp_path, ldap={"cache_seconds": 0})  # no cache: the directory decides every time
        _refused(w.client.get(f"{API}/runs", headers=login("carol")))
        _refused(w.client.get(f"{API}/runs", headers=login("carol", "later-pw")))
        w.directory.set_password("carol", "later-pw")
        assert w.client.get(f"{API}/runs", headers=login("carol", "later-pw")).status_code == 200
    finally:
        w.directory.set_password("carol", USERS["carol"][0])


def test_start_tls_on_a_plain_port_works_and_plain_ldap_is_refused(ldap_world: World, tmp_path: Path) -> None:
    w = ldap_world
    assert w.directory is not None
    _use(w, tmp_path, ldap={"url": w.directory.ldap_url, "start_tls": True})
    assert w.client.get(f"{API}/runs", headers=login("alice")).status_code == 200
    with pytest.raises(ConfigurationError) as refused:
        make_config(tmp_path, auth={"ldap": w.directory.config(url=w.directory.ldap_url)})
    assert refused.value.field == "auth.ldap.url"


def test_a_directory_that_is_down_is_503_never_a_pass(
    ldap_world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ldap_world
    with running_directory(tmp_path / "down") as doomed:
        monkeypatch.setenv("JOBGATE_TEST_LDAP_PASSWORD", SERVICE_PASSWORD)
        state = w.client.app.state.server  # type: ignore[attr-defined]
        state.authenticator.close()
        state.authenticator = Authenticator(w.engine, make_config(tmp_path, auth={"ldap": doomed.config()}).auth)
        assert w.client.get(f"{API}/runs", headers=login("bob")).status_code == 200
        doomed.stop()
        response = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=login("alice"))
    assert response.status_code == 503 and response.json()["error"] == "identity_provider_unavailable"
    assert count(w.engine, "job_runs") == 0
    untrusted = tmp_path / "other-ca.pem"
    untrusted.write_bytes((tmp_path / "down" / "ca.pem").read_bytes())  # not the CA of ``w.directory``
    _use(w, tmp_path, ldap={"ca_bundle": str(untrusted)})
    response = w.client.get(f"{API}/runs", headers=login("alice"))  # a certificate it cannot trust
    assert response.status_code == 503 and response.json()["error"] == "identity_provider_unavailable"


def test_ldap_only_mode_answers_501_on_tokens(ldap_world: World, tmp_path: Path) -> None:
    w = ldap_world
    _use(w, tmp_path, tokens=False)
    admin = login("alice")
    for method, path in (("GET", "/tokens"), ("POST", "/tokens"), ("DELETE", "/tokens/abcdef123456")):
        response = w.client.request(
            method, f"{API}{path}", json={"role": "admin"} if method == "POST" else None, headers=admin
        )
        assert response.status_code == 501, (method, response.text)
        assert response.json()["error"] == "not_implemented" and "LDAP" in response.json()["message"]
    assert count(w.engine, "api_tokens") == len(Role) * 2  # the world's own, none more
    _refused(w.client.get(f"{API}/runs", headers=w.headers("other", Role.ADMIN)))  # a jgt_ token


def test_one_person_through_a_login_and_a_token_they_minted(ldap_world: World, tmp_path: Path) -> None:
    w = ldap_world
    alice = login("alice")
    doc = {
        "job_definition_id": "adhoc",
        "job_class": "MAINTENANCE_JOB",
        "runner": "py",
        "body": f"open({str(tmp_path / 'ran.txt')!r}, 'a').write('ran')",
    }
    assert w.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=alice).status_code == 200
    minted = w.client.post(f"{API}/tokens", json={"role": "admin"}, headers=alice).json()
    assert minted["info"]["principal"] == "ldap:alice"
    approve = f"{API}/definitions/adhoc/approve"
    digest = w.digest("adhoc")
    for headers in (alice, basic("ALICE", USERS["alice"][0]), {"Authorization": f"Bearer {minted['token']}"}):
        refused = w.client.post(approve, json={"digest": digest}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"] == "four_eyes", refused.json()
    assert not (tmp_path / "ran.txt").exists()


# -- the rules alone ---------------------------------------------------------------------------


def _settings(directory: Directory, **overrides: Any) -> Any:
    reader = Reader("jobgate.yaml", ConfigurationError)
    return parse_auth_settings(reader, {"ldap": directory.config(**overrides)}, Path("/"))


def test_group_names_compare_without_case_or_spacing(directory: Directory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBGATE_TEST_LDAP_PASSWORD", SERVICE_PASSWORD)
    settings = _settings(directory).ldap
    assert normal_dn("CN=Ops, OU=Groups ,DC=example") == "cn=ops,ou=groups,dc=example"
    assert role_of([group_dn("jobgate-operators").upper().replace(",", ", ")], settings) is Role.OPERATOR
    assert role_of([group_dn("jobgate-operators"), group_dn("jobgate-admins")], settings) is Role.ADMIN  # file order
    assert role_of([], settings) is Role.CONSUMER
    strict = _settings(directory, default_role=None).ldap
    assert role_of(["cn=elsewhere"], strict) is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"url": "ldap://127.0.0.1:389"}, "auth.ldap.url"),
        ({"url": "http://127.0.0.1"}, "auth.ldap.url"),
        ({"user_filter": "uid={username}"}, "auth.ldap.user_filter"),
        ({"user_filter": "(uid=alice)"}, "auth.ldap.user_filter"),
        ({"bind_password_env": "JOBGATE_TEST_UNSET_VARIABLE"}, "auth.ldap.bind_password_env"),
        ({"bind_password_env": None}, "auth.ldap.bind_dn"),
        ({"groups": {"cn=x": "root"}}, "auth.ldap.groups.cn=x"),
        ({"group_attribute": "member of"}, "auth.ldap.group_attribute"),
        ({"pool_size": 0}, "auth.ldap.pool_size"),
        ({"user_base": None}, "auth.ldap.user_base"),
        ({"password": "x"}, "auth.ldap.password"),
    ],
)
def test_an_unsafe_or_mistyped_ldap_setting_is_refused_by_name(
    directory: Directory, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any], field: str
) -> None:
    monkeypatch.setenv("JOBGATE_TEST_LDAP_PASSWORD", SERVICE_PASSWORD)
    monkeypatch.delenv("JOBGATE_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(ConfigurationError) as refused:
        _settings(directory, **overrides)
    assert refused.value.field == field
