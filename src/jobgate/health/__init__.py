"""Alerting and dependency health (seed 000 §5 "Alerting and Escalation", §58 failure handling)."""

from jobgate.health.settings import (
    ANCHOR_SINK,
    DEFAULT_ALERT_TYPES,
    ENVIRONMENT_CHECK,
    TARGET_PREFIX,
    AlertSettings,
    DependencySpec,
    parse_alerts,
    parse_dependencies,
)

__all__ = [
    "ANCHOR_SINK",
    "DEFAULT_ALERT_TYPES",
    "ENVIRONMENT_CHECK",
    "TARGET_PREFIX",
    "AlertSettings",
    "DependencySpec",
    "parse_alerts",
    "parse_dependencies",
]
