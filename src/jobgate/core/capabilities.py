"""A worker's capability: one definition version, as the worker found it when it probed whether
it can execute it here (``runtime.capabilities``). Pure data, read by the doctor and the
console from the workers' rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The fields of a refusal that mean "not on this host": its code, its runners and targets, and
# the names a definition takes from the configuration (its class, its policies, its profile).
# A worker whose jobgate.yaml is older than the one the definition was applied with (a policy
# added since, not yet rolled out to every host) hands such a run back for a worker that knows
# the name; failing it would end, for good, a run that was admitted and never ran.
HOST_FIELDS = frozenset(
    {"handler", "runner", "target_engine_meid", "job_class", "retry_policy", "timeout_policy", "sla_policy",
     "config_profile"}
)  # fmt: skip


@dataclass(frozen=True)
class Capability:
    """One definition version as this worker found it."""

    tenant_id: str
    job_definition_id: str
    runnable: bool
    reason: str | None = None  # why not, when not runnable
    code_digest: str | None = None  # what it would run, when readable

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tenant": self.tenant_id, "job": self.job_definition_id, "runnable": self.runnable}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.code_digest is not None:
            out["code_digest"] = self.code_digest
        return out


def advertised(entry: Mapping[str, Any]) -> Capability:
    """A capability as a worker's row holds it (``Capability.as_json``)."""
    return Capability(
        str(entry.get("tenant", "")),
        str(entry.get("job", "")),
        bool(entry.get("runnable")),
        entry.get("reason"),
        entry.get("code_digest"),
    )
