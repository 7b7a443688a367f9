"""Configuration profile -> ``ConfigSnapshot``: the immutable, digested configuration a run binds to.

A run records the snapshot id and digest it was created with (seed 000 §4, §13, §28: "replay
jobs must bind to configuration snapshots"), and its worker receives only that snapshot
(§56). The snapshot is a pure function of the profile's name and values: the same values
give the same digest and id on every host and in every replay, and any change of a value
gives a new snapshot, so "which configuration did this run use" always has one answer.
"""

from __future__ import annotations

import json
from typing import Any

from jobgate.config import JobgateConfig
from jobgate.core.canonical import canonical_json, digest
from jobgate.core.errors import ValidationError
from jobgate.core.models import ConfigSnapshot

SNAPSHOT_ID_PREFIX = "TGCFGSNAP-"
SNAPSHOT_ID_HEX_CHARS = 24


def resolve_snapshot(
    config: JobgateConfig,
    profile: str,
    tenant_id: str,
    overrides: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
) -> ConfigSnapshot:
    """Bind ``profile`` of ``config`` into a snapshot for ``tenant_id``.

    ``content`` is ``{"profile": name, "tenant_id": tenant, "values": values}``; ``config_digest``
    is its canonical digest and the id is ``TGCFGSNAP-`` plus the first 24 hex digits of that
    digest (96 bits: collisions are not a practical concern, and the id stays readable in logs).
    The tenant is part of what is bound, so two tenants never share a snapshot row (and
    tenant-scoped reads of snapshots always find their own). The values are deep-copied so a
    snapshot never aliases the live configuration.

    ``overrides`` (safe mode's tightened values) replace the profile's values of the same keys
    and are named in the content (``safe_mode_overrides``), so a run bound while safe mode was
    on says so in its snapshot, and its digest differs from the ordinary one. ``policy`` (the
    scheduler policy's id, version and digest) binds the run to the policy that admitted it.
    """
    if profile not in config.profiles:
        known = ", ".join(sorted(config.profiles))
        message = f"unknown configuration profile {profile!r} (known: {known})"
        raise ValidationError(message, field="config_profile")
    values = _frozen_copy(config.profiles[profile])
    content: dict[str, Any] = {"profile": profile, "tenant_id": tenant_id, "values": values}
    if overrides:
        values.update(_frozen_copy(overrides))
        content["safe_mode_overrides"] = sorted(overrides)
    if policy:
        content["scheduler_policy"] = dict(policy)
    config_digest = digest(content)
    hex_part = config_digest.split(":", 1)[1][:SNAPSHOT_ID_HEX_CHARS]
    return ConfigSnapshot(
        config_snapshot_id=SNAPSHOT_ID_PREFIX + hex_part,
        config_digest=config_digest,
        profile=profile,
        content=content,
        tenant_id=tenant_id,
    )


def watched_digest(snapshot: ConfigSnapshot, keys: tuple[str, ...]) -> str:
    """What a configuration schedule compares between activations: the whole snapshot's digest,
    or, when it watches ``keys`` (e.g. ``policy_bundle``), the digest of just those values (an
    absent key counts as null), so other edits to the profile do not fire it."""
    if not keys:
        return snapshot.config_digest
    values = snapshot.content["values"]
    return digest({"profile": snapshot.profile, "watch": {k: values.get(k) for k in sorted(keys)}})


def _frozen_copy(values: dict[str, Any]) -> dict[str, Any]:
    """A deep copy through canonical JSON: also proves the values have a canonical form."""
    copy: dict[str, Any] = json.loads(canonical_json(values))
    return copy
