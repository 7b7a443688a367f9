"""Profile -> ConfigSnapshot: pure, digested, and the same on every host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobgate.config import JobgateConfig, build_config
from jobgate.core.canonical import digest
from jobgate.core.errors import ValidationError
from jobgate.service.snapshots import resolve_snapshot


def test_snapshot_of_a_profile(demo_config: JobgateConfig) -> None:
    snap = resolve_snapshot(demo_config, "production_scheduler_v1", "acme")
    values = demo_config.profiles["production_scheduler_v1"]
    assert snap.content == {"profile": "production_scheduler_v1", "tenant_id": "acme", "values": values}
    assert snap.config_digest == digest(snap.content)
    assert re.fullmatch(r"TGCFGSNAP-[0-9a-f]{24}", snap.config_snapshot_id)
    assert snap.config_snapshot_id == "TGCFGSNAP-" + snap.config_digest.removeprefix("sha256:")[:24]
    assert (snap.profile, snap.tenant_id) == ("production_scheduler_v1", "acme")


def test_snapshots_are_deterministic_and_value_sensitive(tmp_path: Path) -> None:
    def config(values: dict[str, object]) -> JobgateConfig:
        return build_config({"profiles": {"p": values}}, base_dir=tmp_path, path=None)

    first = resolve_snapshot(config({"a": 1, "b": [1, 2]}), "p", "t")
    again = resolve_snapshot(config({"b": [1, 2], "a": 1}), "p", "t")
    changed = resolve_snapshot(config({"a": 2, "b": [1, 2]}), "p", "t")
    assert first == again
    assert changed.config_digest != first.config_digest
    assert changed.config_snapshot_id != first.config_snapshot_id


def test_default_profile_always_exists(tmp_path: Path) -> None:
    snap = resolve_snapshot(build_config({}, base_dir=tmp_path, path=None), "default", "default")
    assert snap.content == {"profile": "default", "tenant_id": "default", "values": {}}


def test_profile_name_is_part_of_the_digest(tmp_path: Path) -> None:
    config = build_config({"profiles": {"a": {"x": 1}, "b": {"x": 1}}}, base_dir=tmp_path, path=None)
    assert resolve_snapshot(config, "a", "t").config_digest != resolve_snapshot(config, "b", "t").config_digest


def test_unknown_profile(demo_config: JobgateConfig) -> None:
    with pytest.raises(ValidationError) as caught:
        resolve_snapshot(demo_config, "staging", "t")
    assert caught.value.field == "config_profile"
    assert "unknown configuration profile 'staging'" in caught.value.message


def test_snapshot_does_not_alias_the_configuration(tmp_path: Path) -> None:
    config = build_config({"profiles": {"p": {"nested": {"a": 1}}}}, base_dir=tmp_path, path=None)
    snap = resolve_snapshot(config, "p", "t")
    snap.content["values"]["nested"]["a"] = 2
    assert config.profiles["p"]["nested"]["a"] == 1
