"""Air-gapped promotion through the real command line: a pack published in ``dev``, exported to
a file, imported in ``prod`` that trusts dev's evidence key; refused without a trust root and
when the file was altered, with nothing imported."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import jobgate

REPORT = "job_definition_id: nightly-report\njob_class: MAINTENANCE_JOB\nrunner: python-script\nbody: |\n  print(1)\n"


def _definitions(folder: Path) -> dict[str, str]:
    listed = json.loads(jobgate(folder, "--json", "definitions", "list").stdout)
    return {d["job_definition_id"]: d["digest"] for d in listed}


def test_export_from_dev_imports_into_prod(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "dev")
    jobgate(tmp_path, "init", "prod")
    dev, prod = tmp_path / "dev", tmp_path / "prod"
    (dev / "report.yaml").write_text(REPORT)
    jobgate(dev, "apply", "report.yaml", "--by", "alice")
    published = json.loads(jobgate(dev, "--json", "packs", "publish", "reports@1.0", "nightly-report").stdout)
    assert published["created"] and published["pack"] == "reports@1.0"
    jobgate(dev, "export", str(tmp_path / "seed.zip"))

    no_root = jobgate(prod, "import", str(tmp_path / "seed.zip"), check=False)
    assert no_root.returncode == 69 and "packs.trusted_keys" in no_root.stderr, no_root.stderr
    [key] = json.loads(jobgate(dev, "--json", "keys", "evidence").stdout)
    config = prod / "jobgate.yaml"
    config.write_text(config.read_text() + f"\npacks:\n  trusted_keys: [{key['public_key']}]\n")

    altered = (tmp_path / "seed.zip").read_bytes().replace(b"print(1)", b"print(2)")
    (tmp_path / "altered.zip").write_bytes(altered)
    refused = jobgate(prod, "import", str(tmp_path / "altered.zip"), check=False)
    assert refused.returncode == 1 and "not imported" in refused.stderr and "Traceback" not in refused.stderr
    assert "nightly-report" not in _definitions(prod)

    done = json.loads(jobgate(prod, "--json", "import", str(tmp_path / "seed.zip")).stdout)
    assert [p["pack"] for p in done["packs"]] == ["reports@1.0"] and done["approved"] == []
    assert _definitions(prod)["nightly-report"] == _definitions(dev)["nightly-report"]
    listed = json.loads(jobgate(prod, "--json", "packs", "list").stdout)
    assert [(p["pack"], p["origin"]) for p in listed] == [("reports@1.0", "import")]
    unapproved = jobgate(prod, "import", str(tmp_path / "seed.zip")).stdout
    assert "nightly-report v1" in unapproved and unapproved.split("nightly-report v1")[1].split("\n")[0].endswith(
        " unapproved"
    )
    jobgate(prod, "definitions", "approve", "nightly-report", "--by", "bob")
    again = jobgate(prod, "import", str(tmp_path / "seed.zip")).stdout  # the same digest, approved here since
    assert again.split("nightly-report v1")[1].split("\n")[0].endswith(" approved here"), again


def _audit_actions(folder: Path) -> list[str]:
    return [e["action"] for e in json.loads(jobgate(folder, "--json", "audit", "list").stdout)]


def test_a_file_a_command_cannot_create_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    """Exports to a folder that does not exist or onto a file that does: exit 1
    naming the option, no file, and no audit entry claiming an export (exit 70 and a recorded
    export before). A run's evidence and a new key alike."""
    jobgate(tmp_path, "init", "dev")
    dev = tmp_path / "dev"
    existing = tmp_path / "taken.zip"
    existing.write_bytes(b"mine")
    before = _audit_actions(dev)
    for target in (tmp_path / "missing" / "seed.zip", existing):  # a folder: click's own usage error
        refused = jobgate(dev, "export", str(target), check=False)
        assert refused.returncode == 1 and "FILE" in refused.stderr and "Traceback" not in refused.stderr, refused
        period = ("--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--out", str(target))
        evidence = jobgate(dev, "evidence", "export", *period, check=False)
        assert evidence.returncode == 1 and "--out" in evidence.stderr, evidence
        key = jobgate(dev, "keys", "generate", "--key-id", "k1", "--out", str(target), check=False)
        assert key.returncode == 1 and "--out" in key.stderr, key
    assert not (tmp_path / "missing").exists() and existing.read_bytes() == b"mine"
    assert _audit_actions(dev) == before

    made = json.loads(jobgate(dev, "--json", "export", str(tmp_path / "seed.zip")).stdout)
    assert made["file"] == str(tmp_path / "seed.zip") and made["bytes"] == (tmp_path / "seed.zip").stat().st_size
    assert made["signed_by"]
    key_file = tmp_path / "k1.key"
    jobgate(dev, "keys", "generate", "--key-id", "k1", "--out", str(key_file))
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_json_output_of_retention_and_evidence_verify(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "dev")
    dev = tmp_path / "dev"
    retention = json.loads(jobgate(dev, "--json", "retention", "run", "--dry-run").stdout)
    assert retention == {"tenant_id": "default", "dry_run": True, "cutoff": None, "runs": 0, "rules": []}
    bundle = tmp_path / "period.zip"
    period = ("--from", "2026-01-01T00:00:00Z", "--to", "2099-01-01T00:00:00Z")
    exported = json.loads(jobgate(dev, "--json", "evidence", "export", *period, "--out", str(bundle)).stdout)
    assert exported["file"] == str(bundle) and exported["runs"] == 0
    unsigned = jobgate(dev, "--json", "evidence", "verify", str(bundle), check=False)
    assert unsigned.returncode == 1 and json.loads(unsigned.stdout)["status"] == "unsigned"
    [key] = json.loads(jobgate(dev, "--json", "keys", "evidence").stdout)
    trusted = json.loads(
        jobgate(
            dev, "--json", "evidence", "verify", str(bundle), "--public-key", f"{key['key_id']}={key['public_key']}"
        ).stdout
    )
    assert trusted["status"] == "ok" and trusted["signed_by"] == key["key_id"] and trusted["problems"] == []


