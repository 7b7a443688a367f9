"""``jobgate contracts list|validate|check-events``: documents against the seed §41 CSI contracts.

No database and no configuration: a contract check is about a document alone, so it works on
any host that has jobgate installed, e.g. on a file another engine is about to send.
"""

from __future__ import annotations

from pathlib import Path

import click

from jobgate.cli import render
from jobgate.contracts import ContractError, Violation, contract_ids, event_contract, schema, violations
from jobgate.core.errors import ValidationError
from jobgate.documents import parse_json, parse_yaml, read_text


@click.group("contracts")
def contracts_group() -> None:
    """The CSI contracts (JSON Schemas) and checking documents against them."""


@contracts_group.command("list")
def list_contracts() -> None:
    """Every contract this jobgate ships, with its title."""
    render.table("contracts", ["csi id", "title"], [(c, schema(c)["title"]) for c in contract_ids()])


@contracts_group.command("validate")
@click.argument("csi_id")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate_file(csi_id: str, file: Path) -> None:
    """Check one document (JSON or YAML) against CSI_ID; exit 1 naming every violation."""
    text = read_text(file)
    document = parse_json(text, source=str(file)) if file.suffix == ".json" else parse_yaml(text, source=str(file))
    _report(csi_id, violations(csi_id, document), what=str(file))
    print(f"ok: {file} conforms to {csi_id}")


@contracts_group.command("check-events")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check_events(file: Path) -> None:
    """Check every event of a JSON-lines file (``events.jsonl``) against its event's contract."""
    count = 0
    for number, line in enumerate(read_text(file).splitlines(), start=1):
        if not line.strip():
            continue
        event = parse_json(line, source=f"{file}:{number}")
        if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
            raise ValidationError("not an event: an object with an event_type", source=f"{file}:{number}")
        csi_id = event_contract(event["event_type"])
        _report(csi_id, violations(csi_id, event), what=f"{file}:{number}")
        count += 1
    print(f"ok: {count} events in {file} conform to their contracts")


def _report(csi_id: str, found: list[Violation], *, what: str) -> None:
    if not found:
        return
    if len(found) > 1:  # the error line names the first; list them all
        for v in found:
            render.err.print(f"{what}: {v}", markup=False)
    raise ContractError(csi_id, found)
