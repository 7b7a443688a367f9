"""``jobgate packs publish|list``, ``jobgate export FILE`` and ``jobgate import FILE``: the pack
registry and the offline seed, for air-gapped promotion (dev -> test -> prod).

The same operations as ``/api/v1/packs`` and ``/api/v1/{export,import}/offline-seed``
(``packs.registry``), run against this host's database: the operator on the server may import
definitions with Python handlers, which the API refuses.
"""

from __future__ import annotations

from pathlib import Path

import click

from jobgate.cli import render
from jobgate.cli.args import new_output, os_user, tenant_option
from jobgate.cli.context import AppContext, pass_app

TENANT = tenant_option(help="the tenant whose registry it is")


@click.group("packs")
def packs_group() -> None:
    """Versioned packs of definitions and their approvals: publish, list."""


@packs_group.command("publish")
@click.argument("pack")
@click.argument("definitions", nargs=-1, required=True)
@TENANT
@pass_app
def publish(app: AppContext, pack: str, definitions: tuple[str, ...], tenant: str) -> None:
    """Store PACK (<id>@<version>) holding the current versions of DEFINITIONS and their
    approvals; the same content again is a no-op, other content under PACK is refused (409)."""
    from jobgate.core.packs import parse_ref
    from jobgate.packs import registry

    done = registry.publish(app.engine(), tenant, parse_ref(pack, "PACK"), definitions, actor=os_user())
    if app.json_output:
        render.emit_json({"pack": done.record.ref.key, "digest": done.record.digest, "created": done.created})
        return
    state = "published" if done.created else "unchanged (already stored)"
    print(f"{done.record.ref.key} {done.record.digest} {state}")


@packs_group.command("list")
@TENANT
@pass_app
def list_command(app: AppContext, tenant: str) -> None:
    """The tenant's packs."""
    from jobgate.packs import registry

    rows = [
        {
            "pack": r.ref.key,
            "digest": r.digest,
            "origin": r.origin,
            "definitions": len(r.manifest["definitions"]),
            "approvals": len(r.manifest["approvals"]),
            "created_by": r.created_by,
        }
        for r in registry.list_packs(app.engine(), tenant)
    ]
    render.records(app.json_output, "Packs", rows)


@click.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@TENANT
@pass_app
def export_command(app: AppContext, file: Path, tenant: str) -> None:
    """Write the tenant's pack registry as an offline seed (a ZIP, signed with the evidence key).

    ``jobgate import`` on another deployment that trusts this one's evidence key
    (``packs.trusted_keys``) imports it."""
    from jobgate.packs import registry

    engine = app.engine()
    with new_output(file, "FILE") as out:
        data = registry.export_seed(engine, tenant, actor=os_user())
        out.write(data)
    from jobgate.evidence import keys as evidence_keys

    signer = evidence_keys.signer_for(engine.config)
    if app.json_output:
        render.emit_json({"file": str(file), "bytes": len(data), "signed_by": signer.key_id if signer else None})
        return
    signed = "signed" if signer else "UNSIGNED (no evidence key: jobgate keys evidence --create); no importer takes it"
    render.err.print(f"{file}: {len(data)} bytes, {signed}", markup=False)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@TENANT
@pass_app
def import_command(app: AppContext, file: Path, tenant: str) -> None:
    """Import a verified offline seed into the tenant; a refused archive writes nothing but the
    refusal to the audit log.

    The archive must be signed by a key in ``packs.trusted_keys``; its definitions are applied as
    ``jobgate apply`` applies them and arrive unapproved unless ``packs.import_approvals`` is set."""
    from jobgate.packs import registry
    from jobgate.plugins.admission import admit as admit_plugins

    admit_plugins(app.config().plugins)  # as apply: a carried definition may name an admitted plugin's handler
    engine = app.engine()
    done = registry.import_seed(engine, tenant, file.read_bytes(), actor=os_user())
    # Approved now: by the archive's approvals, or already here (the same digest approved before).
    keys = [(tenant, str(d["job_definition_id"]), str(d["digest"])) for d in done.definitions]
    with engine.store.read(tenant_id=tenant) as tx:
        active = tx.approvals_active(keys) if keys else {}
    if app.json_output:
        render.emit_json(
            {
                "signed_by": done.signed_by,
                "packs": [
                    {"pack": p.record.ref.key, "digest": p.record.digest, "created": p.created} for p in done.packs
                ],
                "definitions": done.definitions,
                "approved": done.approved,
                "skipped": done.skipped,
                "notes": done.notes,
            }
        )
        return
    for p in done.packs:
        print(f"{p.record.ref.key} {p.record.digest} {'imported' if p.created else 'unchanged'}")
    for d in done.definitions:
        key = (tenant, str(d["job_definition_id"]), str(d["digest"]))
        state = (
            "unapproved"
            if key not in active
            else "approved"
            if d["job_definition_id"] in done.approved
            else "approved here"
        )
        print(f"  {d['job_definition_id']} v{d['version']} {d['digest']} {state}")
    for left in done.skipped:
        print(f"  {left['job_definition_id']} left as it is: {left['reason']}")
    for note in done.notes:
        print(f"  note: {note}")
    print(f"verified: signed by {done.signed_by}")
