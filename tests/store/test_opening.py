"""What a person types as the database (``--db``, ``JOBGATE_DATABASE_URL``, the file's
``database``) is read before anything is opened: a mistyped URL is a configuration error naming
``--db`` (exit 1), never an internal error (exit 70) or "cannot reach the database" (exit 69,
which tells a script to try again later), and the message never repeats a password."""

from __future__ import annotations

import pytest

from jobgate.core.errors import ConfigurationError
from jobgate.store.opening import database_url

BAD = [
    ("postgresql://postgres:s3cret@127.0.0.1:abc/x", "port must be a number"),
    ("postgresql://u:s3cret@[::1", "port must be a number"),
    ("postgresql://u:s3cret@127.0.0.1:99999/x", "port 99999 is not a port"),
    ("postgresql://u:s3cret@127.0.0.1:0/x", "port 0 is not a port"),
    ("postgresql://u:s3cret@127.0.0.1/x?sslmode=bogus", "sslmode must be one of"),
    ("postgresql://u:s3cret@127.0.0.1/x?foo=bar", "does not know: foo"),
    ("postgresql://u:s3cret@127.0.0.1/x?connect_timeout=x", "connect_timeout must be a whole number"),
    ("mysql://u:s3cret@db/jobs", "unsupported database 'mysql'"),
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
        "sqlite:///tmp/jobgate.db",
    ],
)
def test_a_usable_database_url_is_taken_as_given(url: str) -> None:
    assert database_url(url) == url
