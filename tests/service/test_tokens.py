"""API tokens: shown once, stored as a hash, and every bad presentation refused alike."""

from __future__ import annotations

import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from tests.helpers import count

from jobgate.core import tokens as rules
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.core.records import AuditFilter
from jobgate.core.tokens import Role
from jobgate.service import tokens
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import StoreTx
from jobgate.testing import connection


def test_a_token_is_shown_once_and_only_its_hash_is_stored(engine: Engine) -> None:
    made = tokens.create(engine, tenant_id="acme", role="operator", actor="ada", label="ci")
    assert made.token.startswith("jgt_") and len(made.token) == 4 + 12 + 1 + 43
    token_id, secret = rules.parse(made.token) or ("", "")
    with engine.store.read() as tx:
        row = connection(tx).execute(text("SELECT * FROM api_tokens")).mappings().one()
    assert secret not in str(dict(row)) and row["secret_hash"] == rules.secret_hash(secret)
    who = tokens.authenticate(engine, f"Bearer {made.token}")
    assert (who.credential, who.tenant_id, who.role, who.jobs) == (f"token:{token_id}", "acme", Role.OPERATOR, None)


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer ", "Bearer nothing", "Basic abc", "Bearer jgt_", "Bearer jgt_0123456789ab_short"],
)
def test_missing_empty_and_malformed_tokens_are_refused(engine: Engine, header: str | None) -> None:
    tokens.create(engine, tenant_id="acme", role="admin", actor="ada")
    with pytest.raises(tokens.Unauthenticated):
        tokens.authenticate(engine, header)


def test_a_wrong_secret_an_unknown_id_a_revoked_and_an_expired_token_are_refused(engine: Engine) -> None:
    good = tokens.create(engine, tenant_id="acme", role="admin", actor="ada").token
    token_id, secret = rules.parse(good) or ("", "")
    wrong = rules.compose(token_id, ("A" if secret[0] != "A" else "B") + secret[1:])
    unknown = rules.compose("0" * 12, secret)
    for bad in (wrong, unknown):
        with pytest.raises(tokens.Unauthenticated):
            tokens.authenticate(engine, f"Bearer {bad}")
    short = tokens.create(engine, tenant_id="acme", role="consumer", actor="ada", expires_in=timedelta(hours=1))
    later = engine.clock.now() + timedelta(hours=2)
    with pytest.raises(tokens.Unauthenticated):
        tokens.authenticate(engine, f"Bearer {short.token}", now=later)
    tokens.revoke(engine, "acme", token_id, actor="bob")
    tokens.revoke(engine, "acme", token_id, actor="bob")  # again: nothing changes
    with pytest.raises(tokens.Unauthenticated):
        tokens.authenticate(engine, f"Bearer {good}")


def test_another_tenants_token_cannot_be_revoked_and_answers_like_a_missing_one(engine: Engine) -> None:
    theirs = tokens.create(engine, tenant_id="other", role="admin", actor="eve").stored.token_id
    with pytest.raises(NotFoundError):
        tokens.revoke(engine, "acme", theirs, actor="ada")
    with pytest.raises(NotFoundError):
        tokens.revoke(engine, "acme", "ffffffffffff", actor="ada")
    assert [t.revoked_at for t in tokens.listed(engine, "other")] == [None]
    assert tokens.listed(engine, "acme") == []


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"role": "boss"}, "role"),
        ({"tenant_id": ""}, "tenant"),
        ({"tenant_id": " acme"}, "tenant"),
        ({"tenant_id": "../acme"}, "tenant"),
        ({"tenant_id": "ac\u00e9me"}, "tenant"),
        ({"principal": "OIDC:alice"}, "principal"),  # the reserved prefixes, in any case
        ({"principal": "Token:abc"}, "principal"),
        ({"principal": "LDAP:x"}, "principal"),
        # found by a review: the names jobgate's own processes write as actors
        ({"principal": "jobgate"}, "principal"),
        ({"principal": "System"}, "principal"),
        ({"principal": "scheduler"}, "principal"),
        ({"principal": "jobgate:shipped-files"}, "principal"),
        ({"principal": "offline-seed:evidence"}, "principal"),
        # and, found by the next one, the names of the rest of them, given and generated
        ({"principal": "workflow-coordinator"}, "principal"),
        ({"principal": "Backfill"}, "principal"),
        ({"principal": "bootstrap"}, "principal"),
        ({"principal": "worker-b6ec68cf714f"}, "principal"),
        ({"principal": "scheduler-0123456789ab"}, "principal"),
        ({"principal": "worker-0123456789AB"}, "principal"),  # in any case, as the names are
        ({"principal": "demo"}, "principal"),  # `jobgate demo` acts as it
        ({"jobs": []}, "jobs"),
        ({"jobs": [""]}, "jobs"),
        ({"expires_in": timedelta(0)}, "expires_in"),
        ({"label": "x" * 201}, "label"),
    ],
)
def test_a_refused_token_names_the_field_and_stores_nothing(engine: Engine, kw: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"tenant_id": "acme", "role": "admin", "actor": "ada", **kw}
    with pytest.raises(ValidationError) as err:
        tokens.create(engine, **args)  # type: ignore[arg-type]
    assert err.value.field == field
    assert count(engine, "api_tokens") == 0


