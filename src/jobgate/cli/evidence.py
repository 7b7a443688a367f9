"""``jobgate evidence export|verify``: one run's evidence as a zip, checked offline."""

from __future__ import annotations

from pathlib import Path

import click

from jobgate import evidence_keys
from jobgate.cli import render
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.errors import ValidationError


@click.group("evidence")
def evidence_group() -> None:
    """Evidence bundles: export a run's record, verify one anywhere."""


@evidence_group.command("export")
@click.argument("run_id")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="the zip to write")
@pass_app
def export(app: AppContext, run_id: str, out: Path) -> None:
    from jobgate.evidence import build_bundle, write_bundle

    engine = app.engine()
    data = build_bundle(engine, run_id)
    write_bundle(out, data)
    signer = evidence_keys.signer_for(engine.config)
    signed = f"signed by {signer.key_id}" if signer else "unsigned (no evidence key: jobgate keys evidence --create)"
    render.err.print(f"{out}: {len(data)} bytes, {signed}", markup=False)


@evidence_group.command("verify")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--public-key", "keys", multiple=True, metavar="KEY_ID=BASE64", help="the signer's public key")
@click.option("--allow-unsigned", is_flag=True, help="without a trusted key, report UNSIGNED but exit 0")
def verify(bundle: Path, keys: tuple[str, ...], allow_unsigned: bool) -> None:
    """Check a bundle with nothing but the bundle and the signer's public key; exit 1 naming
    every file that fails. Without a key nobody vouches for the bundle, whatever signature it
    carries (a rewritten bundle can carry a rogue one): UNSIGNED, exit 1 unless --allow-unsigned."""
    from jobgate.evidence import verify_bundle

    public = {}
    for item in keys:
        key_id, sep, value = item.partition("=")
        if not sep:
            raise ValidationError(f"{item!r} is not KEY_ID=BASE64", field="--public-key")
        public[key_id] = value
    result = verify_bundle(bundle.read_bytes(), public_keys=public or None)
    if result.ok and result.signed_by:
        print(f"ok: {bundle} (signed by {result.signed_by})")
        return
    if result.ok:
        line = f"UNSIGNED: {bundle}: consistent in itself, but no trusted key was given, so nothing vouches for it"
        print(line)
        if allow_unsigned:
            return
        raise ValidationError(
            "give the signer's key with --public-key KEY_ID=BASE64 (or --allow-unsigned)", field="--public-key"
        )
    for problem in result.problems:
        print(f"FAILED {problem}")
    raise ValidationError(f"{len(result.problems)} problem(s) in {bundle}", field="bundle")
