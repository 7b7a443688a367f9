"""Resolving the built-in job kinds at startup (the catalogue itself is ``jobgate.core.job_kinds``)."""

from __future__ import annotations

import importlib

from jobgate.core.errors import ConfigurationError
from jobgate.core.job_kinds import BUILT_INS, CATALOG, JobKind, KindClass, plugin_kind

__all__ = ["BUILT_INS", "CATALOG", "JobKind", "KindClass", "plugin_kind", "require_builtins"]


def require_builtins(kinds: tuple[JobKind, ...] = BUILT_INS) -> None:
    """Resolve every built-in's provider, or fail startup naming the kind (seed 002: a host
    missing a built-in must not reach readiness at all). Imports jobgate's own modules only."""
    for kind in kinds:
        assert kind.provider is not None
        module, _, attribute = kind.provider.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute, None)
        except ImportError as exc:
            raise ConfigurationError(
                f"built-in job kind {kind.name!r} is missing: {module} cannot be imported ({exc})", field="plugins"
            ) from None
        if found is None:
            raise ConfigurationError(
                f"built-in job kind {kind.name!r} is missing: {kind.provider} does not exist", field="plugins"
            )
