"""``jobgate plugins sign|verify|list``: the workflow for signed optional plugins.

``sign`` writes a detached signature ``F.sig`` beside every file ``F`` of a plugin package (the
key from ``jobgate keys generate``; its public half goes under ``plugins.trust_roots``);
``verify`` checks plugins as startup admission will, importing nothing; ``list`` shows the
job-kind catalogue and the plugins this host can see, enabled or not.
"""

from __future__ import annotations

from pathlib import Path

import click

from jobgate.cli import render
from jobgate.cli.args import signing_key_options
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.errors import ValidationError
from jobgate.core.job_kinds import CATALOG
from jobgate.plugins.bundle import PluginRefused, PluginSource, discover, sign_plugin, verify_plugin


@click.group("plugins")
def plugins() -> None:
    """Optional plugins: sign, verify, list (with the job kinds). Plugins run only when enabled
    in ``plugins.enabled`` and signed file by file by a key of ``plugins.trust_roots``."""


@plugins.command("sign")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@signing_key_options(key_id="the trust root's name in plugins.trust_roots")
@click.option("--name", help="the plugin's name when it differs from the folder's (an entry point's name)")
def sign(folder: Path, key_id: str, key_file: Path, name: str | None) -> None:
    """Sign every file of the plugin package FOLDER (FILE.sig beside each; existing ones replaced)."""
    if not (folder / "__init__.py").is_file():
        raise ValidationError(f"{folder} is not a Python package (it has no __init__.py)", field="FOLDER")
    source = PluginSource(name or folder.name, folder.name, "directory", folder)
    signed = sign_plugin(source, key_id, key_file.read_text(encoding="ascii").strip())
    print(f"signed {len(signed)} files of plugin {source.name} with {key_id}")


@plugins.command("verify")
@click.argument("names", nargs=-1)
@pass_app
def verify(app: AppContext, names: tuple[str, ...]) -> None:
    """Verify the named plugins (default: the enabled ones) as startup admission will, importing
    nothing (exit 1 when any is refused)."""
    settings = app.config().plugins
    found = discover(settings.directory)
    roots = settings.roots()
    failed = 0
    checked: list[dict[str, object]] = []

    def say(entry: dict[str, object], line: str) -> None:
        checked.append(entry)
        if not app.json_output:
            print(line)

    for name in names or settings.enabled:
        source = found.get(name)
        if source is None:
            failed += 1
            why = "not found in plugins.directory or entry points"
            say({"plugin": name, "ok": False, "files": 0, "signed_by": [], "problem": why}, f"REFUSED {name}: {why}")
            continue
        try:
            files = verify_plugin(source, roots, allow_unsigned=settings.allow_unsigned)
        except PluginRefused as exc:
            failed += 1
            say(
                {"plugin": name, "ok": False, "files": 0, "signed_by": [], "problem": exc.message},
                f"REFUSED {exc.message}",
            )
            continue
        signers = sorted({f.key_id for f in files if f.key_id})
        keys = ", ".join(signers) or "nobody (allow_unsigned)"
        entry: dict[str, object] = {
            "plugin": name,
            "ok": True,
            "files": len(files),
            "signed_by": signers,
            "problem": None,
        }
        say(entry, f"ok      {name}: {len(files)} files signed by {keys}")
    if app.json_output:
        render.emit_json(checked)
    elif not checked:
        print("no plugins to verify: none named, and none enabled (plugins.enabled in jobgate.yaml)")
    if failed:
        raise ValidationError(f"{failed} plugins would be refused at startup", field="plugins")


@plugins.command("list")
@pass_app
def list_command(app: AppContext) -> None:
    """The job-kind catalogue, then every plugin this host can see and whether it is enabled."""
    settings = app.config().plugins
    rows = [{"name": k.name, "class": k.kind_class.value, "state": "", "description": k.description}
            for k in CATALOG.values()]  # fmt: skip
    for name, source in sorted(discover(settings.directory).items()):
        state = "enabled" if name in settings.enabled else "disabled"
        rows.append({"name": name, "class": "optional-plugin", "state": state, "description": source.origin})
    render.records(app.json_output, "job kinds and plugins", rows)
