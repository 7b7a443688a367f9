"""Row-level security on PostgreSQL: a transaction acting for tenant A cannot see or write
tenant B's rows, even when the query forgets the tenant filter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from jobgate.store.sqlstore import Store
from jobgate.testing import connection

NOW = datetime(2026, 6, 25, 18, 30, tzinfo=UTC)


@pytest.fixture
def app_store(database_url: str) -> Iterator[Store]:
    """The store as the suite connects on PostgreSQL: an ordinary role owning its tables (the
    policies are FORCEd on owners; superusers are never bound by row security)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("row-level security is PostgreSQL's; SQLite deployments rely on the code's scoping")
    url = database_url
    store = Store(url, migrate=False)
    with store.write() as tx:  # acting for every tenant, as workers and schedulers do
        tx.fact_record("tenant-a", "replay.drift_ratio", 0.01, NOW, "test")
        tx.fact_record("tenant-b", "replay.drift_ratio", 0.99, NOW, "test")
        tx.safe_mode_activate("tenant-b", "bob", "b's incident", NOW)
    yield store
    store.dispose()


def tenants_seen(store: Store, table: str, tenant: str | None) -> list[str]:
    with store.read(tenant_id=tenant) as tx:
        rows = connection(tx).execute(text(f"SELECT tenant_id FROM {table}")).all()  # no tenant filter
    return sorted(r[0] for r in rows)


def test_a_query_without_a_tenant_filter_sees_only_its_tenants_rows(app_store: Store) -> None:
    with app_store.read() as tx:
        role = connection(tx).execute(text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"))
        assert role.one() == (False, False)  # bound by the policies, like the whole suite
    assert tenants_seen(app_store, "facts", "tenant-a") == ["tenant-a"]
    assert tenants_seen(app_store, "facts", "tenant-b") == ["tenant-b"]
    assert tenants_seen(app_store, "safe_mode_periods", "tenant-a") == []
    assert tenants_seen(app_store, "facts", None) == ["tenant-a", "tenant-b"]  # the cluster's own view
    with app_store.read(tenant_id="tenant-a") as tx:
        assert tx.safe_mode_current("tenant-b") is None  # even asking for b by name finds nothing


def test_a_transaction_for_one_tenant_cannot_write_anothers_rows(app_store: Store) -> None:
    with app_store.write(tenant_id="tenant-a") as tx:
        changed = connection(tx).execute(text("UPDATE facts SET value = 0 WHERE tenant_id = 'tenant-b'")).rowcount
        deleted = connection(tx).execute(text("DELETE FROM safe_mode_periods")).rowcount
    assert (changed, deleted) == (0, 0)
    with pytest.raises(ProgrammingError, match="row-level security"), app_store.write(tenant_id="tenant-a") as tx:
        tx.fact_record("tenant-b", "replay.drift_ratio", 0.5, NOW, "forged")
    with app_store.read(tenant_id="tenant-b") as tx:
        assert [v for _, v, _ in tx.facts_list("tenant-b", "replay.drift_ratio")] == [0.99]
        assert tx.safe_mode_current("tenant-b") is not None


def test_a_connection_that_does_not_say_whom_it_acts_for_sees_nothing(app_store: Store) -> None:
    url = make_url(app_store.url).set(drivername="postgresql", query={})
    schema_options = urlsplit(app_store.url).query
    conninfo = url.render_as_string(hide_password=False) + "?" + schema_options
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (0,)


def test_a_tenant_scope_must_name_a_tenant(app_store: Store) -> None:
    for bad in ("", "*"):
        with pytest.raises(ValueError), app_store.read(tenant_id=bad):
            pass
