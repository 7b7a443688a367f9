"""What ``jobgate init`` and ``jobgate demo`` approve in their caller's name: the demo's own
definition files as shipped, nothing else of the folder's, never against an admin's decision
(a revoked approval, a suspended definition), and never in a folder with four eyes on. A
refused ``init --force`` puts back what it overwrote. Found by a review: ``init --force`` over a
folder approved a user's definitions, undid a revocation and switched four eyes off."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import jobgate

MINE = """\
job_definition_id: mine
job_class: MAINTENANCE_JOB
trigger_type: manual
handler: jobgate.standins:hello
params:
  - {name: name, pattern: '[a-z]{1,20}', default: you}
"""


def approval(folder: Path, job: str) -> str:
    shown = jobgate(folder, "definitions", "approval", job, check=False)
    return shown.stdout + shown.stderr


def submitted(folder: Path, job: str) -> bool:
    return jobgate(folder, "submit", job, check=False).returncode == 0


def test_init_force_approves_only_the_shipped_files_and_keeps_a_revocation(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "definitions" / "mine.yaml").write_text(MINE)
    jobgate(folder, "apply", "definitions/mine.yaml")
    jobgate(folder, "definitions", "revoke", "demo-hello", "--reason", "not this week")
    assert not submitted(folder, "mine") and not submitted(folder, "demo-hello")
    again = jobgate(tmp_path, "init", "--force", "site")
    assert "left as an admin decided" in again.stdout and "demo-hello" in again.stdout
    assert not submitted(folder, "mine")  # the user's own definition: an admin approves it
    assert not submitted(folder, "demo-hello")  # revoked here: the shortcut does not undo it
    assert submitted(folder, "demo-report")  # the shipped, undecided ones run, as on a first init
    audit = json.loads(jobgate(folder, "--json", "audit", "list", "--limit", "500").stdout)
    approved = [e for e in audit if e["action"] == "definition.approved"]
    assert "definition:mine" not in {e["target"] for e in approved}


def test_init_force_refuses_a_four_eyes_folder_and_changes_nothing(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "--production", "prod")
    folder = tmp_path / "prod"
    (folder / "definitions" / "mine.yaml").write_text(MINE)
    jobgate(folder, "apply", "definitions/mine.yaml", "--by", "alice")
    config = (folder / "jobgate.yaml").read_bytes()
    refused = jobgate(tmp_path, "init", "--force", "prod", check=False)
    assert refused.returncode == 1 and "four_eyes" in refused.stderr
    assert (folder / "jobgate.yaml").read_bytes() == config
    assert sorted(p.name for p in (folder / "definitions").iterdir()) == ["mine.yaml"]
    assert not submitted(folder, "mine")
    demo = jobgate(tmp_path, "demo", "--dir", "prod", check=False)
    assert demo.returncode == 1 and "four_eyes" in demo.stderr and not submitted(folder, "mine")


def test_a_refused_init_force_puts_back_what_it_overwrote(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    edited = {
        folder / "jobgate.yaml": (folder / "jobgate.yaml").read_text() + "# my edit\n",
        folder / "definitions" / "demo-hello.yaml": (folder / "definitions" / "demo-hello.yaml").read_text()
        + "# mine too\n",
    }
    for path, text in edited.items():
        path.write_text(text)
    (folder / "definitions" / "demo-report.yaml").unlink()  # one the init would write anew
    failed = jobgate(tmp_path, "--db", "postgresql://nobody@127.0.0.1:1/none", "init", "--force", "site", check=False)
    assert failed.returncode != 0
    for path, text in edited.items():
        assert path.read_text() == text
    assert not (folder / "definitions" / "demo-report.yaml").exists()


def test_demo_in_a_folder_applies_none_of_its_other_files(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "definitions" / "mine.yaml").write_text(MINE)
    jobgate(folder, "apply", "definitions/mine.yaml")
    jobgate(tmp_path, "demo", "--dir", "site", "--timeout", "120")
    assert not submitted(folder, "mine")


def test_init_force_writes_through_no_link_and_a_file_for_a_folder_is_refused(tmp_path: Path) -> None:
    """Found by a review: a refused ``init --force`` had written the demo configuration through a
    symbolic link into a shared file outside the folder, then deleted the link."""
    shared = tmp_path / "shared.yaml"
    shared.write_text("logging: {level: info}\n")
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "jobgate.yaml").symlink_to(shared)
    refused = jobgate(tmp_path, "init", "--force", "s1", check=False)
    assert refused.returncode == 1 and "symbolic link" in refused.stderr
    assert shared.read_text() == "logging: {level: info}\n" and (tmp_path / "s1" / "jobgate.yaml").is_symlink()
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "definitions").write_text("not a folder\n")
    refused = jobgate(tmp_path, "init", "s2", check=False)
    assert refused.returncode == 1 and "not a folder" in refused.stderr
    assert sorted(p.name for p in (tmp_path / "s2").iterdir()) == ["definitions"]


def test_a_made_folder_stays_when_its_output_cannot_be_written(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.cli.test_cli import ENV

    proc = subprocess.Popen(
        [sys.executable, "-m", "jobgate", "init", "site"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # the reader went away (`| head -0`): printing the summary fails
    proc.wait(60)
    assert (tmp_path / "site" / "jobgate.yaml").is_file() and (tmp_path / "site" / "jobgate.db").is_file()
