"""``jobgate evidence export|verify``: the evidence of a run, workflow run, definition or period as
a zip, checked offline."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jobgate.cli import render
from jobgate.cli.args import new_output, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.errors import ValidationError
from jobgate.evidence import keys as evidence_keys
from jobgate.governance import signing

if TYPE_CHECKING:
    from jobgate.export.bundles import BundleCheck


@click.group("evidence")
def evidence_group() -> None:
    """Evidence bundles: export a run's record, verify one anywhere."""


@evidence_group.command("export")
@click.argument("run_id", required=False)
@click.option("--workflow", "workflow_run_id", help="a workflow run and its steps' runs")
@click.option("--definition", "job_definition_id", help="every run of a definition (with --from/--to: in that period)")
@click.option("--from", "start", help="runs created at or after this instant (ISO 8601, with its zone)")
@click.option("--to", "end", help="... and before this one")
@tenant_option(default=None, help="the tenant (a run's own by default; else default)")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="the zip to write")
@pass_app
def export(
    app: AppContext,
    run_id: str | None,
    workflow_run_id: str | None,
    job_definition_id: str | None,
    start: str | None,
    end: str | None,
    tenant: str | None,
    out: Path,
) -> None:
    """Write the evidence of a run (RUN_ID), a workflow run, a definition or a period as one zip
    that ``jobgate evidence verify`` checks anywhere: the records' rows, their seals and proofs,
    the audit entries and their signed anchors."""
    from jobgate.export.bundles import build_bundle, run_scope
    from jobgate.export.scope import ExportScope
    from jobgate.service.schedules import parse_instant

    engine = app.engine()
    with new_output(out, "--out") as file:
        if run_id and not (workflow_run_id or job_definition_id or start or end):
            scope = run_scope(engine, run_id, tenant)
        else:
            scope = ExportScope(
                tenant_id=tenant or "default",
                job_run_id=run_id,
                workflow_run_id=workflow_run_id,
                job_definition_id=job_definition_id,
                start=None if start is None else parse_instant(start, field="--from"),
                end=None if end is None else parse_instant(end, field="--to"),
            )
        data = build_bundle(engine, scope)
        file.write(data)
    signer = evidence_keys.signer_for(engine.config)
    signed = f"signed by {signer.key_id}" if signer else "unsigned (no evidence key: jobgate keys evidence --create)"
    runs = sum(1 for name in _names(data) if name.startswith("runs/"))
    if app.json_output:
        render.emit_json(
            {"file": str(out), "bytes": len(data), "runs": runs, "signed_by": signer.key_id if signer else None}
        )
        return
    render.err.print(f"{out}: {len(data)} bytes, {runs} run(s), {signed}", markup=False)


def _names(data: bytes) -> list[str]:
    import io
    import zipfile

    return zipfile.ZipFile(io.BytesIO(data)).namelist()


@evidence_group.command("verify")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--public-key", "keys", multiple=True, metavar="KEY_ID=BASE64", help="the signer's public key")
@click.option("--allow-unsigned", is_flag=True, help="without a trusted key, report UNSIGNED but exit 0")
@click.option(
    "--tsa-ca",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="PEM roots of the timestamping authority: every batch anchor's RFC 3161 token must verify, and the manifest's",
)
@click.option(
    "--anchor-window",
    type=click.FloatRange(min=1),
    help="the deployment's anchor window in seconds (default: the one the manifest states): entries older than two"
    " windows before the export must carry their proof",
)
@pass_app
def verify(
    app: AppContext,
    bundle: Path,
    keys: tuple[str, ...],
    allow_unsigned: bool,
    tsa_ca: Path | None,
    anchor_window: float | None,
) -> None:
    """Check a bundle with nothing but the bundle and the signer's public key; exit 1 naming
    every file that fails. Without a key nobody vouches for the bundle, whatever signature it
    carries (a rewritten bundle can carry a rogue one): UNSIGNED, exit 1 unless --allow-unsigned.
    With --tsa-ca, each anchor's timestamp token is checked too (who stamped it, and when)."""
    from jobgate.evidence.timestamping import TimestampTrust, load_roots
    from jobgate.export.bundles import verify_bundle

    public = {}
    for item in keys:
        key_id, sep, value = item.partition("=")  # base64 may end in '=': the id is before the first
        if not sep or not key_id or not value:
            raise ValidationError(f"{item!r} is not KEY_ID=BASE64", field="--public-key")
        signing.public_key(value, field="--public-key")  # a value that is no Ed25519 key: said here
        public[key_id] = value
    stamps = None if tsa_ca is None else TimestampTrust(load_roots(tsa_ca, field="--tsa-ca"))
    window = None if anchor_window is None else timedelta(seconds=anchor_window)
    result = verify_bundle(bundle.read_bytes(), public_keys=public or None, timestamps=stamps, anchor_window=window)
    status = "failed" if not result.ok else "ok" if result.signed_by else "unsigned"
    if app.json_output:
        render.emit_json(
            {
                "bundle": str(bundle),
                "status": status,
                "signed_by": result.signed_by,
                "anchors_checked": result.anchors_checked,
                "timestamps_checked": result.timestamps_checked if stamps is not None else None,
                "notes": list(result.notes),
                "problems": list(result.problems),
            }
        )
    else:
        _print_verified(bundle, result, checked_stamps=stamps is not None)
    if status == "failed":
        raise ValidationError(f"{len(result.problems)} problem(s) in {bundle}", field="bundle")
    if status == "unsigned" and not allow_unsigned:
        raise ValidationError(
            "give the signer's key with --public-key KEY_ID=BASE64 (or --allow-unsigned)", field="--public-key"
        )


def _print_verified(bundle: Path, result: BundleCheck, *, checked_stamps: bool) -> None:
    for note in result.notes:
        print(f"note: {note}")
    if result.ok and result.signed_by:
        checked = f"{result.anchors_checked} anchor signature(s)"
        if checked_stamps:
            checked += f", {result.timestamps_checked} timestamp token(s)"
        print(f"ok: {bundle} (signed by {result.signed_by}; {checked} checked)")
    elif result.ok:
        print(f"UNSIGNED: {bundle}: consistent in itself, but no trusted key was given, so nothing vouches for it")
    for problem in result.problems:
        print(f"FAILED {problem}")