def test_a_token_limited_to_definitions_says_which(engine: Engine) -> None:
    made = tokens.create(engine, tenant_id="acme", role="activator", actor="ada", jobs=["a", "b", "a"])
    who = tokens.authenticate(engine, f"Bearer {made.token}")
    assert who.jobs == ("a", "b") and who.may_use("a") and not who.may_use("c")


def test_the_bootstrap_admin_token_is_made_once_and_written_for_the_owner_only(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "admin.token"
    made = tokens.bootstrap(engine, tenant_id="default", path=path)
    assert made is not None and path.read_text().strip() == made.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens.authenticate(engine, f"Bearer {made.token}").role is Role.ADMIN
    assert tokens.bootstrap(engine, tenant_id="default") is None  # a token exists: nothing new


def test_the_bootstrap_refuses_to_overwrite_a_file(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "admin.token"
    path.write_text("keep me\n")
    with pytest.raises(ValidationError):
        tokens.bootstrap(engine, tenant_id="default", path=path)
    assert path.read_text() == "keep me\n" and count(engine, "api_tokens") == 0


@settings(max_examples=300, deadline=None)
@given(raw=st.text(max_size=80))
def test_parse_accepts_only_the_token_shape(raw: str) -> None:
    parsed = rules.parse(raw)
    if parsed is not None:
        assert rules.compose(*parsed) == raw.strip()


def test_every_name_jobgate_acts_under_is_reserved() -> None:
    """The actor names jobgate's own processes write into runs, transitions and audit entries,
    read from where they are defined: a new one not reserved fails here, not in a review."""
    import uuid

    from jobgate.runtime.rescuer import RESCUER
    from jobgate.runtime.scheduler import SCHEDULER_ACTOR
    from jobgate.service import pubsub_triggers, retention, sla_record, workflows
    from jobgate.service.submission import SYSTEM_ACTOR

    named = {SCHEDULER_ACTOR, SYSTEM_ACTOR, RESCUER, pubsub_triggers.ACTOR, retention.ACTOR, sla_record.ACTOR}
    named |= {workflows.COORDINATOR, "backfill", "bootstrap", "demo"}  # backfill's, bootstrap's, the demo's
    named |= {f"{p}-{uuid.uuid4().hex[:12]}" for p in ("worker", "scheduler", "publisher", "sla")}
    for name in sorted(named):
        with pytest.raises(ValidationError):
            tokens.check_principal_name(name)
    assert tokens.check_principal_name("worker-bee") == "worker-bee"  # a person's name is not taken


def _minted(engine: Engine, by: str, **kw: object) -> tokens.CreatedToken:
    minter = tokens.authenticate(engine, f"Bearer {by}")
    return tokens.create(engine, tenant_id="acme", role="admin", actor=minter.actor, minted_by=minter, **kw)  # type: ignore[arg-type]


def test_a_minted_token_never_outlives_the_credential_that_minted_it(engine: Engine) -> None:
    """Found by a review: a five-second admin token minted a token that never expired."""
    short = tokens.create(engine, tenant_id="acme", role="admin", actor="ada", expires_in=timedelta(seconds=5))
    assert short.stored.expires_at is not None
    forever = _minted(engine, short.token)
    assert forever.stored.expires_at == short.stored.expires_at
    longer = _minted(engine, short.token, expires_in=timedelta(days=30))
    assert longer.stored.expires_at == short.stored.expires_at
    shorter = _minted(engine, short.token, expires_in=timedelta(seconds=2))
    assert shorter.stored.expires_at is not None and shorter.stored.expires_at < short.stored.expires_at
    later = short.stored.expires_at + timedelta(seconds=1)
    for made in (forever, longer, shorter):
        with pytest.raises(tokens.Unauthenticated):
            tokens.authenticate(engine, f"Bearer {made.token}", now=later)
    oidc = tokens.Principal("oidc:https://idp", "acme", Role.ADMIN, None, "oidc:alice", expires_at=engine.clock.now())
    with pytest.raises(ValidationError) as refused:  # a JWT as old as its exp mints nothing
        tokens.create(engine, tenant_id="acme", role="admin", actor="oidc:alice", minted_by=oidc)
    assert refused.value.field == "expires_in"


def test_revoking_a_token_revokes_every_token_minted_with_it_and_is_audited(engine: Engine) -> None:
    """Found by a review: revoking the minter (a leaked token) left the admin tokens it had
    minted working for ever."""
    root = tokens.create(engine, tenant_id="acme", role="admin", actor="ada")
    child = _minted(engine, root.token)
    grandchild = _minted(engine, child.token, principal="svc")
    sibling = tokens.create(engine, tenant_id="acme", role="admin", actor="ada")
    gone = tokens.revoke(engine, "acme", root.stored.token_id, actor="bob")
    assert gone == [root.stored.token_id, child.stored.token_id, grandchild.stored.token_id]
    for made in (root, child, grandchild):
        with pytest.raises(tokens.Unauthenticated):
            tokens.authenticate(engine, f"Bearer {made.token}")
    assert tokens.authenticate(engine, f"Bearer {sibling.token}").role is Role.ADMIN
    with engine.store.read() as tx:
        entries = tx.audit_list(AuditFilter(tenant_id="acme", action="token.revoked"))
    assert [(e.event.target_id, dict(e.event.payload)) for e in entries] == [
        (root.stored.token_id, {}),
        (child.stored.token_id, {"with": f"token {root.stored.token_id}"}),
        (grandchild.stored.token_id, {"with": f"token {child.stored.token_id}"}),
    ]
    assert tokens.revoke(engine, "acme", root.stored.token_id, actor="bob") == []  # again: nothing new


def test_revoking_a_principal_revokes_their_tokens_and_what_they_minted(engine: Engine) -> None:
    """Someone removed from the directory keeps no token: theirs, those they minted for others
    (their lineage names them), and those minted with any of them."""
    ldap = tokens.Principal("ldap:ldap://dir", "acme", Role.ADMIN, None, "ldap:eve")
    own = tokens.create(engine, tenant_id="acme", role="admin", actor="ldap:eve", minted_by=ldap)
    for_svc = tokens.create(
        engine, tenant_id="acme", role="operator", actor="ldap:eve", minted_by=ldap, principal="svc"
    )
    from_own = _minted(engine, own.token, principal="bot")
    other = tokens.create(engine, tenant_id="acme", role="admin", actor="ada", principal="ada")
    gone = tokens.revoke_principal(engine, "acme", "ldap:eve", actor="ada")
    assert sorted(gone) == sorted(t.stored.token_id for t in (own, for_svc, from_own))
    assert tokens.authenticate(engine, f"Bearer {other.token}").actor == "ada"


def test_a_token_revoked_after_its_request_was_authenticated_mints_nothing(engine: Engine) -> None:
    """Found by a review: a mint authenticated a moment before its token was revoked still
    stored a token no revocation had seen, an admin credential for ever. The minter is judged
    again under the write that stores the new token."""
    leaked = tokens.create(engine, tenant_id="acme", role="admin", actor="ada")
    minter = tokens.authenticate(engine, f"Bearer {leaked.token}")
    tokens.revoke(engine, "acme", leaked.stored.token_id, actor="bob")
    stored, created = count(engine, "api_tokens"), _created_entries(engine)
    with pytest.raises(tokens.Unauthenticated):
        tokens.create(engine, tenant_id="acme", role="admin", actor=minter.actor, minted_by=minter)
    assert count(engine, "api_tokens") == stored
    assert _created_entries(engine) == created


def _created_entries(engine: Engine) -> int:
    with engine.store.read() as tx:
        return len(tx.audit_list(AuditFilter(tenant_id="acme", action="token.created")))


def test_a_mint_committed_while_its_minter_is_being_revoked_is_revoked_too(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revocation read the tokens minted so far, then a mint by the same token committed,
    then the revocation committed: the new token stayed valid. The revocation reads the log
    again once it holds every token it revokes (a mint waits for those rows, or is found)."""
    if engine.store.dialect != "postgresql":
        pytest.skip("SQLite's write transactions do not overlap: a mint commits before or after")
    leaked = tokens.create(engine, tenant_id="acme", role="admin", actor="ada")
    minter = tokens.authenticate(engine, f"Bearer {leaked.token}")
    read_once, minted = threading.Event(), threading.Event()
    reading = tokens._minted_with

    def read_then_let_the_mint_commit(tx: StoreTx, tenant_id: str) -> dict[str, list[str]]:
        found = reading(tx, tenant_id)
        if not read_once.is_set():
            read_once.set()
            assert minted.wait(30)
        return found

    monkeypatch.setattr(tokens, "_minted_with", read_then_let_the_mint_commit)
    with ThreadPoolExecutor(1) as pool:
        revoking = pool.submit(tokens.revoke, engine, "acme", leaked.stored.token_id, actor="bob")
        assert read_once.wait(30)
        child = tokens.create(engine, tenant_id="acme", role="admin", actor=minter.actor, minted_by=minter)
        minted.set()
        gone = revoking.result(30)
    assert gone == [leaked.stored.token_id, child.stored.token_id]
    with pytest.raises(tokens.Unauthenticated):
        tokens.authenticate(engine, f"Bearer {child.token}")
