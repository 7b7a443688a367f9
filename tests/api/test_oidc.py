"""Bearer JWTs of an OpenID Connect provider (``auth.oidc``), against a real issuer on
127.0.0.1 over HTTPS: who gets in, who is refused and how, key rotation, a provider that is
down, and that a signed-in person is one person whatever credential they use."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count, make_config
from tests.oidc_issuer import Issuer, new_key

from jobgate.config.auth import parse_auth_settings
from jobgate.core.errors import ConfigurationError
from jobgate.core.records import AuditFilter
from jobgate.core.tokens import Role, is_tenant_name
from jobgate.documents import Reader
from jobgate.identity.authenticator import Authenticator
from jobgate.identity.jwks import KeyNotFound, KeySet
from jobgate.identity.oidc import principal_of, role_of
from jobgate.service import audit
from jobgate.service.tokens import Unauthenticated

API = "/api/v1"
REDIRECT = "auth.oidc.redirect_url"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _refused(response: Any) -> None:
    """The one answer to every bad credential: 401, ``unauthenticated``, no detail."""
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "unauthenticated", "message": "a valid bearer token is required"}
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_signed_in_person_acts_under_their_own_name(oidc_world: World) -> None:
    w = oidc_world
    assert w.issuer is not None
    token = w.issuer.token("alice", roles=["jobgate-activators"])
    made = w.client.post(
        f"{API}/runs", json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=bearer(token)
    )
    assert made.status_code == 201, made.text
    assert made.json()["run"]["requested_by"] == "oidc:alice"
    listed = w.client.get(f"{API}/runs", headers=bearer(token)).json()
    assert [r["requested_by"] for r in listed["items"]] == ["oidc:alice"]


def _forged(issuer: Issuer) -> dict[str, str]:
    """Tokens that must each be refused with the same 401, by what is wrong with them."""
    good = issuer.token()
    header, claims, signature = good.split(".")
    other = new_key()
    other.kid = issuer.keys[0].kid  # the published kid, signed with a key the provider never had
    public_pem = (
        issuer.keys[0]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    def b64(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    unsigned_header = b64({"alg": "none", "typ": "JWT", "kid": issuer.keys[0].kid})
    hs_header = b64({"alg": "HS256", "typ": "JWT", "kid": issuer.keys[0].kid})
    hs_signature = base64.urlsafe_b64encode(
        hmac.new(public_pem, f"{hs_header}.{claims}".encode(), hashlib.sha256).digest()
    ).rstrip(b"=")
    tampered_claims = b64(
        {**jwt.decode(good, options={"verify_signature": False}), "roles": ["jobgate-admins"], "sub": "mallory"}
    )
    return {
        "expired": issuer.token(lifetime=timedelta(minutes=-10)),
        "not yet valid": issuer.token(nbf=jwt.decode(good, options={"verify_signature": False})["exp"] + 600),
        "wrong audience": issuer.token(aud="someone-else"),
        "unknown issuer": issuer.token(iss="https://127.0.0.1:1/elsewhere"),
        "no expiry": issuer.token(exp=None),
        # found by a review: accepted by the decoder, its minted tokens never expired
        "expiry a string of digits": issuer.token(exp=str(int((datetime.now(UTC) + timedelta(minutes=5)).timestamp()))),
        "no subject": issuer.token(sub=None),
        "wrongly signed": issuer.token(key=other),
        "claims changed after signing": f"{header}.{tampered_claims}.{signature}",
        "alg none": f"{unsigned_header}.{claims}.",
        "HS256 keyed with the public key": f"{hs_header}.{claims}.{hs_signature.decode()}",
        "unknown key id": issuer.token(key=new_key()),
        "malformed": "abc.def.ghi",
        "truncated": good[: len(good) // 2],
        "no role the map knows": issuer.token(roles=["nobody"]),
        "roles claim of the wrong type": issuer.token(roles={"admin": True}),
    }


def test_every_bad_token_is_the_same_401_and_nothing_is_stored(oidc_world: World, caplog: Any) -> None:
    w = oidc_world
    assert w.issuer is not None
    runs_before = count(w.engine, "job_runs")
    body = {"job_definition_id": ACME_JOB, "params": {"n": "1"}}
    forged = _forged(w.issuer)
    with caplog.at_level(logging.INFO, logger="jobgate"):
        for label, token in forged.items():
            response = w.client.post(f"{API}/runs", json=body, headers=bearer(token))
            assert response.status_code == 401, (label, response.text)
            _refused(response)
    assert count(w.engine, "job_runs") == runs_before
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged.count("authentication refused") >= len(forged)
    for token in forged.values():  # the reason is logged, never the credential
        assert token not in logged
        if token.count(".") == 2 and token.split(".")[2]:
            assert token.split(".")[2] not in logged


def test_the_tenant_comes_from_the_signed_claim_alone(oidc_world: World) -> None:
    w = oidc_world
    assert w.issuer is not None
    missing = w.client.get(f"{API}/runs", headers=bearer(w.issuer.token(tenant=None)))
    assert missing.status_code == 400 and missing.json()["error"] == "tenant_missing", missing.text
    empty = w.client.get(f"{API}/runs", headers=bearer(w.issuer.token(tenant="  ")))
    assert empty.status_code == 400 and empty.json()["error"] == "tenant_missing"
    other = bearer(w.issuer.token("olga", tenant="other", roles=["jobgate-admins"]))
    claimed = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB, "tenant_id": "acme"}, headers=other)
    assert claimed.status_code == 403 and claimed.json()["error"] == "tenant_claim_mismatch"
    run = w.new_run("acme")
    spoofed = {**other, "X-Tenant-Id": "acme", "X-Jobgate-Tenant": "acme", "Tenant": "acme"}
    assert w.client.get(f"{API}/runs/{run.job_run_id}", headers=spoofed).status_code == 404
    assert w.client.get(f"{API}/runs", headers=spoofed).json()["items"] == []
    assert count(w.engine, "job_runs") == 1


def test_keys_rotate_and_an_unknown_kid_refetches_once_per_interval(oidc_world: World) -> None:
    w = oidc_world
    issuer = w.issuer
    assert issuer is not None
    old = issuer.token()
    assert w.client.get(f"{API}/runs", headers=bearer(old)).status_code == 200
    reads = issuer.key_reads
    issuer.rotate("ES256")
    new = issuer.token()
    assert w.client.get(f"{API}/runs", headers=bearer(new)).status_code == 200  # refetched for the new kid
    assert issuer.key_reads == reads + 1
    _refused(w.client.get(f"{API}/runs", headers=bearer(old)))  # the retired key is gone
    # With a refetch interval, made-up key ids cannot make jobgate hammer the provider.
    state = w.client.app.state.server  # type: ignore[attr-defined]
    config = make_config(Path(w.engine.config.base_dir), auth={"oidc": issuer.config(refetch_interval_seconds=3600)})
    state.authenticator = Authenticator(w.engine, config.auth)
    assert w.client.get(f"{API}/runs", headers=bearer(new)).status_code == 200
    reads = issuer.key_reads
    for _ in range(20):
        _refused(w.client.get(f"{API}/runs", headers=bearer(issuer.token(key=new_key()))))
    assert issuer.key_reads == reads + 1  # the first made-up kid is read for once, the rest never


def test_a_new_key_is_taken_at_once_and_a_retired_one_stops_within_the_keys_age(issuer: Issuer) -> None:
    """A routine read of the keys does not use up the refetch a rotation needs (the first token
    of a new key is accepted at once); a retired key stops verifying once the keys are older
    than ``keys_max_age`` even if no token names an unknown key; and a provider that is down is
    asked again after the refetch interval, not at every request."""
    now = [1000.0]
    settings = _settings(issuer, refetch_interval_seconds=30, keys_max_age_seconds=300).oidc
    assert settings is not None
    keys = KeySet(settings, clock=lambda: now[0])
    old = issuer.keys[0]
    assert keys.key_for(old.kid, old.alg) is not None
    new = issuer.rotate("ES256")
    issuer.keys.append(old)  # both published for a while, as providers do
    now[0] += 1  # within the refetch interval of the routine read
    assert keys.key_for(new.kid, new.alg) is not None
    reads = issuer.key_reads
    issuer.keys = [new]  # the old key retired; no token names an unknown key from now on
    now[0] += 299
    assert keys.key_for(old.kid, old.alg) is not None  # the keys are not old enough to be read again
    now[0] += 2
    with pytest.raises(KeyNotFound):
        keys.key_for(old.kid, old.alg)
    assert issuer.key_reads == reads + 2  # read for their age, then once for the kid no longer there
    issuer.down = True
    now[0] += 301
    assert keys.key_for(new.kid, new.alg) is not None  # known keys serve while it is down
    tried = issuer.key_reads
    for _ in range(5):
        now[0] += 1
        assert keys.key_for(new.kid, new.alg) is not None
    assert issuer.key_reads == tried  # not asked again within the interval


def test_an_unreachable_provider_is_503_never_a_pass(oidc_world: World) -> None:
    w = oidc_world
    issuer = w.issuer
    assert issuer is not None
    token = issuer.token()
    issuer.down = True
    response = w.client.get(f"{API}/runs", headers=bearer(token))
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "identity_provider_unavailable"
    post = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=bearer(token))
    assert post.status_code == 503 and count(w.engine, "job_runs") == 0
    issuer.down = False
    assert w.client.get(f"{API}/runs", headers=bearer(token)).status_code == 200
    issuer.down = True  # keys already read: a provider that is briefly down locks nobody out
    assert w.client.get(f"{API}/runs", headers=bearer(token)).status_code == 200
    state = w.client.app.state.server  # type: ignore[attr-defined]
    nowhere = make_config(
        Path(w.engine.config.base_dir), auth={"oidc": issuer.config(issuer="https://127.0.0.1:9", jwks_url=None)}
    )
    state.authenticator = Authenticator(w.engine, nowhere.auth)  # nothing listens on port 9
    response = w.client.get(f"{API}/runs", headers=bearer(issuer.token(iss="https://127.0.0.1:9")))
    assert response.status_code == 503 and response.json()["error"] == "identity_provider_unavailable"


def test_a_discovery_document_naming_another_issuer_is_not_trusted(oidc_world: World) -> None:
    w = oidc_world
    assert w.issuer is not None
    w.issuer.extra["issuer"] = "https://evil.example"
    response = w.client.get(f"{API}/runs", headers=bearer(w.issuer.token()))
    assert response.status_code == 503 and response.json()["error"] == "identity_provider_unavailable"


def test_native_tokens_work_beside_oidc_unless_turned_off(oidc_world: World) -> None:
    w = oidc_world
    assert w.issuer is not None
    native = bearer(w.tokens[("acme", Role.ADMIN)])
    assert w.client.get(f"{API}/runs", headers=native).status_code == 200
    state = w.client.app.state.server  # type: ignore[attr-defined]
    config = make_config(Path(w.engine.config.base_dir), auth={"tokens": False, "oidc": w.issuer.config()})
    state.authenticator = Authenticator(w.engine, config.auth)
    _refused(w.client.get(f"{API}/runs", headers=native))
    assert w.client.get(f"{API}/runs", headers=bearer(w.issuer.token())).status_code == 200


def test_a_person_is_one_person_through_a_jwt_and_a_token_they_minted(oidc_world: World, tmp_path: Path) -> None:
    """Four eyes compares principals: alice signed in and alice's own token are one person;
    bob, signed in through the same provider, is another."""
    w = oidc_world
    assert w.issuer is not None
    alice = bearer(w.issuer.token("alice"))
    doc = {
        "job_definition_id": "adhoc",
        "job_class": "MAINTENANCE_JOB",
        "runner": "py",
        "body": f"open({str(tmp_path / 'ran.txt')!r}, 'a').write('ran')",
    }
    assert w.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=alice).status_code == 200
    digest = w.digest("adhoc")
    minted = w.client.post(f"{API}/tokens", json={"role": "admin"}, headers=alice).json()
    assert minted["info"]["principal"] == "oidc:alice"
    approve = f"{API}/definitions/adhoc/approve"
    for headers in (alice, bearer(minted["token"])):
        refused = w.client.post(approve, json={"digest": digest}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"] == "four_eyes", refused.json()
    bob = bearer(w.issuer.token("bob"))
    assert w.client.post(approve, json={"digest": digest}, headers=bob).status_code == 200
    # Each record names the person and the credential they acted through.
    refusals = audit.search(w.engine, AuditFilter(tenant_id="acme", action="definition.approval_refused"))
    assert [(e.event.actor, e.event.payload["via"]) for e in refusals] == [
        ("oidc:alice", {"credential": f"oidc:{w.issuer.url}", "display_name": "Alice Example"}),
        ("oidc:alice", {"credential": f"token:{minted['info']['token_id']}"}),
    ]
    approved = audit.search(w.engine, AuditFilter(tenant_id="acme", action="definition.approved"))
    assert [
        (e.event.actor, e.event.payload["via"]["display_name"]) for e in approved if e.event.target_id == "adhoc"
    ] == [("oidc:bob", "Bob Example")]
    assert all("via" not in e.event.payload for e in approved if e.event.actor == "test-admin")  # not a request
    named = w.client.post(f"{API}/tokens", json={"role": "admin", "principal": "oidc:bob"}, headers=alice)
    assert named.status_code == 422 and named.json()["field"] == "principal"  # no token in a person's name


# -- the rules alone ---------------------------------------------------------------------------


def _settings(provider: Issuer, **overrides: Any) -> Any:
    return parse_auth_settings(
        Reader("jobgate.yaml", ConfigurationError), {"oidc": provider.config(**overrides)}, Path("/")
    )


def test_roles_map_per_tenant_first_then_globally_in_file_order(issuer: Issuer) -> None:
    settings = _settings(
        issuer,
        roles={"ops": "operator", "staff": "consumer"},
        tenant_roles={"acme": {"staff": "activator"}},
    ).oidc
    assert role_of(["staff", "ops"], settings, "acme") is Role.ACTIVATOR
    assert role_of(["staff", "ops"], settings, "other") is Role.OPERATOR  # first in the file's order
    assert role_of("staff", settings, "other") is Role.CONSUMER
    assert role_of(["nobody"], settings, "acme") is None
    assert role_of(None, settings, "acme") is None
    assert role_of([1, {"x": 1}], settings, "acme") is None
    defaulted = _settings(issuer, default_role="consumer").oidc
    assert role_of([], defaulted, "acme") is Role.CONSUMER


def test_a_principal_names_subject_tenant_role_and_display_name(issuer: Issuer) -> None:
    settings = _settings(issuer).oidc
    claims = {"sub": "248289761001", "tenant": "acme", "roles": ["jobgate-auditors"], "preferred_username": "jdoe"}
    found = principal_of(claims, settings)
    assert (found.actor, found.tenant_id, found.role, found.display_name) == (
        "oidc:248289761001",
        "acme",
        Role.AUDITOR,
        "jdoe",
    )
    assert found.credential == f"oidc:{issuer.url}"
    # found by a review: a display name the user edits at the provider went into the audit chain
    # with control, bidi or lone-surrogate characters (the last a 500): passed over, as unreadable
    for bad in ("Al\u0000ice", "Al\u202eice\u001b[31m", "\ud800x"):
        named = principal_of({**claims, "preferred_username": bad}, settings)
        assert named.display_name is None and named.actor == "oidc:248289761001"


@pytest.mark.parametrize(
    "claims",
    [
        {"tenant": "de\u0000fault"},  # a NUL: PostgreSQL cannot even store it
        {"tenant": " acme"},  # prints like another tenant
        {"tenant": "acme\u200b"},
        {"tenant": "../acme"},
        {"tenant": "a..b"},
        {"tenant": "ac/me"},
        {"tenant": "x" * 65},
        {"sub": "ali\u200bce"},  # zero-width space: prints as "alice" in the audit log
        {"sub": "\u202eecila"},  # a bidirectional override
        {"sub": "al\x7fice"},
        {"sub": "   "},
    ],
)
def test_a_tenant_or_subject_a_person_could_not_tell_apart_is_refused(issuer: Issuer, claims: dict[str, str]) -> None:
    settings = _settings(issuer).oidc
    with pytest.raises(Unauthenticated):
        principal_of({"sub": "alice", "tenant": "acme", "roles": ["jobgate-auditors"], **claims}, settings)


def test_tenant_names_follow_one_rule_wherever_they_come_from() -> None:
    for good in ("acme", "default", "t1", "A-b_c.d", "x" * 64):
        assert is_tenant_name(good), good
    for bad in ("", " acme", "acme ", "../acme", "a..b", ".acme", "-acme", "ac/me", "défault", "x" * 65, None, 3):
        assert not is_tenant_name(bad), bad


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"issuer": "http://idp.example"}, "auth.oidc.issuer"),
        ({"jwks_url": "http://idp.example/keys"}, "auth.oidc.jwks_url"),
        ({"algorithms": ["HS256"]}, "auth.oidc.algorithms[0]"),
        ({"algorithms": ["none"]}, "auth.oidc.algorithms[0]"),
        ({"algorithms": []}, "auth.oidc.algorithms"),
        ({"audience": None}, "auth.oidc.audience"),
        ({"roles": {"x": "superuser"}}, "auth.oidc.roles.x"),
        ({"default_role": "root"}, "auth.oidc.default_role"),
        ({"ca_bundle": "/nonexistent/ca.pem"}, "auth.oidc.ca_bundle"),
        ({"clock_skew": 5}, "auth.oidc.clock_skew"),
        ({"client_id": "console"}, "auth.oidc.redirect_url"),
        ({"redirect_url": "https://jobgate.example/login/oidc/callback"}, "auth.oidc.client_id"),
        ({"client_id": "c", "redirect_url": "http://jobgate.example/login/oidc/callback"}, "auth.oidc.redirect_url"),
        ({"client_id": "c", "redirect_url": "https://jobgate.example/elsewhere"}, "auth.oidc.redirect_url"),
        (
            {"client_id": "c", "redirect_url": "http://localhost.evil.example/login/oidc/callback"},
            "auth.oidc.redirect_url",
        ),
        ({"client_id": "c", "redirect_url": "http://127.0.0.1.nip.io/login/oidc/callback"}, REDIRECT),
        ({"client_id": "c", "redirect_url": "http://[::1]evil/login/oidc/callback"}, REDIRECT),
        ({"client_secret_env": "JOBGATE_TEST_UNSET_VARIABLE"}, "auth.oidc.client_secret_env"),
    ],
)
def test_an_unsafe_or_mistyped_oidc_setting_is_refused_by_name(
    issuer: Issuer, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _settings(issuer, **overrides)
    assert refused.value.field == field


def test_a_session_lasts_at_most_a_week() -> None:
    reader = Reader("jobgate.yaml", ConfigurationError)
    assert parse_auth_settings(reader, {"session_hours": 2}, Path("/")).session == timedelta(hours=2)
    for bad in (200, 0, -1, "8"):
        with pytest.raises(ConfigurationError) as refused:
            parse_auth_settings(reader, {"session_hours": bad}, Path("/"))
        assert refused.value.field == "auth.session_hours"


def test_tokens_cannot_be_turned_off_without_another_provider() -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_auth_settings(Reader("jobgate.yaml", ConfigurationError), {"tokens": False}, Path("/"))
    assert refused.value.field == "auth.tokens"
