"""The ``plugins`` section of ``jobgate.yaml``: which optional plugins may run, where they are, and
whose signatures admit them.

Checked when the configuration is read, so a refused combination never reaches a running process:
``allow_unsigned: true`` beside ``enforce_signatures: true`` is a contradiction (seed 001 §4.2:
both cannot be set), and turning enforcement off must be said twice (``enforce_signatures: false``
*and* ``allow_unsigned: true``) so that no single edit silently admits unsigned code. Enabling a
built-in, declarative or placeholder kind is refused here too: only an optional plugin is enabled.
Only this file and the plugin files decide what is admitted; nothing read from the database does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobgate.core.errors import ValidationError
from jobgate.core.job_kinds import CATALOG, KindClass
from jobgate.documents import Reader, join

_KEYS = ("enabled", "directory", "trust_roots", "enforce_signatures", "allow_unsigned")


@dataclass(frozen=True)
class PluginSettings:
    """``plugins``: nothing enabled by default, and signatures enforced by default."""

    enabled: tuple[str, ...] = ()
    directory: Path | None = None  # plugin packages as folders; None: entry points only
    trust_roots: dict[str, str] = field(default_factory=dict)  # key id -> Ed25519 public key (base64)
    enforce_signatures: bool = True
    allow_unsigned: bool = False

    def roots(self) -> dict[str, Any]:
        """The trust roots as Ed25519 public keys (checked when the configuration was read)."""
        from jobgate.governance.signing import public_key

        return {k: public_key(v, field=f"plugins.trust_roots.{k}") for k, v in self.trust_roots.items()}


def parse_plugin_settings(r: Reader, value: Any, base_dir: Path) -> PluginSettings:
    """The ``plugins`` section, every rule that needs no file of a plugin checked now."""
    if value is None:
        return PluginSettings()
    doc = r.mapping(value, "plugins")
    r.only_keys(doc, "plugins", _KEYS)
    enabled = r.strings(doc["enabled"], "plugins.enabled", unique=True) if "enabled" in doc else []
    for i, name in enumerate(enabled):
        r.name(name, join("plugins.enabled", i))
        kind = CATALOG.get(name)
        if kind is not None and kind.kind_class is not KindClass.OPTIONAL_PLUGIN:
            r.fail(
                join("plugins.enabled", i),
                f"{name!r} is a {kind.kind_class.value} job kind, not an optional plugin: it cannot be enabled",
            )
    directory = base_dir / r.string(doc["directory"], "plugins.directory") if "directory" in doc else None
    roots = _roots(r, doc.get("trust_roots"), base_dir)
    enforce = (
        r.boolean(doc["enforce_signatures"], "plugins.enforce_signatures") if "enforce_signatures" in doc else True
    )
    unsigned = r.boolean(doc["allow_unsigned"], "plugins.allow_unsigned") if "allow_unsigned" in doc else False
    if enforce and unsigned:
        r.fail("plugins.allow_unsigned", "cannot be true while plugins.enforce_signatures is true (the default)")
    if not enforce and not unsigned:
        r.fail(
            "plugins.enforce_signatures",
            "false admits unsigned plugin code: say so with plugins.allow_unsigned: true as well",
        )
    if enabled and enforce and not roots:
        r.fail("plugins.trust_roots", "plugins are enabled and signatures enforced, but no trust root is configured")
    return PluginSettings(tuple(enabled), directory, roots, enforce, unsigned)


def _roots(r: Reader, value: Any, base_dir: Path) -> dict[str, str]:
    """Ed25519 public keys by key id: base64 inline, or ``@file`` next to the configuration (as
    ``signing.trust_roots``; ``jobgate keys generate`` prints one)."""
    from jobgate.governance.signing import public_key

    roots: dict[str, str] = {}
    for key_id, raw in r.mapping(value if value is not None else {}, "plugins.trust_roots").items():
        at = join("plugins.trust_roots", r.name(key_id, join("plugins.trust_roots", key_id)))
        text = r.string(raw, at)
        if text.startswith("@"):
            path = base_dir / text[1:]
            try:
                text = path.read_text(encoding="ascii").strip()
            except OSError as exc:
                r.fail(at, f"cannot read {path}: {exc.strerror}")
        try:
            public_key(text, field=at)
        except ValidationError as exc:
            r.fail(at, exc.message)
        roots[key_id] = text
    return roots
