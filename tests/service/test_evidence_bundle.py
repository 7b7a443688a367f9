"""Evidence bundles: export, then verify with nothing but the bundle and the public key; any
byte changed anywhere in the zip fails verification, naming the file; a bundle for a period, a
definition or a workflow run carries every run's rows, seals and proofs into signed anchors."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import define, make_config

from jobgate.core.models import Scope
from jobgate.export.bundles import build_bundle, run_scope, verify_bundle
from jobgate.governance import signing
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
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
    yield build_bundle(engine, run_scope(engine, run.run.job_run_id))
    store.dispose()


def keys() -> dict[str, str]:
    return {KEY.key_id: KEY.public_b64}


def test_a_bundle_verifies_offline_and_says_who_signed(bundle: bytes) -> None:
    result = verify_bundle(bundle, public_keys=keys())
    assert result.ok and result.signed_by == KEY.key_id, result.problems
    names = zipfile.ZipFile(io.BytesIO(bundle)).namelist()
    runs = [n for n in names if n.startswith("runs/")]
    assert len(runs) == 1 and sorted(set(names) - set(runs)) == sorted(
        ["approvals.json", "audit.json", "definitions.json", "keys.json", "manifest.json", "manifest.sig",
         "proofs.json", "seals.json", "snapshots.json"]
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
    "name",
    ["runs/", "definitions.json", "approvals.json", "snapshots.json", "seals.json", "audit.json", "manifest.json"],
)
def test_a_changed_file_is_named(bundle: bytes, name: str) -> None:
    if name == "runs/":
        name = next(n for n in zipfile.ZipFile(io.BytesIO(bundle)).namelist() if n.startswith("runs/"))
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
    for given in (KEY.public_b64, f"={KEY.public_b64}", f"{KEY.key_id}=", f"{KEY.key_id}=not-a-key"):
        malformed = jobgate(folder, "evidence", "verify", "run.zip", "--public-key", given, check=False)
        assert malformed.returncode == 1 and "--public-key" in malformed.stderr, given  # named, not half-read
    again = jobgate(folder, "evidence", "export", run_id, "--out", "run.zip", check=False)
    assert again.returncode == 1 and "exists" in again.stderr


def _resign(bundle: bytes, change: dict[str, bytes | None]) -> bytes:
    """The bundle with files replaced (None: taken out) and its manifest rebuilt and re-signed
    with the real key: an insider who holds the evidence key but cannot rewrite the anchors
    already published."""
    import hashlib
    import json

    from jobgate.export.bundles import pack

    source = zipfile.ZipFile(io.BytesIO(bundle))
    files = {n: source.read(n) for n in source.namelist() if n not in ("manifest.json", "manifest.sig")}
    for name, data in change.items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    manifest = json.loads(source.read("manifest.json"))
    manifest["files"] = {n: "sha256:" + hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
    files["manifest.sig"] = (json.dumps(signing.sign(message, KEY.key_id, KEY.private_b64)) + "\n").encode()
    return pack(files)


@pytest.fixture
def period(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, str, list[str]]]:
    """Three finished runs of one definition, their seals chained and anchored, all signed."""
    from datetime import timedelta

    from jobgate.evidence import anchors, sinks
    from jobgate.evidence import keys as evidence_keys
    from jobgate.service import audit

    key_file = tmp_path / "evidence.key"
    key_file.write_text(KEY.private_b64)
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, evidence={"signing_key": str(key_file), "signing_key_id": KEY.key_id}))
    job = define(engine, job_definition_id="ledger-close")
    ids = []
    for month in ("09", "10", "11"):
        req = SubmitRequest(job, scope=Scope(), requested_by="ada", reason=month, request_id=f"close-{month}")
        made = engine.submit(req, actor="ada").run.job_run_id
        control.cancel_run(engine, made, actor="ops", reason="closed by hand")
        ids.append(made)
    now = engine.clock.now()
    audit.seal_pending(engine, now)
    with engine.store.write() as tx:
        sink = sinks.sink_for(engine.config)
        signer = evidence_keys.signer_for(engine.config)
        assert anchors.anchor_due(
            tx, "default", now=now + timedelta(hours=2), window=timedelta(hours=1), sink=sink, signer=signer
        )
    yield engine, job, ids
    store.dispose()


def test_a_period_export_ties_every_run_to_a_signed_anchor(period: tuple[Engine, str, list[str]]) -> None:
    from datetime import timedelta

    from jobgate.export.scope import ExportScope

    engine, job, ids = period
    now = engine.clock.now()
    for scope in (
        ExportScope(start=now - timedelta(hours=1), end=now + timedelta(minutes=1)),
        ExportScope(job_definition_id=job),
    ):
        bundle = build_bundle(engine, scope)
        names = zipfile.ZipFile(io.BytesIO(bundle)).namelist()
        assert sorted(n for n in names if n.startswith("runs/")) == sorted(f"runs/{i}.json" for i in ids)
        result = verify_bundle(bundle, public_keys=keys())
        assert result.ok, result.problems
        assert result.anchors_checked > 0 and not result.notes, result.notes  # every seal chained and anchored


def test_a_record_rewritten_in_a_re_signed_bundle_breaks_its_seal(period: tuple[Engine, str, list[str]]) -> None:
    import json

    from jobgate.export.scope import ExportScope

    engine, _job, ids = period
    bundle = build_bundle(engine, run_scope(engine, ids[0]))
    name = f"runs/{ids[0]}.json"
    doc = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read(name))
    doc["row"]["status"] = "COMPLETED"  # the manifest re-signed: only the seal chain can tell
    forged = _resign(bundle, {name: (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(p.startswith(name) and "differs from its seal" in p for p in result.problems)
    seals_doc = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read("seals.json"))
    for s in seals_doc:  # ... and rewriting the seal too breaks its proof into the batch root
        if s["record_id"] == ids[0]:
            s["outcome"] = "sha256:" + "0" * 64
    forged = _resign(bundle, {"seals.json": (json.dumps(seals_doc, indent=2, sort_keys=True) + "\n").encode()})
    assert not verify_bundle(forged, public_keys=keys()).ok
    # ... and another run put under its name (found by a review: a definition's bundle holds
    # several; the scope was checked against file names, not the rows they hold).
    whole = zipfile.ZipFile(io.BytesIO(build_bundle(engine, ExportScope(job_definition_id=_job))))
    other = f"runs/{ids[1]}.json"
    forged = _resign(build_bundle(engine, ExportScope(job_definition_id=_job)), {name: whole.read(other), other: None})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(f"{name}: holds run {ids[1]}" in p for p in result.problems), result.problems
    # ... and leaving the run out, with its seal, leaves a bundle of nothing its scope names.
    forged = _resign(bundle, _without(zipfile.ZipFile(io.BytesIO(bundle)), {name}))
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(f"its scope is run {ids[0]}" in p for p in result.problems), result.problems


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("detail.run.status", lambda d: d["run"].update(status="COMPLETED", error_code=None)),
        ("detail.run.ended_at", lambda d: d["run"].update(ended_at="2001-01-01T00:00:00Z")),
        ("detail.run.params", lambda d: d["run"].update(params={"month": "forged"})),
        ("detail.transitions[1].actor", lambda d: d["transitions"][0].update(actor="mallory")),
        ("transitions", lambda d: d["transitions"].pop()),
    ],
)
def test_what_a_re_signed_bundle_shows_must_say_what_its_sealed_rows_say(
    period: tuple[Engine, str, list[str]], where: str, change: Any
) -> None:
    """``detail`` (the run as the API shows it) is what a reader reads: each value it takes from
    a sealed row is held against that row, so a doctored view in a re-signed bundle is refused."""
    import json

    engine, _job, ids = period
    bundle = build_bundle(engine, run_scope(engine, ids[0]))
    name = f"runs/{ids[0]}.json"
    doc = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read(name))
    change(doc["detail"])
    forged = _resign(bundle, {name: (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(p.startswith(name) and where in p for p in result.problems), result.problems


def test_the_command_exports_a_definition_and_verifies_in_an_empty_folder(
    period: tuple[Engine, str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from jobgate.cli import cli

    engine, job, _ids = period
    out = tmp_path / "ledger.zip"
    config = tmp_path / "jobgate.yaml"
    import yaml
    from tests.helpers import config_document

    config.write_text(
        yaml.safe_dump(
            config_document(
                tmp_path, evidence={"signing_key": str(tmp_path / "evidence.key"), "signing_key_id": KEY.key_id}
            )
        )
    )
    runner = CliRunner()
    made = runner.invoke(
        cli,
        [
            "--config",
            str(config),
            "--db",
            engine.store.url,
            "evidence",
            "export",
            "--definition",
            job,
            "--out",
            str(out),
        ],
    )
    assert made.exit_code == 0, made.output
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)  # nothing but the bundle and the key
    checked = runner.invoke(cli, ["evidence", "verify", str(out), "--public-key", f"{KEY.key_id}={KEY.public_b64}"])
    assert checked.exit_code == 0 and "ok:" in checked.output and "anchor signature" in checked.output, checked.output


def _tamper(engine: Engine, *statements: tuple[str, dict[str, Any]]) -> None:
    """Direct SQL on the database, as a writer of it who is not jobgate."""
    from sqlalchemy import text

    from jobgate.testing import connection

    with engine.store.write() as tx:
        for sql, params in statements:
            connection(tx).execute(text(sql), params)


_FORGE_RESULT = ("UPDATE job_runs SET status = 'COMPLETED' WHERE job_run_id = :rid", {})


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        # the run's seals removed, its record rewritten: an ended run with no seal
        ([("DELETE FROM record_seals WHERE record_id = :rid", {}), _FORGE_RESULT], "has no seal though it has ended"),
        # one transition added after the seal (an end that is no requeue), the record rewritten
        (
            [
                (
                    "INSERT INTO run_transitions (job_run_id, tenant_id, from_status, to_status, attempt, reason,"
                    " actor, at) VALUES (:rid, 'default', 'CANCELLED', 'COMPLETED', 1, 'succeeded', 'w', 1)",
                    {},
                ),
                _FORGE_RESULT,
            ],
            "but its end has no seal",
        ),
        # ... or a transition that leaves it running: still not a requeue
        (
            [
                (
                    "INSERT INTO run_transitions (job_run_id, tenant_id, from_status, to_status, attempt, reason,"
                    " actor, at) VALUES (:rid, 'default', 'CANCELLED', 'SCHEDULED', 1, 'admitted', 'w', 1)",
                    {},
                ),
                ("UPDATE job_runs SET status = 'SCHEDULED' WHERE job_run_id = :rid", {}),
            ],
            "without a requeue of a dead-lettered or escalated run",
        ),
    ],
)
def test_a_run_forged_in_the_database_does_not_verify_from_its_bundle(
    period: tuple[Engine, str, list[str]], tamper: list[tuple[str, dict[str, Any]]], said: str
) -> None:
    """What ``audit verify --records`` refuses, a bundle exported afterwards refuses offline:
    an ended run has a seal, and only an audited requeue moves a sealed run on."""
    engine, _job, ids = period
    _tamper(engine, *((sql, {**params, "rid": ids[0]}) for sql, params in tamper))
    result = verify_bundle(build_bundle(engine, run_scope(engine, ids[0])), public_keys=keys())
    name = f"runs/{ids[0]}.json"
    assert not result.ok and any(p.startswith(name) and said in p for p in result.problems), result.problems


def test_a_definition_whose_seal_was_removed_does_not_verify(period: tuple[Engine, str, list[str]]) -> None:
    engine, job, ids = period
    _tamper(engine, ("DELETE FROM record_seals WHERE kind = 'definition' AND record_id = :rid", {"rid": f"{job}@1"}))
    result = verify_bundle(build_bundle(engine, run_scope(engine, ids[0])), public_keys=keys())
    assert not result.ok
    assert any(p.startswith(f"definitions.json: {job}@1") and "has no seal" in p for p in result.problems)


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("detail.run.retry_of", lambda d: d["run"].update(retry_of="TGJOBRUN-" + "0" * 32)),
        ("detail.run.schedule_id", lambda d: d["run"].update(schedule_id="nightly")),
        ("detail.run.slot_at", lambda d: d["run"].update(slot_at="2026-01-01T00:00:00Z")),
        ("detail.run is not an object", lambda d: d.update(run=None)),
    ],
)
def test_values_derived_from_sealed_ones_must_agree_with_them(
    period: tuple[Engine, str, list[str]], where: str, change: Any
) -> None:
    """``retry_of``, ``schedule_id`` and ``slot_at`` are shown from the sealed trigger and slot."""
    import json

    engine, _job, ids = period
    bundle = build_bundle(engine, run_scope(engine, ids[0]))
    name = f"runs/{ids[0]}.json"
    doc = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read(name))
    change(doc["detail"])
    forged = _resign(bundle, {name: (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(p.startswith(name) and where in p for p in result.problems), result.problems


NESTED = b"[" * 100_000 + b"]" * 100_000  # parses past Python's recursion limit


def test_hostile_json_in_a_bundle_is_a_problem_not_a_crash(period: tuple[Engine, str, list[str]]) -> None:
    """Found by a review: a manifest nested past the recursion limit, or an audit entry dated past
    year 9999 in UTC, made ``evidence verify`` exit 70 instead of naming what is wrong."""
    import json

    engine, _job, ids = period
    bundle = build_bundle(engine, run_scope(engine, ids[0]))
    source = zipfile.ZipFile(io.BytesIO(bundle))
    files = {n: source.read(n) for n in source.namelist()}
    from jobgate.export.bundles import pack

    nested_manifest = pack({**files, "manifest.json": NESTED})
    result = verify_bundle(nested_manifest, public_keys=None)
    assert not result.ok and "manifest.json is not a manifest" in result.problems
    entries = json.loads(files["audit.json"])
    entries[0]["at"] = "9999-12-31T23:59:59-10:00"  # past year 9999 once in UTC
    for change in ({"audit.json": (json.dumps(entries) + "\n").encode()}, {"audit.json": NESTED}):
        result = verify_bundle(_resign(bundle, change), public_keys=keys())
        assert not result.ok and any("not what an export writes" in p for p in result.problems), result.problems


def test_a_sink_answer_nested_past_any_record_is_unreadable(tmp_path: Path) -> None:
    from jobgate.evidence import sinks

    path = tmp_path / "anchors.jsonl"
    path.write_bytes(NESTED + b"\n")
    with pytest.raises(sinks.SinkUnreadable) as unreadable:
        sinks.FileSink(path).records()
    assert "line 1" in unreadable.value.message


def test_a_period_names_the_runs_retention_deleted(period: tuple[Engine, str, list[str]]) -> None:
    """Found by a review: a period bundle made after retention held the runs left and verified,
    saying nothing of the ones gone. It lists them (``retired.json``), each with its tombstone
    seal chained like every seal; a tombstone taken out of a re-signed bundle is a problem."""
    import json
    from datetime import timedelta

    from jobgate.export.scope import ExportScope
    from jobgate.runtime.outbox import publish_once

    engine, _job, ids = period
    while publish_once(engine.store, [], engine.clock):
        pass
    now = engine.clock.now()
    with engine.store.write() as tx:
        gone = tx.runs_retire("default", now + timedelta(minutes=1), 2, now=now + timedelta(minutes=1))
    assert len(gone) == 2
    from jobgate.service import audit

    audit.seal_pending(engine, engine.clock.now())
    bundle = build_bundle(engine, ExportScope(start=now - timedelta(hours=1), end=now + timedelta(minutes=1)))
    files = zipfile.ZipFile(io.BytesIO(bundle))
    listed = json.loads(files.read("retired.json"))
    assert sorted(r["job_run_id"] for r in listed) == sorted(gone)
    assert sorted(n for n in files.namelist() if n.startswith("runs/")) == [
        f"runs/{i}.json" for i in ids if i not in gone
    ]
    result = verify_bundle(bundle, public_keys=keys())
    assert result.ok, result.problems
    assert sum("was retired by retention" in n for n in result.notes) == 2
    seals_doc = json.loads(files.read("seals.json"))
    kept = [s for s in seals_doc if not (s["record_id"] == gone[0] and s["event"] == "retired")]
    forged = _resign(bundle, {"seals.json": (json.dumps(kept, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any(gone[0] in p and "no tombstone" in p for p in result.problems), result.problems
    # a review: the listing taken out, its tombstone kept, passed as complete
    unlisted = [r for r in listed if r["job_run_id"] != gone[0]]
    forged = _resign(bundle, {"retired.json": (json.dumps(unlisted, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok
    assert any(gone[0] in p and "neither in the bundle nor listed" in p for p in result.problems), result.problems


def test_a_workflow_bundle_names_its_steps_runs_retention_deleted(database_url: str, tmp_path: Path) -> None:
    """Found by a review: a workflow run's bundle after retention held none of its steps' runs and
    verified "ok", silent about them. They are listed (``retired.json``) with their tombstones,
    and a bundle missing a step's run without listing it is a problem."""
    import json
    from datetime import timedelta

    from jobgate.evidence import anchors, sinks
    from jobgate.evidence import keys as evidence_keys
    from jobgate.export.scope import ExportScope
    from jobgate.runtime.coordinator import WorkflowCoordinator
    from jobgate.runtime.outbox import publish_once
    from jobgate.service import audit
    from jobgate.service.workflows import StartWorkflow, start_workflow, workflow_view

    key_file = tmp_path / "evidence.key"
    key_file.write_text(KEY.private_b64)
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, evidence={"signing_key": str(key_file), "signing_key_id": KEY.key_id}))
    try:
        step = define(engine, job_definition_id="ledger-step")
        define(engine, job_definition_id="ledger-flow", handler=None, workflow={"steps": [{"id": "one", "job": step}]})
        record, _ = start_workflow(engine, StartWorkflow("ledger-flow", requested_by="ada"), actor="ada")
        coordinator = WorkflowCoordinator(engine)
        coordinator.pass_once()
        (made,) = workflow_view(engine, record.workflow_run_id).steps
        assert made.job_run_id is not None
        control.cancel_run(engine, made.job_run_id, actor="ops", reason="not this month")
        coordinator.pass_once()
        assert workflow_view(engine, record.workflow_run_id).record.status.value in ("FAILED", "CANCELLED")
        while publish_once(engine.store, [], engine.clock):
            pass
        now = engine.clock.now()
        audit.seal_pending(engine, now)
        later = now + timedelta(minutes=1)
        with engine.store.write() as tx:
            assert tx.runs_retire("default", later, 10, now=later) == [made.job_run_id]
        audit.seal_pending(engine, later)
        with engine.store.write() as tx:
            anchors.anchor_due(
                tx, "default", now=later + timedelta(hours=2), window=timedelta(hours=1),
                sink=sinks.sink_for(engine.config), signer=evidence_keys.signer_for(engine.config),
            )  # fmt: skip
        bundle = build_bundle(engine, ExportScope(workflow_run_id=record.workflow_run_id))
        files = zipfile.ZipFile(io.BytesIO(bundle))
        assert [r["job_run_id"] for r in json.loads(files.read("retired.json"))] == [made.job_run_id]
        result = verify_bundle(bundle, public_keys=keys())
        assert result.ok, result.problems
        assert any(made.job_run_id in n and "retired by retention" in n for n in result.notes)
        forged = _resign(bundle, {"retired.json": b"[]\n"})
        result = verify_bundle(forged, public_keys=keys())
        assert not result.ok
        assert any(f"run {made.job_run_id} is neither in the bundle nor listed" in p for p in result.problems)
        # Found by a review: the workflow itself, or what it was made under, left out of a
        # re-signed bundle (with their seals) verified.
        wid = record.workflow_run_id
        for left_out, expected in (
            ({f"workflows/{wid}.json"}, f"its scope is workflow run {wid}, which the bundle does not hold"),
            ({"ledger-flow"}, f"workflows/{wid}.json: its definition version is not in definitions.json"),
            ({"ledger-flow"}, f"workflows/{wid}.json: no approval of its definition"),
        ):
            forged = _resign(bundle, _without(files, left_out))
            result = verify_bundle(forged, public_keys=keys())
            assert not result.ok and any(expected in p for p in result.problems), result.problems
    finally:
        store.dispose()


