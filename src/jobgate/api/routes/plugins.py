"""Plugin diagnostics (seed 001 §4.4): ``GET /internal/plugins/status`` and
``POST /internal/plugins/probe``.

Unlike the seed (where the route group is anonymous and only its ``/internal`` path keeps it in),
both are the admin's (``ADMIN``): which code runs on the host, and whose keys admitted it, is
for the people who operate the deployment, wherever the request comes from. Neither takes input
that could name a file or a plugin: status reports what this process's admission decided, and
the probe re-reads ``jobgate.yaml`` from disk (as a restart would) and checks the plugins it
enables, importing, creating and running nothing. Paths are reported relative to the plugin.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from jobgate.api.access import ADMIN, allow, whole_tenant
from jobgate.api.server_state import ServerState, server_state
from jobgate.config import load_config
from jobgate.config.plugins import PluginSettings
from jobgate.core.errors import ValidationError
from jobgate.core.job_kinds import CATALOG
from jobgate.plugins.admission import AdmissionReport, PluginState, current, probe
from jobgate.service.tokens import Principal

router = APIRouter(prefix="/internal/plugins", tags=["plugins"])


# The catalogue is what every run of the tenant may use: a token limited to definitions is refused,
# as on every route about the whole tenant.
Caller = Annotated[Principal, Depends(whole_tenant)]
State = Annotated[ServerState, Depends(server_state)]


class JobKindOut(BaseModel):
    name: str
    kind_class: str = Field(description="built-in, optional-plugin, declarative or placeholder")
    description: str
    executable: bool = Field(description="whether runs of this kind can execute on this host now")


class PluginOut(BaseModel):
    name: str
    package: str = Field(description="the package handlers name (package.module:function)")
    origin: str = Field(description="directory or entry-point")
    state: str = Field(description="admitted, disabled or refused")
    files: list[str] = Field(description="the files verified, relative to the plugin")
    signed_by: list[str] = Field(description="the trust roots whose signatures admitted them")
    unsigned: list[str] = Field(description="files admitted without a signature (plugins.allow_unsigned)")
    reason: str | None = None


class PluginStatusOut(BaseModel):
    admission_ran: bool = Field(description="false where this process never ran plugin admission")
    enforce_signatures: bool
    enabled: list[str]
    job_kinds: list[JobKindOut]
    plugins: list[PluginOut]


class PluginProbeOut(BaseModel):
    valid: bool = Field(description="whether a restart with the configuration on disk would admit its plugins")
    error: str | None = None
    plugins: list[PluginOut]


def _plugin(p: PluginState) -> PluginOut:
    return PluginOut(
        name=p.name,
        package=p.package,
        origin=p.origin,
        state=p.state,
        files=list(p.files),
        signed_by=list(p.signed_by),
        unsigned=list(p.unsigned),
        reason=p.reason,
    )


def _kinds(report: AdmissionReport) -> list[JobKindOut]:
    kinds = [JobKindOut(name=k.name, kind_class=k.kind_class.value, description=k.description,
                        executable=k.provider is not None) for k in CATALOG.values()]  # fmt: skip
    kinds += [
        JobKindOut(name=p.name, kind_class="optional-plugin", description=f"plugin package {p.package}",
                   executable=p.state == "admitted")
        for p in report.plugins if p.name not in CATALOG
    ]  # fmt: skip
    return kinds


@router.get("/status", response_model=PluginStatusOut)
@allow(ADMIN)
def plugin_status(caller: Caller, state: State) -> PluginStatusOut:
    """The job-kind catalogue and every discovered plugin as this process's admission left it."""
    report = current()
    settings = state.engine.config.plugins
    return PluginStatusOut(
        admission_ran=report.ran,
        enforce_signatures=settings.enforce_signatures,
        enabled=list(settings.enabled),
        job_kinds=_kinds(report),
        plugins=[_plugin(p) for p in report.plugins],
    )


@router.post("/probe", response_model=PluginProbeOut)
@allow(ADMIN)
def plugin_probe(caller: Caller, state: State) -> PluginProbeOut:
    """Check the plugin configuration on disk and the files it enables, as a restart would,
    without importing a plugin or creating anything; a refusal is the answer, not an error."""
    config = state.engine.config
    settings: PluginSettings = config.plugins
    if config.path is not None:
        try:
            settings = load_config(config.path).plugins
        except ValidationError as exc:
            return PluginProbeOut(valid=False, error=str(exc), plugins=[])  # names the key
    report = probe(settings)
    refused = [p for p in report.plugins if p.state == "refused"]
    return PluginProbeOut(
        valid=not refused,
        error=refused[0].reason if refused else None,
        plugins=[_plugin(p) for p in report.plugins],
    )