def test_json_output_of_signature_checks(tmp_path: Path) -> None:
    """``--json`` was ignored by ``keys verify`` and ``plugins verify``: each prints one list."""
    jobgate(tmp_path, "init", "dev")
    dev = tmp_path / "dev"
    (dev / "report.yaml").write_text(REPORT)
    unsigned = jobgate(dev, "--json", "keys", "verify", "report.yaml", check=False)
    assert unsigned.returncode == 1
    [entry] = json.loads(unsigned.stdout)
    assert entry["file"] == "report.yaml" and entry["ok"] is False and entry["problem"]
    assert json.loads(jobgate(dev, "--json", "plugins", "verify").stdout) == []


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    """dev publishes and exports; prod trusts dev's evidence key and imports approvals."""
    jobgate(tmp_path, "init", "dev")
    jobgate(tmp_path, "init", "prod")
    dev, prod = tmp_path / "dev", tmp_path / "prod"
    [key] = json.loads(jobgate(dev, "--json", "keys", "evidence").stdout)
    config = prod / "jobgate.yaml"
    config.write_text(
        config.read_text() + f"\npacks:\n  trusted_keys: [{key['public_key']}]\n  import_approvals: true\n"
    )
    return dev, prod


def _publish(dev: Path, description: str, pack: str, status: str = "") -> None:
    (dev / "rb.yaml").write_text(
        f"job_definition_id: rb\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
        f"description: {description}\n{status}"
    )
    jobgate(dev, "apply", "rb.yaml", "--approve")
    jobgate(dev, "packs", "publish", pack, "rb")


def test_a_pack_that_rolls_a_definition_back_ends_on_that_content_approved(tmp_path: Path) -> None:
    """Found by a review: p@1.0.0 carried A, p@1.1.0 B, p@1.2.0 A again (the exporter's rollback);
    the importer ended on B, approved, and A's carried approval was left unapplied."""
    dev, prod = _pair(tmp_path)
    for description, pack in (("alpha", "p@1.0.0"), ("beta", "p@1.1.0"), ("alpha", "p@1.2.0")):
        _publish(dev, description, pack)
    jobgate(dev, "export", str(tmp_path / "seed.zip"))
    jobgate(prod, "import", str(tmp_path / "seed.zip"))
    assert _definitions(prod)["rb"] == _definitions(dev)["rb"]
    status = json.loads(jobgate(prod, "--json", "definitions", "approval", "rb").stdout)
    assert status["matches"], status
    again = json.loads(jobgate(prod, "--json", "import", str(tmp_path / "seed.zip")).stdout)  # nothing newer
    assert _definitions(prod)["rb"] == _definitions(dev)["rb"] and again["skipped"] == []


