"""``docs/catalogue.md`` stays honest: every event type and every metric family in the code has
its row, each event row lists exactly the fields of its contract and names that contract, and
each metric row its type and labels. The sets taken from the code are checked to be non-empty
first, so a parser that finds nothing cannot pass."""

from __future__ import annotations

import re
from pathlib import Path

from jobgate.contracts import contract_ids, event_contract, schema
from jobgate.core.events import EventType
from jobgate.telemetry.metrics import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "jobgate"
TICKED = re.compile(r"`([^`]+)`")
ENVELOPE = {"event_id", "recorded_at", "alert_id", "event_type"}
# A metric family made in code, by any prometheus_client constructor, with its name literal.
_METRIC = re.compile(
    r"\b(Counter|Gauge|Histogram|Summary|(?:Counter|Gauge|Histogram|GaugeHistogram|Summary)MetricFamily)\(\s*\"([a-z_:]+)\""
)
_KIND = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}
_LABELS = re.compile(r"\[\s*((?:\"[a-z_]+\"\s*,?\s*)+)\]")


def table(section: str) -> list[list[str]]:
    """The rows of the first table under ``## <section>``, as lists of cells (header excluded)."""
    text = (ROOT / "docs" / "catalogue.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert len(rows) > 2, f"no table under {section}"
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def events_in_code() -> set[str]:
    """The EventType members and any ``trustgate.scheduler.*`` name written elsewhere in code."""
    found = {t.value for t in EventType}
    for path in SOURCE.rglob("*.py"):
        for name in re.findall(r"\"trustgate\.scheduler\.([a-z_]+)\"", path.read_text(encoding="utf-8")):
            found.add("job_dead_lettered" if name == "dead_lettered" else name)
    return found


def metrics_in_code() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Exposed name -> (type, labels): the telemetry CATALOGUE, and every other family constructed
    with a literal name anywhere in the package (counters exposed with ``_total``)."""
    found = {f.name: (f.kind, f.labels) for f in CATALOGUE}
    for path in SOURCE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for match in _METRIC.finditer(text):
            constructor, name = match.groups()
            kind = _KIND.get(constructor) or constructor.removesuffix("MetricFamily").lower()
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            if name in found:
                continue
            labels = _LABELS.search(text, match.end(), match.end() + 300)
            found[name] = (kind, tuple(re.findall(r"\"([a-z_]+)\"", labels.group(1))) if labels else ())
    return found


def test_every_event_type_in_the_code_is_catalogued_with_its_contract_s_fields() -> None:
    code = events_in_code()
    assert len(code) >= 20 and "job_started" in code and "sla_breach" in code
    rows = {TICKED.findall(row[0])[0]: row for row in table("Events")}
    assert code <= set(rows), f"missing from docs/catalogue.md: {sorted(code - set(rows))}"
    assert set(rows) <= code, f"catalogued but not emitted: {sorted(set(rows) - code)}"
    for event_type, row in rows.items():
        csi_id = event_contract(event_type)
        assert csi_id in contract_ids() and TICKED.findall(row[3])[0] == csi_id, event_type
        listed = set(TICKED.findall(row[2]))
        fields = set(schema(csi_id)["properties"]) - ENVELOPE
        assert listed == fields, f"{event_type}: catalogue {sorted(listed ^ fields)} differ from {csi_id}"


def test_every_metric_in_the_code_is_catalogued_with_its_type_and_labels() -> None:
    code = metrics_in_code()
    assert len(code) >= 14
    assert {"tg_scheduler_job_created_total", "tg_scheduler_queue_depth", "jobgate_http_requests_total"} <= set(code)
    rows = {TICKED.findall(row[0])[0]: row for row in table("Metrics")}
    assert set(code) <= set(rows), f"missing from docs/catalogue.md: {sorted(set(code) - set(rows))}"
    assert set(rows) <= set(code), f"catalogued but not in the code: {sorted(set(rows) - set(code))}"
    for name, (kind, labels) in code.items():
        row = rows[name]
        assert row[1] == kind, name
        assert tuple(TICKED.findall(row[2])) == labels, name


def test_every_contract_is_catalogued() -> None:
    catalogued = {TICKED.findall(row[0])[0] for row in table("Inputs and outputs")}
    catalogued |= {TICKED.findall(row[3])[0] for row in table("Events")}
    assert len(catalogued) > 30 and catalogued == set(contract_ids())
