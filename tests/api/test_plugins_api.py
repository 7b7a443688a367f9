"""``GET /internal/plugins/status`` and ``POST /internal/plugins/probe``: the admin's, whoever
asks from wherever; the probe re-reads jobgate.yaml and the plugin files, and imports, creates
and runs nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.api.conftest import ACME_JOB, World, build_world

from helpers import config_document, count
from jobgate.config import load_config
from jobgate.core.tokens import Role
from jobgate.plugins import admission
from jobgate.service import tokens
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from plugin_kit import Kit, forgetting_plugins, make_kit


@pytest.fixture
def plugged(database_url: str, tmp_path: Path) -> Iterator[tuple[World, Kit, str, Path]]:
    """A server whose jobgate.yaml (on disk) enables one signed plugin; a second is signed but
    not enabled. Yields the world, the kit, the config file and the disabled plugin's marker."""
    with forgetting_plugins():
        kit = make_kit(tmp_path)
        enabled, _ = kit.plugin()
        disabled, marker = kit.plugin()
        kit.sign(enabled)
        kit.sign(disabled)
        path = tmp_path / "jobgate.yaml"
        path.write_text(yaml.safe_dump(config_document(tmp_path, plugins=kit.section(enabled))))
        config = load_config(path)
        admission.admit(config.plugins)
        store = Store(database_url)
        world = build_world(Engine(store, config))
        with world.client:
            yield world, kit, enabled, marker
        store.dispose()


def _admin(w: World) -> dict[str, str]:
    return w.headers("acme", Role.ADMIN)


def test_status_reports_the_catalogue_and_each_plugins_admission(plugged: tuple[World, Kit, str, Path]) -> None:
    w, kit, enabled, _ = plugged
    body = w.client.get("/internal/plugins/status", headers=_admin(w)).json()
    assert body["admission_ran"] is True and body["enforce_signatures"] is True and body["enabled"] == [enabled]
    kinds = {k["name"]: (k["kind_class"], k["executable"]) for k in body["job_kinds"]}
    assert kinds["python"] == ("built-in", True) and kinds["scan"] == ("placeholder", False)
    assert kinds[enabled] == ("optional-plugin", True)
    states = {p["name"]: p for p in body["plugins"]}
    assert states[enabled]["state"] == "admitted" and states[enabled]["signed_by"] == ["plugin-release"]
    assert [p["state"] for n, p in states.items() if n != enabled] == ["disabled"]
    assert str(kit.directory) not in str(body)  # files are named relative to their plugin


def test_the_probe_checks_the_files_on_disk_and_creates_and_runs_nothing(
    plugged: tuple[World, Kit, str, Path],
) -> None:
    w, kit, enabled, marker = plugged
    tables = ("job_runs", "definitions", "audit_log")
    before = {t: count(w.engine, t) for t in tables}
    ok = w.client.post("/internal/plugins/probe", headers=_admin(w)).json()
    assert ok["valid"] is True and ok["error"] is None
    (kit.directory / enabled / "util" / "helpers.py").write_text("VALUE = 2\n")  # changed since signing
    refused = w.client.post("/internal/plugins/probe", headers=_admin(w)).json()
    assert refused["valid"] is False and f"plugin {enabled!r}, file 'util/helpers.py'" in refused["error"]
    assert {t: count(w.engine, t) for t in tables} == before
    assert not marker.exists() and not any(m.startswith(f"{enabled}.util") for m in sys.modules)
    assert admission.current().admitted() == {enabled}  # the running admission is untouched


@pytest.mark.parametrize("role", [r for r in Role if r is not Role.ADMIN])
def test_status_and_probe_are_refused_to_everyone_but_an_admin(
    plugged: tuple[World, Kit, str, Path], role: Role
) -> None:
    w = plugged[0]
    for method, path in (("GET", "/internal/plugins/status"), ("POST", "/internal/plugins/probe")):
        assert w.client.request(method, path, headers=w.headers("acme", role)).status_code == 403
        assert w.client.request(method, path).status_code == 401


def test_status_and_probe_are_refused_to_an_admin_token_limited_to_definitions(
    plugged: tuple[World, Kit, str, Path],
) -> None:
    """Like every route about the whole tenant: a limited token sees only what its limit covers."""
    w = plugged[0]
    limited = tokens.create(w.engine, tenant_id="acme", role="admin", actor="test", jobs=[ACME_JOB])
    for method, path in (("GET", "/internal/plugins/status"), ("POST", "/internal/plugins/probe")):
        refused = w.client.request(method, path, headers={"Authorization": f"Bearer {limited.token}"})
        assert refused.status_code == 403 and refused.json()["field"] == "jobs", path