def test_a_definition_suspended_or_retired_here_is_left_as_it_is_and_the_rest_imported(tmp_path: Path) -> None:
    """Found by a review: an import of newer content reactivated a definition suspended on the
    importing host (its runs ran); one retired there refused every later import whole."""
    dev, prod = _pair(tmp_path)
    _publish(dev, "one", "s@1.0.0")
    jobgate(dev, "export", str(tmp_path / "s1.zip"))
    jobgate(prod, "import", str(tmp_path / "s1.zip"))
    for status, said in (("suspended", "resume it here"), ("retired", "retirement is final")):
        (prod / "rb.yaml").write_text(
            "job_definition_id: rb\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
            f"description: one\nstatus: {status}\n"
        )
        jobgate(prod, "apply", "rb.yaml")
        _publish(dev, f"newer-than-{status}", f"s@1.{1 if status == 'suspended' else 2}.0")
        (dev / "other.yaml").write_text(
            f"job_definition_id: other-{status}\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
        )
        jobgate(dev, "apply", "other.yaml", "--approve")
        jobgate(dev, "packs", "publish", f"o-{status}@1.0.0", f"other-{status}")
        jobgate(dev, "export", str(tmp_path / f"{status}.zip"))
        done = json.loads(jobgate(prod, "--json", "import", str(tmp_path / f"{status}.zip")).stdout)
        assert [s["job_definition_id"] for s in done["skipped"]] == ["rb"] and said in done["skipped"][0]["reason"]
        shown = json.loads(jobgate(prod, "--json", "definitions", "show", "rb").stdout)
        assert shown["status"] == status and shown["digest"] != _definitions(dev)["rb"], shown
        assert f"other-{status}" in _definitions(prod)  # the rest of the archive arrived
        refused = jobgate(prod, "submit", "rb", check=False)
        assert refused.returncode == 1, refused.stdout


def test_a_definition_left_as_it_is_here_is_not_approved_by_the_pack(tmp_path: Path) -> None:
    """Found by a review: the import said it left a definition suspended here as it is, and
    applied the pack's approval of that very content; resumed, it ran on nobody's word here."""
    dev, prod = _pair(tmp_path)
    _publish(dev, "one", "s@1.0.0")
    jobgate(dev, "export", str(tmp_path / "s1.zip"))
    (prod / "rb.yaml").write_text((dev / "rb.yaml").read_text() + "status: suspended\n")  # the same content
    jobgate(prod, "apply", "rb.yaml")
    done = json.loads(jobgate(prod, "--json", "import", str(tmp_path / "s1.zip")).stdout)
    assert [s["job_definition_id"] for s in done["skipped"]] == ["rb"] and "rb" not in done["approved"]
    approval = json.loads(jobgate(prod, "--json", "definitions", "approval", "rb").stdout)
    assert not approval["approved"], approval
    jobgate(prod, "apply", str(dev / "rb.yaml"))  # resumed here: still to be approved here
    refused = jobgate(prod, "submit", "rb", check=False)
    assert refused.returncode == 1 and "approv" in refused.stderr, refused.stderr


def test_packs_of_different_ids_carrying_one_definition_differently_are_named(tmp_path: Path) -> None:
    """Found by a regression review: a hotfix pack of another id (a lower version) lost to an
    older pack in silence; versions of different packs say nothing of which is newer."""
    dev, prod = _pair(tmp_path)
    _publish(dev, "alpha", "p@1.2.0")
    _publish(dev, "hotfix", "hotfix@0.1.0")
    jobgate(dev, "export", str(tmp_path / "seed.zip"))
    done = json.loads(jobgate(prod, "--json", "import", str(tmp_path / "seed.zip")).stdout)
    [note] = done["notes"]
    assert note.startswith("rb: carried with different content by packs hotfix, p") and "jobgate apply" in note