def _without(files: zipfile.ZipFile, names: set[str]) -> dict[str, bytes | None]:
    """A bundle's changes taking ``names`` out: files by name, with their records' seals; a
    definition id's versions and approvals (their seals left, as a careless forger would)."""
    import json

    gone = {n for n in names if n in files.namelist()}
    changed: dict[str, bytes | None] = dict.fromkeys(gone)
    dropped = {n.split("/", 1)[1].removesuffix(".json") for n in gone}
    for listed in ("definitions.json", "approvals.json"):
        kept = [r for r in json.loads(files.read(listed)) if r["job_definition_id"] not in names]
        changed[listed] = (json.dumps(kept, indent=2, sort_keys=True) + "\n").encode()
    seals = [x for x in json.loads(files.read("seals.json")) if x["record_id"] not in dropped]
    changed["seals.json"] = (json.dumps(seals, indent=2, sort_keys=True) + "\n").encode()
    return changed


@pytest.fixture
def attempted(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    """A run that failed its one attempt and was dead-lettered, sealed, chained and anchored."""
    import threading
    from datetime import timedelta

    from tests.runtime.runtime_support import wait_until

    from jobgate.evidence import anchors, sinks
    from jobgate.evidence import keys as evidence_keys
    from jobgate.runtime.worker import Worker, WorkerSettings
    from jobgate.service import audit

    key_file = tmp_path / "evidence.key"
    key_file.write_text(KEY.private_b64)
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, evidence={"signing_key": str(key_file), "signing_key_id": KEY.key_id}))
    job = define(engine, handler="engine_handlers:fail_final")
    run_id = engine.submit(SubmitRequest(job, scope=Scope(), requested_by="ada"), actor="ada").run.job_run_id
    worker = Worker(engine, WorkerSettings(concurrency=1))
    threading.Thread(target=worker.run, daemon=True).start()

    def ended() -> bool:
        with engine.store.read() as tx:
            found = tx.run_get(run_id)
        return found is not None and found.status.is_terminal

    try:
        wait_until(ended, timeout=30, what="the failing run to end")
    finally:
        worker.stop()
        worker.wait_stopped(10)
    now = engine.clock.now()
    audit.seal_pending(engine, now)
    with engine.store.write() as tx:
        signer = evidence_keys.signer_for(engine.config)
        anchors.anchor_due(
            tx, "default", now=now + timedelta(hours=2), window=timedelta(hours=1), sink=sinks.sink_for(engine.config),
            signer=signer,
        )  # fmt: skip
    yield engine, run_id
    store.dispose()


