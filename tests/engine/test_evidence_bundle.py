"""Evidence bundles: export, then verify with nothing but the bundle and the public key; any
byte changed anywhere in the zip fails verification, naming the file."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import define, make_config

from jobgate import signing
from jobgate.core.models import Scope
from jobgate.evidence import build_bundle, verify_bundle
from jobgate.service import control
from jobgate.service.engine import Engine, SubmitRequest
from jobgate.store.sqlstore import Store

KEY = signing.generate("evidence-2026")


@pytest.fixture
def bundle(database_url: str, tmp_path: Path) -> Iterator[bytes]:
    key_file = tmp_path / "evidence.key"
    key_file.write_text(KEY.private_b64)
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, evidence={"signing_key": str(key_file), "signing_key_id": KEY.key_id}))
    define(engine, job_definition_id="payroll")
    run = engine.submit(SubmitRequest("payroll", scope=Scope(), requested_by="ada", reason="month end"), actor="ada")
    control.cancel_run(engine, run.run.job_run_id, actor="ops", reason="wrong month")
    yield build_bundle(engine, run.run.job_run_id)
    store.dispose()


def keys() -> dict[str, str]:
    return {KEY.key_id: KEY.public_b64}


def test_a_bundle_verifies_offline_and_says_who_signed(bundle: bytes) -> None:
    result = verify_bundle(bundle, public_keys=keys())
    assert result.ok and result.signed_by == KEY.key_id, result.problems
    names = zipfile.ZipFile(io.BytesIO(bundle)).namelist()
    assert names == sorted(
        ["approvals.json", "audit.json", "config_snapshot.json", "definition.json", "manifest.json",
         "manifest.sig", "proofs.json", "run.json"]
    )  # fmt: skip
    audit = zipfile.ZipFile(io.BytesIO(bundle)).read("audit.json").decode()
    assert "definition.approved" in audit and "run.cancelled" in audit and "run.scheduled_manually" in audit
    other = signing.generate(KEY.key_id)
    assert not verify_bundle(bundle, public_keys={KEY.key_id: other.public_b64}).ok  # not our signer


def _rewrite(bundle: bytes, name: str, change: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(bundle))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in source.infolist():
            data = source.read(info)
            z.writestr(info.filename, data.replace(b'"', change, 1) if info.filename == name else data)
    return out.getvalue()


@pytest.mark.parametrize(
    "name", ["run.json", "definition.json", "approvals.json", "config_snapshot.json", "audit.json", "manifest.json"]
)
def test_a_changed_file_is_named(bundle: bytes, name: str) -> None:
    result = verify_bundle(_rewrite(bundle, name, b"'"), public_keys=keys())
    assert not result.ok
    assert any(
        p.startswith(name) or (name == "manifest.json" and p.startswith("manifest.sig")) for p in result.problems
    )


def test_any_flipped_byte_of_the_zip_fails(bundle: bytes) -> None:
    for i in range(len(bundle)):  # every byte, headers and flags included
        damaged = bytearray(bundle)
        damaged[i] ^= 0x01
        assert not verify_bundle(bytes(damaged), public_keys=keys()).ok, f"byte {i} flipped went unnoticed"


def test_export_and_verify_from_the_command_line(tmp_path: Path) -> None:
    from tests.cli.test_cli import jobgate

    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "ev.key").write_text(KEY.private_b64)
    config = folder / "jobgate.yaml"
    config.write_text(config.read_text() + f"\nevidence:\n  signing_key: ev.key\n  signing_key_id: {KEY.key_id}\n")
    run_id = jobgate(folder, "submit", "demo-hello").stdout.strip()
    jobgate(folder, "evidence", "export", run_id, "--out", "run.zip")
    ok = jobgate(folder, "evidence", "verify", "run.zip", "--public-key", f"{KEY.key_id}={KEY.public_b64}")
    assert "ok" in ok.stdout and KEY.key_id in ok.stdout
    data = bytearray((folder / "run.zip").read_bytes())
    data[len(data) // 2] ^= 0x20
    (folder / "bad.zip").write_bytes(bytes(data))
    bad = jobgate(
        folder, "evidence", "verify", "bad.zip", "--public-key", f"{KEY.key_id}={KEY.public_b64}", check=False
    )
    assert bad.returncode == 1 and "FAILED" in bad.stdout
    # Without a trusted key nothing vouches for the bundle, whatever signature it carries.
    unsigned = jobgate(folder, "evidence", "verify", "run.zip", check=False)
    assert unsigned.returncode == 1 and "UNSIGNED" in unsigned.stdout and "--public-key" in unsigned.stderr
    allowed = jobgate(folder, "evidence", "verify", "run.zip", "--allow-unsigned")
    assert allowed.returncode == 0 and "UNSIGNED" in allowed.stdout
    rogue = signing.generate(KEY.key_id)  # the same key id, another key
    rogue_check = jobgate(
        folder, "evidence", "verify", "run.zip", "--public-key", f"{rogue.key_id}={rogue.public_b64}", check=False
    )
    assert rogue_check.returncode == 1 and "manifest.sig" in rogue_check.stdout
    again = jobgate(folder, "evidence", "export", run_id, "--out", "run.zip", check=False)
    assert again.returncode == 1 and "exists" in again.stderr
