"""Signed definitions: with ``require_signed_definitions`` an unsigned, tampered or foreign-signed
definition is refused at load with a clear error, and a stored one that is not signed by a
trust root stays refused at every trigger (audited)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_cli import jobgate
from tests.helpers import count, define, make_config

from jobgate.core.errors import GovernanceRefusal, ValidationError
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.definitions import parse_definition
from jobgate.definitions.schema import content_digest
from jobgate.governance import signing
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

KEY = signing.generate("release-2026")
OTHER = signing.generate("release-2026")  # same name, a different (untrusted) key


def document(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "job_definition_id": "signed-job",
        "job_class": "MAINTENANCE_JOB",
        "handler": "engine_handlers:succeed",
    }
    doc.update(extra)
    return doc


def signed(doc: dict[str, Any], pair: signing.KeyPair = KEY) -> dict[str, Any]:
    return {**doc, "signature": signing.sign(content_digest(doc), pair.key_id, pair.private_b64)}


def strict(tmp_path: Path) -> Any:
    return make_config(
        tmp_path, signing={"require_signed_definitions": True, "trust_roots": {KEY.key_id: KEY.public_b64}}
    )


def test_a_signed_definition_loads_and_keeps_its_digest(tmp_path: Path) -> None:
    loaded = parse_definition(signed(document()), "d.yaml", strict(tmp_path))
    unsigned = parse_definition(document(), "d.yaml", make_config(tmp_path))
    assert loaded.definition.digest == unsigned.definition.digest  # the signature is not content


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (document(), "not signed"),
        ({**signed(document()), "description": "edited after signing"}, "does not match"),
        (signed(document(), OTHER), "does not match"),
        ({**document(), "signature": {"key_id": "stranger", "value": "AAAA"}}, "not a trust root"),
        ({**document(), "signature": "yes"}, "key_id, value"),
    ],
)
def test_unsigned_tampered_and_foreign_definitions_are_refused_at_load(
    tmp_path: Path, doc: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_definition(doc, "defs/d.yaml", strict(tmp_path))
    assert refused.value.field == "signature" and says in refused.value.message
    assert refused.value.source == "defs/d.yaml"


def test_a_stored_unsigned_definition_stays_refused_once_signatures_are_required(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    define(engine, job_definition_id="legacy")  # stored and approved before the rule
    strict_engine = Engine(Store(database_url), strict(tmp_path / "strict"))
    with pytest.raises(GovernanceRefusal) as refused:
        strict_engine.submit(SubmitRequest("legacy", scope=Scope(), requested_by="ada"), actor="ada")
    assert refused.value.code == "definition_not_signed"
    assert count(engine, "job_runs") == 0
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
    assert entry.event.reason == "definition_not_signed"
    strict_engine.store.dispose()


def test_keys_generate_sign_and_verify_from_the_command_line(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    out = jobgate(folder, "keys", "generate", "--key-id", "ops", "--out", "ops.key")
    assert stat.S_IMODE((folder / "ops.key").stat().st_mode) == 0o600
    public = out.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    config = folder / "jobgate.yaml"
    config.write_text(config.read_text() + f"\nsigning:\n  trust_roots:\n    ops: {public}\n")
    target = folder / "definitions" / "demo-hello.yaml"
    assert jobgate(folder, "keys", "verify", str(target), check=False).returncode == 1
    jobgate(folder, "keys", "sign", str(target), "--key-id", "ops", "--key", "ops.key")
    assert "# The smallest complete job" in target.read_text()  # comments and layout kept
    assert "ok" in jobgate(folder, "keys", "verify", str(target)).stdout
    jobgate(folder, "keys", "sign", str(target), "--key-id", "ops", "--key", "ops.key")  # re-signing replaces
    assert target.read_text().count("signature:") == 1
    target.write_text(target.read_text().replace("Say hello", "Say goodbye"))
    tampered = jobgate(folder, "keys", "verify", str(target), check=False)
    assert tampered.returncode == 1 and "does not match" in tampered.stdout
    replay = folder / "definitions" / "replay-sampling.json"
    jobgate(folder, "keys", "sign", str(replay), "--key-id", "ops", "--key", "ops.key")
    assert json.loads(replay.read_text())["signature"]["key_id"] == "ops"


def test_a_refusal_at_load_is_audited_and_stores_nothing(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    config = folder / "jobgate.yaml"
    roots = f"\nsigning:\n  require_signed_definitions: true\n  trust_roots:\n    ops: {KEY.public_b64}\n"
    config.write_text(config.read_text() + roots)
    incoming = folder / "incoming"
    incoming.mkdir()
    (incoming / "new.yaml").write_text(
        "job_definition_id: unsigned-new\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
    )
    refused = jobgate(folder, "apply", "incoming", check=False)
    assert refused.returncode == 1 and "signature" in refused.stderr and "not signed" in refused.stderr
    listed = json.loads(jobgate(folder, "--json", "definitions", "list").stdout)
    assert "unsigned-new" not in [d["job_definition_id"] for d in listed]
    entries = json.loads(jobgate(folder, "--json", "audit", "list", "--action", "definition.refused").stdout)
    assert [e["reason"] for e in entries] == ["definition_not_signed"]


def test_re_signing_with_a_new_key_keeps_the_version_and_its_approval(database_url: str, tmp_path: Path) -> None:
    new = signing.generate("release-2027")
    store = Store(database_url)
    old_engine = Engine(store, strict(tmp_path / "old"))
    doc = document(job_definition_id="rotated")
    old_engine.apply_definitions([parse_definition(signed(doc), "d.yaml", old_engine.config)])
    from jobgate.service import approvals

    approvals.approve(old_engine, "default", "rotated", actor="root")
    rotated = make_config(
        tmp_path / "new", signing={"require_signed_definitions": True, "trust_roots": {new.key_id: new.public_b64}}
    )
    engine = Engine(store, rotated)
    (applied,) = engine.apply_definitions([parse_definition(signed(doc, new), "d.yaml", rotated)])
    assert (applied.version, applied.created) == (1, False)  # the same content: no new version
    run = engine.submit(SubmitRequest("rotated", scope=Scope(), requested_by="ada"), actor="ada").run
    assert run.definition_version == 1
    store.dispose()


def test_keys_verify_checks_every_file_and_says_what_is_required(tmp_path: Path) -> None:
    """Found by a review: in the demo folder, ``keys verify definitions/`` said every unsigned
    file was refused because "signatures are required here" (they were not), then stopped at
    the scenario file, leaving the files after it unchecked."""
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    out = jobgate(folder, "keys", "generate", "--key-id", "ops", "--out", "ops.key")
    public = out.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    config = folder / "jobgate.yaml"
    config.write_text(config.read_text() + f"\nsigning:\n  trust_roots:\n    ops: {public}\n")
    definitions = sorted((folder / "definitions").iterdir())
    last = [p for p in definitions if p.suffix in (".yaml", ".yml") and "job_definition_id" in p.read_text()][-1]
    jobgate(folder, "keys", "sign", str(last), "--key-id", "ops", "--key", "ops.key")
    checked = jobgate(folder, "keys", "verify", "definitions", check=False)
    assert checked.returncode == 1 and "signatures are required here" not in checked.stdout
    assert f"ok      {last.relative_to(folder)}" in checked.stdout or f"ok      {last}" in checked.stdout
    assert "skipped" in checked.stdout and "scenario files are not signed" in checked.stdout
    assert "signatures are not required here" in checked.stdout
    signed = jobgate(folder, "keys", "sign", "definitions", "--key-id", "ops", "--key", "ops.key")
    assert "skipped" in signed.stdout  # the scenario file, and every definition signed
    assert jobgate(folder, "keys", "verify", "definitions").returncode == 0