def _forged(bundle: bytes, name: str, change: Any) -> bytes:
    import json

    doc = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read(name))
    change(doc)
    return _resign(bundle, {name: (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()})


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("detail lists 0 attempts", lambda d: d["detail"]["attempts"].pop(0)),
        ("detail.attempts[1].outcome", lambda d: d["detail"]["attempts"][0].update(outcome="succeeded")),
        ("detail.attempts[1].worker_id", lambda d: d["detail"]["attempts"][0].update(worker_id="worker-honest")),
        ("detail.attempts[1].error_message", lambda d: d["detail"]["attempts"][0].update(error_message=None)),
        ("detail.attempts[1].ended_at", lambda d: d["detail"]["attempts"][0].update(ended_at=None)),
        ("shows no dead letter", lambda d: d["detail"].update(dead_letter=None)),
    ],
)
def test_a_re_signed_bundle_cannot_hide_an_attempt_or_a_dead_letter(
    attempted: tuple[Engine, str], where: str, change: Any
) -> None:
    """Found by a review: the attempts a bundle shows (each derived from sealed transitions) were
    not compared at all, and a dead letter could be dropped from ``detail`` whole."""
    engine, run_id = attempted
    bundle = build_bundle(engine, run_scope(engine, run_id))
    assert verify_bundle(bundle, public_keys=keys()).ok
    result = verify_bundle(_forged(bundle, f"runs/{run_id}.json", change), public_keys=keys())
    assert not result.ok and any(where in p for p in result.problems), result.problems


