"""The ``tracing`` section of ``jobgate.yaml``: whether attempts emit OpenTelemetry spans, and where.

Checked when the configuration is read: asking for spans without the optional packages is a
configuration error naming the key. The spans themselves are ``runtime.otel``'s.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Literal

from jobgate.documents import Reader

Exporter = Literal["otlp", "console", "none"]
EXPORTERS: tuple[Exporter, ...] = ("otlp", "console", "none")
_PACKAGES = {"otlp": ("opentelemetry.exporter.otlp.proto.http", "opentelemetry-exporter-otlp-proto-http")}


@dataclass(frozen=True)
class TracingSettings:
    """The ``tracing`` section of ``jobgate.yaml``."""

    otel: bool = False
    exporter: Exporter = "otlp"
    endpoint: str | None = None  # OTLP/HTTP traces URL; None: the exporter's environment or default
    service_name: str = "jobgate"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def parse_tracing_settings(r: Reader, value: Any) -> TracingSettings:
    """The ``tracing`` section, checked now: asking for spans without the extra installed is
    a configuration error naming the key, not a surprise at the first run."""
    if value is None:
        return TracingSettings()
    doc = r.mapping(value, "tracing")
    r.only_keys(doc, "tracing", ("otel", "exporter", "endpoint", "service_name"))
    otel = r.boolean(doc["otel"], "tracing.otel") if "otel" in doc else False
    exporter = doc.get("exporter", "otlp")
    if exporter not in EXPORTERS:
        r.fail("tracing.exporter", f"must be one of: {', '.join(EXPORTERS)}")
    endpoint = None
    if doc.get("endpoint") is not None:
        endpoint = r.http_url(doc["endpoint"], "tracing.endpoint")
    service = r.string(doc["service_name"], "tracing.service_name") if "service_name" in doc else "jobgate"
    if otel:
        needed = ["opentelemetry.sdk"] if exporter != "none" else ["opentelemetry.trace"]
        if not all(installed(m) for m in needed):
            r.fail("tracing.otel", "needs the optional extra: pip install 'jobgate[otel]' (OpenTelemetry is missing)")
        if exporter in _PACKAGES and not installed(_PACKAGES[exporter][0]):
            package = _PACKAGES[exporter][1]
            r.fail("tracing.exporter", f"{exporter} needs the package {package} (pip install 'jobgate[otel]')")
    return TracingSettings(otel, exporter, endpoint, service)
