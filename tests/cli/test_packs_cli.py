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
