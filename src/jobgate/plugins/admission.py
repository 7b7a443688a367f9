"""Admitting optional plugins at startup (seed 001 §4.2, seed 002 "Optional Executable Plugins").

``admit(settings)`` runs before a serve, worker or scheduler process does anything else:

1. every built-in job kind must resolve (``catalog.require_builtins``);
2. every enabled plugin must be found — in ``plugins.directory`` or among the ``jobgate.plugins``
   entry points — and a missing directory fails naming the enabled plugins that needed it;
3. every file each enabled plugin carries is read once and its detached signature verified by a
   configured trust root (``bundle.verify_plugin``), before anything of it is imported;
4. only then is the verified source handed to the import system (``loader``), and plugins that
   were found but not enabled are blocked from import altogether.

Any failure raises ``PluginRefused`` naming the plugin and the file: the process does not start.
Only ``jobgate.yaml`` and the plugin files decide; nothing read from the database or a request
can enable a plugin or make a kind executable. ``probe`` does steps 1-3 without step 4: it reports
what admission would decide, importing, creating and running nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field

from jobgate.config.plugins import PluginSettings
from jobgate.core.errors import ValidationError
from jobgate.plugins import loader
from jobgate.plugins.bundle import (
    PluginRefused,
    PluginSource,
    SignedFile,
    discover,
    entry_point_packages,
    verify_plugin,
)
from jobgate.plugins.catalog import require_builtins

log = logging.getLogger("jobgate.plugins")


@dataclass(frozen=True)
class PluginState:
    """One discovered plugin as admission left it: ``admitted``, ``disabled`` or ``refused``."""

    name: str
    package: str
    origin: str
    state: str
    files: tuple[str, ...] = ()
    signed_by: tuple[str, ...] = ()
    unsigned: tuple[str, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class AdmissionReport:
    ran: bool = False  # False: this process never ran admission (no serve/worker/scheduler start)
    plugins: tuple[PluginState, ...] = field(default_factory=tuple)

    def admitted(self) -> frozenset[str]:
        return frozenset(p.package for p in self.plugins if p.state == "admitted")


_REPORT = AdmissionReport()
_LOCK = threading.Lock()


def current() -> AdmissionReport:
    """What admission decided in this process (``ran`` False if it never ran)."""
    return _REPORT


def _verified(settings: PluginSettings) -> tuple[dict[str, PluginSource], dict[str, list[SignedFile]]]:
    """Steps 1-3: the discovered plugins, and the verified files of every enabled one."""
    require_builtins()
    found = discover(settings.directory)
    missing = [name for name in settings.enabled if name not in found]
    if missing:
        names = ", ".join(repr(m) for m in missing)
        if settings.directory is not None and not settings.directory.is_dir():
            raise PluginRefused(missing[0], f"plugins.directory {settings.directory} does not exist (enabled: {names})")
        raise PluginRefused(missing[0], f"enabled but not found in plugins.directory or entry points ({names})")
    roots = settings.roots()
    verified = {
        name: verify_plugin(found[name], roots, allow_unsigned=settings.allow_unsigned) for name in settings.enabled
    }
    return found, verified


def _states(found: dict[str, PluginSource], verified: dict[str, list[SignedFile]]) -> tuple[PluginState, ...]:
    states = []
    for name, source in sorted(found.items()):
        files = verified.get(name)
        if files is None:
            states.append(PluginState(name, source.package, source.origin, "disabled", reason="not enabled"))
            continue
        states.append(
            PluginState(
                name,
                source.package,
                source.origin,
                "admitted",
                tuple(f.path for f in files),
                tuple(sorted({f.key_id for f in files if f.key_id})),
                tuple(f.path for f in files if f.key_id is None),
            )
        )
    return tuple(states)


def admit(settings: PluginSettings) -> AdmissionReport:
    """Verify, then make importable, the enabled plugins; block the rest. Raises ``PluginRefused``."""
    global _REPORT
    with _LOCK:
        found, verified = _verified(settings)
        early = sorted(name for name in verified if found[name].package in sys.modules)
        if early:  # imported before its files were verified: what runs cannot be vouched for
            raise PluginRefused(early[0], f"package {found[early[0]].package!r} was imported before admission")
        installed = loader.finder()
        for name, source in found.items():
            if name in verified:
                installed.admit(source, verified[name])
            else:
                installed.block(source.package, f"plugin {name!r} is not enabled in plugins.enabled")
        _REPORT = AdmissionReport(True, _states(found, verified))
    for p in _REPORT.plugins:
        if p.unsigned:
            log.warning(
                "plugin %s admitted with %d unsigned files (plugins.allow_unsigned)",
                p.name,
                len(p.unsigned),
                extra={"action": "plugin_admitted_unsigned"},
            )
        elif p.state == "admitted":
            log.info("plugin %s admitted", p.name, extra={"action": "plugin_admitted"})
    return _REPORT


def probe(settings: PluginSettings) -> AdmissionReport:
    """What ``admit`` would decide for ``settings``, importing nothing; a refusal is a report
    with the refused plugin (and why), never an exception."""
    try:
        found, verified = _verified(settings)
    except PluginRefused as exc:
        return AdmissionReport(True, (PluginState(exc.plugin, exc.plugin, "", "refused", reason=exc.message),))
    return AdmissionReport(True, _states(found, verified))


def check_handler(handler: str) -> None:
    """Refuse (field ``handler``) a handler whose package is a plugin this process did not admit,
    whether or not admission ran here: installed entry-point plugins are on ``sys.path``, and
    naming one in a definition must not make it executable."""
    top = handler.partition(":")[0].split(".")[0]
    report = current()
    if top in report.admitted():
        return
    known = {p.package for p in report.plugins} | entry_point_packages()
    if top in known:
        raise ValidationError(
            f"{handler!r} is code of plugin package {top!r}, which is not admitted here "
            "(enable it in plugins.enabled, signed by a trust root)",
            field="handler",
        )


def reset() -> None:
    """Forget admission and remove the import hook (tests: one process runs many deployments)."""
    global _REPORT
    with _LOCK:
        loader.uninstall()
        entry_point_packages.cache_clear()
        _REPORT = AdmissionReport()
