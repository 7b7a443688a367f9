"""``jobgate keys generate|sign|verify``: the workflow for signed definitions.

``generate`` writes a private key (0600) and prints the public key for ``signing.trust_roots``
in ``jobgate.yaml``; ``sign`` adds (or replaces) the ``signature`` of definition files; ``verify``
checks files against the configured trust roots, as ``jobgate apply`` will with
``require_signed_definitions`` on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import yaml

from jobgate.cli import render
from jobgate.cli.args import new_output, signing_key_options
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.errors import NotReadyError, ValidationError
from jobgate.definitions import definition_files
from jobgate.definitions.schema import content_digest
from jobgate.documents import parse_json, parse_yaml, read_text
from jobgate.governance import signing

_SIGNATURE_BLOCK = re.compile(r"^signature:.*(?:\n[ \t]+.*)*\n?", re.MULTILINE)


@click.group("keys")
def keys() -> None:
    """Ed25519 keys: signed definitions, and the deployment's evidence key."""


@keys.command("evidence")
@click.option("--create", is_flag=True, help="create the evidence key if the deployment has none")
@pass_app
def evidence(app: AppContext, create: bool) -> None:
    """The evidence key that signs anchors and bundles: its id and public key (publish it to
    whoever verifies; ``GET /api/v1/audit/keys`` serves the same), with the rotated keys still
    trusted. ``--create`` makes it (owner-only file, ``evidence.signing_key`` or
    ``<data_dir>/keys/evidence.key``) when there is none."""
    from jobgate.evidence import keys as evidence_keys

    config = app.config()
    if create and not config.evidence_key_path.exists():  # also where evidence.signing_key names a new file
        evidence_keys.refuse_a_rotation_that_breaks_verification(config, _anchor_signers(app))
        evidence_keys.create(config)
        render.err.print(f"evidence key created at {config.evidence_key_path} (owner-only)", markup=False)
    published = evidence_keys.published(config)
    if not published:
        raise ValidationError(
            "this deployment has no evidence key; `jobgate keys evidence --create` makes one",
            field="evidence.signing_key",
        )
    render.records(app.json_output, "evidence keys", published, columns=["key_id", "algorithm", "status", "public_key"])


def _anchor_signers(app: AppContext) -> dict[str, int]:
    """How many anchors each key id signed in this deployment's database (none without one)."""
    try:
        engine = app.engine()
    except NotReadyError:  # no database yet (or none at this schema): nothing was signed in it
        return {}
    with engine.store.read() as tx:
        return tx.anchors.signers()


@keys.command("generate")
@click.option("--key-id", required=True, help="the name the trust root will have")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="private key file")
def generate(key_id: str, out: Path) -> None:
    """Make an Ed25519 key pair: the private key in --out (owner-only), the public key printed for trust roots."""
    pair = signing.generate(key_id)
    with new_output(out, "--out", mode=signing.PRIVATE_KEY_MODE) as file:
        file.write(signing.private_key_file(pair))
    render.err.print(f"private key written to {out} (owner-only); add the public key to jobgate.yaml:", markup=False)
    print(f"signing:\n  trust_roots:\n    {key_id}: {pair.public_b64}")


def _document(path: Path) -> tuple[str, dict[str, object]]:
    text = read_text(path)
    document = parse_json(text, source=str(path)) if path.suffix == ".json" else parse_yaml(text, source=str(path))
    if not isinstance(document, dict) or "job_definition_id" not in document:
        raise ValidationError("not a definition document (scenario files are not signed)", source=str(path))
    return text, document


@keys.command("sign")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@signing_key_options(key_id="the key's id, as the trust roots name it")
def sign(paths: tuple[Path, ...], key_id: str, key_file: Path) -> None:
    """Sign each definition file's content digest; the file keeps everything else as written."""
    private = key_file.read_text(encoding="ascii").strip()
    for path in definition_files(paths):
        try:
            text, document = _document(path)
        except ValidationError as exc:  # a scenario file in the folder: left as it is
            print(f"skipped {path}: {exc.message}")
            continue
        signature = signing.sign(content_digest(document), key_id, private)
        if path.suffix == ".json":
            document["signature"] = signature
            path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        else:
            block = yaml.safe_dump({"signature": signature}, sort_keys=True, default_flow_style=False)
            kept = _SIGNATURE_BLOCK.sub("", text)
            path.write_text(kept.rstrip("\n") + "\n" + block, encoding="utf-8")
        print(f"signed {path} ({document['job_definition_id']}) with {key_id}")


@keys.command("verify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@pass_app
def verify(app: AppContext, paths: tuple[Path, ...]) -> None:
    """Check each definition file's signature against the configured trust roots (exit 1 when one
    is not signed by a trust root). Scenario files (never signed) are listed as skipped; every
    file is checked, whatever came before."""
    signing_config = app.config().signing
    roots = signing_config.roots()
    failed = 0
    checked: list[dict[str, object]] = []
    for path in definition_files(paths):
        try:
            _, document = _document(path)
        except ValidationError as exc:
            checked.append({"file": str(path), "ok": None, "signed_by": None, "problem": exc.message})
            if not app.json_output:
                print(f"skipped {path}: {exc.message}")
            continue
        if document.get("signature") is None and not signing_config.require_signed_definitions:
            failed += 1
            problem = "not signed (signatures are not required here: it would be applied unsigned)"
            checked.append({"file": str(path), "ok": False, "signed_by": None, "problem": problem})
            if not app.json_output:
                print(f"UNSIGNED {path}: {problem}")
            continue
        try:
            key_id = signing.verify(
                content_digest(document), document.get("signature"), roots, what=str(document["job_definition_id"])
            )
            checked.append({"file": str(path), "ok": True, "signed_by": key_id, "problem": None})
            if not app.json_output:
                print(f"ok      {path}: signed by {key_id}")
        except ValidationError as exc:
            failed += 1
            checked.append({"file": str(path), "ok": False, "signed_by": None, "problem": exc.message})
            if not app.json_output:
                print(f"REFUSED {path}: {exc.message}")
    if app.json_output:
        render.emit_json(checked)
    if failed:
        raise ValidationError(f"{failed} of the files are not signed by a trust root", field="signature")


@keys.command("sign-licence")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@signing_key_options(
    key_id="the key's id, as the licence trust roots name it", key="the private key file of a licence trust root"
)
def sign_licence(path: Path, key_id: str, key_file: Path) -> None:
    """Sign a licence file (JSON: licence_id, holder, permissions, expires_at,
    max_concurrent_runs) for ``trust_gates.licence``."""
    from jobgate.governance.trust import licence_digest

    document = parse_json(read_text(path), source=str(path))
    if not isinstance(document, dict) or "licence_id" not in document:
        raise ValidationError("not a licence document (it names no licence_id)", source=str(path))
    document["signature"] = signing.sign(licence_digest(document), key_id, key_file.read_text(encoding="ascii").strip())
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"signed licence {document['licence_id']} with {key_id}")
