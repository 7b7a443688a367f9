"""Admission of signed optional plugins (seed 001 §4.2, seed 002): real plugin folders, real
Ed25519 keys; every refusal names the plugin and the file, and a refused or disabled plugin is
never imported (its package writes a marker file when it is)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import make_config
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.core.job_kinds import CATALOG, KindClass
from jobgate.governance import signing
from jobgate.plugins import admission
from jobgate.plugins.bundle import PluginRefused
from plugin_kit import Kit


def test_the_catalogue_classifies_every_kind_and_the_built_ins_resolve() -> None:
    classes = {k.name: k.kind_class for k in CATALOG.values()}
    assert {n for n, c in classes.items() if c is KindClass.BUILT_IN} == {
        "python", "command", "http", "workflow", "retention", "anchoring", "replay",
    }  # fmt: skip
    assert classes["scenario"] is KindClass.DECLARATIVE and classes["scan"] is KindClass.PLACEHOLDER
    assert admission.admit(make_config(Path("/nonexistent")).plugins).plugins == ()  # built-ins resolve


def test_a_missing_built_in_fails_startup_naming_the_kind() -> None:
    from jobgate.core.job_kinds import JobKind
    from jobgate.plugins.catalog import require_builtins

    gone = JobKind("python", KindClass.BUILT_IN, "x", "jobgate.runtime.executors.python:NoSuchExecutor")
    with pytest.raises(ConfigurationError, match="built-in job kind 'python' is missing"):
        require_builtins((gone,))


def test_a_signed_plugin_is_admitted_and_imported_from_the_verified_bytes(kit: Kit, tmp_path: Path) -> None:
    name, marker = kit.plugin()
    kit.sign(name)
    report = admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
    (state,) = report.plugins
    assert (state.name, state.state, state.signed_by) == (name, "admitted", ("plugin-release",))
    assert set(state.files) == {"__init__.py", "jobs.py", "util/__init__.py", "util/helpers.py"}
    assert not marker.exists()  # admitted is not imported: a handler's first use imports it
    # Replaced on disk after admission: what runs is what was verified.
    (kit.directory / name / "jobs.py").write_text("def run(ctx):\n    return {'swapped': True}\n")
    jobs = importlib.import_module(f"{name}.jobs")
    assert jobs.run(None) == {"plugin": name, "answer": 42} and marker.exists()
    assert importlib.import_module(f"{name}.util.helpers").VALUE == 1
    admission.check_handler(f"{name}.jobs:run")  # admitted: a definition may name it


def test_a_module_added_after_signing_is_refused_naming_the_file(kit: Kit, tmp_path: Path) -> None:
    name, marker = kit.plugin()
    kit.sign(name)
    (kit.directory / name / "util" / "extra.py").write_text("X = 1\n")
    with pytest.raises(PluginRefused) as refused:
        admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
    assert refused.value.plugin == name and refused.value.file == "util/extra.py"
    assert f"plugin {name!r}, file 'util/extra.py': has no signature" in refused.value.message
    assert not marker.exists() and name not in sys.modules
    assert admission.current().ran is False  # nothing of the refused admission is kept


def test_a_module_modified_after_signing_is_refused_naming_the_file(kit: Kit, tmp_path: Path) -> None:
    name, marker = kit.plugin()
    kit.sign(name)
    with (kit.directory / name / "jobs.py").open("a") as fh:
        fh.write("import os; os.system('true')\n")
    with pytest.raises(PluginRefused, match=r"file 'jobs.py': .*does not match its content") as refused:
        admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
    assert refused.value.file == "jobs.py" and not marker.exists()


def test_a_signature_moved_from_another_file_does_not_match(kit: Kit, tmp_path: Path) -> None:
    name, _ = kit.plugin()
    kit.sign(name)
    root = kit.directory / name
    (root / "util" / "helpers.py").write_bytes((root / "jobs.py").read_bytes())
    (root / "util" / "helpers.py.sig").write_bytes((root / "jobs.py.sig").read_bytes())
    with pytest.raises(PluginRefused, match=r"file 'util/helpers\.py'"):
        admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)


def test_a_signature_by_an_untrusted_key_is_refused(kit: Kit, tmp_path: Path) -> None:
    name, marker = kit.plugin()
    kit.sign(name, signing.generate("someone-else"))
    with pytest.raises(PluginRefused, match=r"file '__init__.py': signed by 'someone-else', which is not a trust root"):
        admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
    assert not marker.exists()


def test_allow_unsigned_with_enforced_signatures_is_refused(kit: Kit, tmp_path: Path) -> None:
    name, _ = kit.plugin()
    with pytest.raises(ConfigurationError) as refused:
        make_config(tmp_path, plugins=kit.section(name, allow_unsigned=True, enforce_signatures=True))
    assert refused.value.field == "plugins.allow_unsigned"
    with pytest.raises(ConfigurationError) as refused:
        make_config(tmp_path, plugins=kit.section(name, allow_unsigned=True))  # enforcement is the default
    assert refused.value.field == "plugins.allow_unsigned"
    with pytest.raises(ConfigurationError) as refused:
        make_config(tmp_path, plugins=kit.section(name, enforce_signatures=False))  # said once only
    assert refused.value.field == "plugins.enforce_signatures"


def test_unsigned_files_are_admitted_only_when_both_keys_say_so(kit: Kit, tmp_path: Path) -> None:
    name, _ = kit.plugin()
    section = kit.section(name, allow_unsigned=True, enforce_signatures=False)
    (state,) = admission.admit(make_config(tmp_path, plugins=section).plugins).plugins
    assert state.state == "admitted" and "jobs.py" in state.unsigned and state.signed_by == ()


@pytest.mark.parametrize(
    ("kind", "what"), [("scan", "placeholder"), ("python", "built-in"), ("scenario", "declarative")]
)
def test_only_an_optional_plugin_can_be_enabled(tmp_path: Path, kind: str, what: str) -> None:
    with pytest.raises(ConfigurationError, match=f"is a {what} job kind, not an optional plugin") as refused:
        make_config(tmp_path, plugins={"enabled": [kind], "trust_roots": {}, "enforce_signatures": True})
    assert refused.value.field == "plugins.enabled[0]"


def test_an_enabled_plugin_without_its_directory_fails_naming_it(kit: Kit, tmp_path: Path) -> None:
    section = {**kit.section("plug_gone"), "directory": str(tmp_path / "missing")}
    with pytest.raises(PluginRefused, match=r"plugins.directory .*missing does not exist \(enabled: 'plug_gone'\)"):
        admission.admit(make_config(tmp_path, plugins=section).plugins)


def test_a_plugin_not_enabled_is_not_imported_and_cannot_be_named(kit: Kit, tmp_path: Path) -> None:
    enabled, _ = kit.plugin()
    disabled, marker = kit.plugin()
    kit.sign(enabled)
    kit.sign(disabled)
    report = admission.admit(make_config(tmp_path, plugins=kit.section(enabled)).plugins)
    assert {p.name: p.state for p in report.plugins} == {enabled: "admitted", disabled: "disabled"}
    sys.path.insert(0, str(kit.directory))  # even where its folder is importable, it is blocked
    try:
        with pytest.raises(ImportError, match=f"plugin package {disabled!r} is not admitted"):
            importlib.import_module(f"{disabled}.jobs")
    finally:
        sys.path.remove(str(kit.directory))
    with pytest.raises(ValidationError, match="not admitted here") as refused:
        admission.check_handler(f"{disabled}.jobs:run")
    assert refused.value.field == "handler"
    assert not marker.exists() and disabled not in sys.modules


def test_an_unverified_module_name_inside_an_admitted_package_is_not_loaded_from_disk(kit: Kit, tmp_path: Path) -> None:
    name, _ = kit.plugin()
    kit.sign(name)
    admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
    (kit.directory / name / "late.py").write_text("raise SystemExit('must not run')\n")
    with pytest.raises(ImportError, match="is not one of the verified files"):
        importlib.import_module(f"{name}.late")


def test_the_probe_verifies_and_imports_nothing(kit: Kit, tmp_path: Path) -> None:
    good, good_marker = kit.plugin()
    kit.sign(good)
    report = admission.probe(make_config(tmp_path, plugins=kit.section(good)).plugins)
    assert [(p.name, p.state) for p in report.plugins] == [(good, "admitted")]
    assert not good_marker.exists() and good not in sys.modules
    assert admission.current().ran is False  # the probe admits nothing into this process
    (kit.directory / good / "jobs.py").write_text("tampered = True\n")
    (refused,) = admission.probe(make_config(tmp_path, plugins=kit.section(good)).plugins).plugins
    assert refused.state == "refused" and "file 'jobs.py'" in (refused.reason or "")


def test_an_entry_point_plugin_is_verified_before_import(kit: Kit, tmp_path: Path) -> None:
    """A distribution declaring ``[jobgate.plugins] echo = plug_ep…`` on ``sys.path``: its files
    are signed where they are installed; not enabled, a definition cannot name it even in a process
    that never ran admission."""
    site = tmp_path / "site"
    site.mkdir()
    name, marker = kit.plugin("plug_ep_" + tmp_path.name[-6:].replace("-", "_"))
    (kit.directory / name).rename(site / name)
    dist = site / "plug_ep-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-ep\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(f"[jobgate.plugins]\necho = {name}\n"))
    sys.path.insert(0, str(site))
    try:
        with pytest.raises(ValidationError, match="not admitted here"):
            admission.check_handler(f"{name}.jobs:run")
        kit.sign_at(site / name, "echo")
        (state,) = admission.admit(make_config(tmp_path, plugins=kit.section("echo")).plugins).plugins
        assert (state.name, state.origin, state.state) == ("echo", "entry-point", "admitted")
        assert importlib.import_module(f"{name}.jobs").run(None)["answer"] == 42 and marker.exists()
    finally:
        sys.path.remove(str(site))


def test_a_plugin_cannot_claim_jobgate_or_the_standard_library(kit: Kit, tmp_path: Path) -> None:
    """An entry point naming ``jobgate`` or ``json`` is not a plugin: it could neither be admitted
    nor, disabled, block jobgate's own imports."""
    site = tmp_path / "site"
    dist = site / "claims-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: claims\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[jobgate.plugins]\nmine = jobgate\nstd = json\n")
    sys.path.insert(0, str(site))
    try:
        report = admission.admit(make_config(tmp_path, plugins=kit.section()).plugins)
        assert report.plugins == ()
        admission.check_handler("jobgate.standins:hello")
        with pytest.raises(PluginRefused, match="enabled but not found"):
            admission.admit(make_config(tmp_path, plugins=kit.section("mine")).plugins)
    finally:
        sys.path.remove(str(site))


def test_a_plugin_imported_before_admission_is_refused(kit: Kit, tmp_path: Path) -> None:
    name, _ = kit.plugin()
    kit.sign(name)
    sys.path.insert(0, str(kit.directory))
    try:
        importlib.import_module(name)  # from disk, unverified
    finally:
        sys.path.remove(str(kit.directory))
    with pytest.raises(PluginRefused, match="was imported before admission"):
        admission.admit(make_config(tmp_path, plugins=kit.section(name)).plugins)
