"""Found by a review: an argument that is not UTF-8 (a Latin-1 terminal typing "Störung") made
many commands exit 70 "internal", among them ``safe-mode on``, so the emergency switch was not
thrown and the user was told it was a bug. It is refused before anything runs (exit 1, naming
the option); the Python API refuses such text as a ValidationError."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.test_cli import ENV, jobgate

from jobgate.cli.root import undecodable_argument
from jobgate.core.canonical import canonical_json
from jobgate.core.errors import ValidationError


def _raw(cwd: Path, *args: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable.encode(), b"-m", b"jobgate", *args], cwd=cwd, env=ENV, capture_output=True)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((b"safe-mode", b"on", b"--reason", b"St\xf6rung"), b"--reason"),
        ((b"safe-mode", b"on", b"--reason=St\xf6rung"), b"--reason"),
        ((b"submit", b"demo-hello", b"-p", b"name=a\xffb"), b"-p"),
        ((b"requests", b"propose", b"demo-hello", b"--title", b"\xe9t\xe9", b"--reason", b"r"), b"--title"),
    ],
)
def test_an_argument_that_is_not_utf8_is_refused_naming_it_and_nothing_happens(
    tmp_path: Path, args: tuple[bytes, ...], named: bytes
) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    before = (folder / "jobgate.db").read_bytes()
    refused = _raw(folder, *args)
    assert refused.returncode == 1, refused.stderr
    assert named + b": " in refused.stderr and b"is not UTF-8 text" in refused.stderr
    assert b"internal" not in refused.stderr
    assert (folder / "jobgate.db").read_bytes() == before  # nothing stored
    assert not json.loads(jobgate(folder, "--json", "safe-mode", "status").stdout)["active"]


def test_a_file_named_in_another_encoding_is_still_a_path(tmp_path: Path) -> None:
    named = tmp_path / "d\udcf6.yaml"  # what Python makes of the bytes b"d\xf6.yaml"
    named.write_text("")
    assert undecodable_argument(["apply", str(named)]) is None
    assert undecodable_argument(["apply", str(tmp_path / "gone\udcf6.yaml")]) == (
        f"argument 2: '{tmp_path}/gone\\xf6.yaml' is not UTF-8 text (set the terminal to UTF-8, or give the value"
        " in UTF-8)"
    )


def test_the_python_api_refuses_such_text_as_a_validation_error() -> None:
    with pytest.raises(ValidationError) as refused:
        canonical_json({"reason": "St\udcf6rung"})
    assert "not UTF-8" in refused.value.message
    with pytest.raises(ValidationError):
        canonical_json({"k": ["a", {"b": "\ud800"}], "n": 1.5})  # the stdlib path too


def test_a_definition_file_named_in_another_encoding_is_applied(tmp_path: Path) -> None:
    """Found by a review: the path was let through, then stored as the definition's source and
    could not be encoded (exit 70): it is kept with its odd bytes escaped."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    named = folder.as_posix().encode() + b"/St\xf6rung.yaml"
    with open(named, "w") as fh:
        fh.write("job_definition_id: odd-name\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n")
    applied = _raw(folder, b"apply", named)
    assert applied.returncode == 0, applied.stderr
    listed = json.loads(jobgate(folder, "--json", "definitions", "list").stdout)
    assert "odd-name" in {d["job_definition_id"] for d in listed}