def test_a_bundle_without_the_approval_its_run_was_made_under_is_refused(attempted: tuple[Engine, str]) -> None:
    """Found by a review: removing the run's approval from a re-signed bundle verified ok, though
    its seal was still listed; without the seal too, the run names the approval it needs."""
    import json

    engine, run_id = attempted
    bundle = build_bundle(engine, run_scope(engine, run_id))
    emptied = _resign(bundle, {"approvals.json": b"[]\n"})
    result = verify_bundle(emptied, public_keys=keys())
    assert not result.ok
    assert any("is sealed in seals.json but not in approvals.json" in p for p in result.problems), result.problems
    assert any(p.startswith(f"runs/{run_id}.json: no approval") for p in result.problems), result.problems
    seals_doc = [
        s for s in json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read("seals.json")) if s["kind"] != "approval"
    ]
    both = _resign(emptied, {"seals.json": (json.dumps(seals_doc, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(both, public_keys=keys())
    assert not result.ok and any(p.startswith(f"runs/{run_id}.json: no approval") for p in result.problems)


def test_an_entry_inside_the_anchored_chain_must_carry_its_proof(attempted: tuple[Engine, str]) -> None:
    """Found by a review: an entry rewritten (its hash recomputed) with its proof removed from a
    re-signed bundle was only noted "not anchored yet", though a later anchor in the same bundle
    covers it."""
    import json

    engine, run_id = attempted
    bundle = build_bundle(engine, run_scope(engine, run_id))
    proofs = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read("proofs.json"))
    assert len(proofs) >= 2
    dropped = proofs[0]["seq"]
    kept = [p for p in proofs if p["seq"] != dropped]
    forged = _resign(bundle, {"proofs.json": (json.dumps(kept, indent=2, sort_keys=True) + "\n").encode()})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok
    assert any(f"entry {dropped} lies within the anchored chain" in p for p in result.problems), result.problems


def test_a_bundle_with_every_proof_left_out_still_owes_them(attempted: tuple[Engine, str]) -> None:
    """Found by a review: with every proof removed from a re-signed bundle, nothing was "within
    the anchored chain" and each entry was only "not anchored yet". The manifest says what was
    anchored at export (``anchored_through``): those entries must carry their proofs."""
    import json

    engine, run_id = attempted
    bundle = build_bundle(engine, run_scope(engine, run_id))
    manifest = json.loads(zipfile.ZipFile(io.BytesIO(bundle)).read("manifest.json"))
    assert manifest["anchored_through"] > 0 and manifest["exported_at"] and manifest["anchor_window_seconds"] == 3600
    forged = _resign(bundle, {"proofs.json": b"[]\n"})
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok and any("lies within the anchored chain" in p for p in result.problems), result.problems


def test_entries_older_than_two_windows_at_export_must_be_proven(attempted: tuple[Engine, str]) -> None:
    """The key's holder may also lower ``anchored_through`` in the manifest they re-sign: an entry
    already two anchor windows old when the bundle was exported must still carry its proof (the
    auditor may give the deployment's window; with a timestamping authority the export's time
    itself is vouched for, ``manifest.tsr``)."""
    import json
    from datetime import timedelta

    engine, run_id = attempted
    bundle = build_bundle(engine, run_scope(engine, run_id))
    source = zipfile.ZipFile(io.BytesIO(bundle))
    manifest = json.loads(source.read("manifest.json"))
    manifest["anchored_through"] = 0
    files = {n: source.read(n) for n in source.namelist() if n not in ("manifest.json", "manifest.sig")}
    files["proofs.json"] = b"[]\n"
    import hashlib

    from jobgate.export.bundles import pack

    manifest["files"] = {n: "sha256:" + hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
    files["manifest.sig"] = (json.dumps(signing.sign(message, KEY.key_id, KEY.private_b64)) + "\n").encode()
    forged = pack(files)
    assert verify_bundle(forged, public_keys=keys()).ok  # within the stated window: the unanchored tail
    tiny = verify_bundle(forged, public_keys=keys(), anchor_window=timedelta(microseconds=1))
    assert not tiny.ok and any("more than two anchor windows" in p for p in tiny.problems), tiny.problems


def test_a_manifest_cannot_state_its_way_out_of_the_age_rule() -> None:
    """Found by a regression review: the signer removed the stated window (or stated a huge one)
    and no entry was ever "two windows old". The window taken from a manifest is at most a day;
    a statement missing where it was made (timestamped) or asked for (--anchor-window) fails."""
    from datetime import timedelta

    from jobgate.export.scope import MAX_STATED_WINDOW, ContentCheck, _anchoring_claim

    stated = {"exported_at": "2026-12-05T10:00:00Z", "anchor_window_seconds": 1e8, "anchored_through": 3}
    out = ContentCheck([], [])
    assert _anchoring_claim(stated, None, stamped=True, out=out).window == MAX_STATED_WINDOW
    hour = timedelta(hours=1)
    assert _anchoring_claim(stated, hour, stamped=False, out=out).window == hour and not out.problems
    for stripped in ({k: v for k, v in stated.items() if k != "anchor_window_seconds"}, {"anchored_through": 3}):
        out = ContentCheck([], [])
        assert _anchoring_claim(stripped, None, stamped=True, out=out).exported_at is None
        assert out.problems and "states no" in out.problems[0]
        out = ContentCheck([], [])
        _anchoring_claim({"anchored_through": 3}, hour, stamped=False, out=out)
        assert out.problems and "states no exported_at" in out.problems[0]
        legacy = ContentCheck([], [])
        _anchoring_claim({}, None, stamped=False, out=legacy)
        assert not legacy.problems and legacy.notes  # a bundle exported before manifests said it


def test_a_definitions_bundle_missing_a_run_its_audit_entries_name_does_not_verify(
    period: tuple[Engine, str, list[str]],
) -> None:
    """A review: a definition's bundle re-signed without one run (its file and its seals) verified
    ok, although the entries about that run were still in audit.json."""
    from jobgate.export.scope import ExportScope

    engine, job, ids = period
    bundle = build_bundle(engine, ExportScope(job_definition_id=job))
    assert verify_bundle(bundle, public_keys=keys()).ok
    forged = _resign(bundle, _without(zipfile.ZipFile(io.BytesIO(bundle)), {f"runs/{ids[1]}.json"}))
    result = verify_bundle(forged, public_keys=keys())
    assert not result.ok
    assert any(
        p.startswith("audit.json:") and f"about run {ids[1]}" in p and "neither in the bundle" in p
        for p in result.problems
    ), result.problems


def test_after_a_rotation_the_current_key_alone_verifies_a_bundle(
    period: tuple[Engine, str, list[str]], tmp_path: Path
) -> None:
    """Found by a review: after the documented rotation, a bundle checked with the current key
    alone failed every anchor the earlier key signed ("not a trust root"), though the bundle's
    keys.json, under the manifest the current key signed, lists that key as still trusted."""
    engine, job, _ = period
    new = signing.generate("evidence-2027")
    new_file = tmp_path / "evidence-2027.key"
    new_file.write_text(new.private_b64)
    rotated = Engine(
        engine.store,
        make_config(
            tmp_path / "rotated",
            evidence={
                "signing_key": str(new_file),
                "signing_key_id": new.key_id,
                "trusted_keys": {KEY.key_id: KEY.public_b64},
            },
        ),
    )
    from jobgate.export.scope import ExportScope

    bundle = build_bundle(rotated, ExportScope(job_definition_id=job))
    result = verify_bundle(bundle, public_keys={new.key_id: new.public_b64})
    assert result.ok and result.signed_by == new.key_id and result.anchors_checked > 0, result.problems
    rogue = signing.generate("evidence-2027")  # the same id, another key: the manifest is not its
    assert not verify_bundle(bundle, public_keys={rogue.key_id: rogue.public_b64}).ok
