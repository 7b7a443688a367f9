"""What a person types as the database (``--db``, ``JOBGATE_DATABASE_URL``, the file's
``database``) is read before anything is opened: a mistyped URL is a configuration error naming
``--db`` (exit 1), never an internal error (exit 70) or "cannot reach the database" (exit 69,
which tells a script to try again later), and the message never repeats a password."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobgate.core.errors import ConfigurationError
from jobgate.store.opening import database_url, open_store

BAD = [
    ("postgresql://postgres:s3cret@127.0.0.1:abc/x", "port must be a number"),
    ("postgresql://u:s3cret@[::1", "port must be a number"),
    ("postgresql://u:s3cret@127.0.0.1:99999/x", "port 99999 is not a port"),
    ("postgresql://u:s3cret@127.0.0.1:0/x", "port 0 is not a port"),
    ("postgresql://u:s3cret@127.0.0.1/x?sslmode=bogus", "sslmode must be one of"),
    ("postgresql://u:s3cret@127.0.0.1/x?foo=bar", "does not know: foo"),
    ("postgresql://u:s3cret@127.0.0.1/x?connect_timeout=x", "connect_timeout must be a whole number"),
    ("postgresql://u:s3cret@127.0.0.1/x?keepalives_idle=1.5", "keepalives_idle must be a whole number"),
    ("postgresql://u:s3cret@127.0.0.1/x?keepalives_count=-1", "keepalives_count must be a whole number"),
    ("mysql://u:s3cret@db/jobs", "unsupported database 'mysql'"),
    # libpq's host list, which SQLAlchemy cannot read: the form that works is named
    ("postgresql://u:s3cret@h1:5432,h2:5433/x", "?host=HOST1:PORT1&host=HOST2:PORT2"),
    ("postgresql://u:s3cret@h1,h2/x?sslmode=require", "?host=HOST1:PORT1&host=HOST2:PORT2"),
]


@pytest.mark.parametrize(("url", "said"), BAD)
def test_a_mistyped_database_url_is_a_configuration_error(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        database_url(url)
    assert refused.value.field == "--db" and said in refused.value.message
    assert "s3cret" not in refused.value.message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:5432/jobgate",
        "postgresql+psycopg://postgres@127.0.0.1/jobgate?sslmode=disable&connect_timeout=3",
        "postgresql://postgres@[::1]:5432/jobgate?application_name=jobgate",
        "postgresql://postgres@/jobgate?host=db1:5432&host=db2:5432",
        "postgresql://po,stgres@127.0.0.1/jobgate",
        "sqlite:///tmp/jobgate.db",
    ],
)
def test_a_usable_database_url_is_taken_as_given(url: str) -> None:
    assert database_url(url) == url


@pytest.mark.parametrize("content", [b"hello, this is not a database\n" * 40, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_file_that_is_not_a_database_is_named_not_retried_later(tmp_path: Path, content: bytes) -> None:
    """Exit 69 ("cannot reach", try again later) was the answer for a file that is no SQLite
    database at all, or a damaged one: no later try can help, the path is named."""
    junk = tmp_path / "jobs.db"
    junk.write_bytes(content)
    with pytest.raises(ConfigurationError) as refused:
        open_store(database_url(str(junk)))
    assert str(junk) in refused.value.message and "is not a jobgate database" in refused.value.message
    assert junk.read_bytes() == content


def test_a_folder_given_as_the_database_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        open_store(database_url(str(tmp_path)))
    assert "is a folder, not a database file" in refused.value.message
