"""SLA policies with every seed 000 §22 deadline, from a document and from ``jobgate.yaml``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import build_config
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.core.policies import SlaPolicy

FULL = {
    "sla_policy_id": "quarantine_review_48h_v1",
    "deadline_seconds": 172800,
    "severity": "warning",
    "requires_escalation": True,
    "escalation_after_seconds": 259200,
    "evidence_deadline_seconds": 86400,
    "evidence_anchor_param": "opened_at",
    "retry_window_seconds": 3600,
    "remind_before_seconds": 14400,
    "description": "seed §35",
}


def test_every_deadline_type_parses() -> None:
    assert SlaPolicy.from_dict(FULL) == SlaPolicy(
        "quarantine_review_48h_v1",
        timedelta(hours=48),
        "warning",
        True,
        escalation_after=timedelta(hours=72),
        evidence_deadline=timedelta(hours=24),
        retry_window=timedelta(hours=1),
        remind_before=timedelta(hours=4),
        evidence_anchor_param="opened_at",
    )


def test_the_old_shape_still_parses_with_no_new_deadlines() -> None:
    p = SlaPolicy.from_dict({"sla_policy_id": "s", "deadline_seconds": 60})
    assert p == SlaPolicy("s", timedelta(seconds=60))
    assert (p.escalation_after, p.evidence_deadline, p.retry_window, p.remind_before) == (None, None, None, None)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"escalation_after_seconds": 0}, "escalation_after_seconds"),
        ({"evidence_deadline_seconds": -1}, "evidence_deadline_seconds"),
        ({"retry_window_seconds": "1h"}, "retry_window_seconds"),
        ({"remind_before_seconds": True}, "remind_before_seconds"),
        ({"remind_before_seconds": 172800}, "remind_before_seconds"),  # not before the deadline
        ({"evidence_anchor_param": "opened at"}, "evidence_anchor_param"),
        ({"evidence_anchor_param": 5}, "evidence_anchor_param"),
        ({"evidence_deadline_seconds": None}, "evidence_anchor_param"),  # an anchor for nothing
        ({"remind_seconds": 5}, "remind_seconds"),
    ],
)
def test_a_bad_field_is_named(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SlaPolicy.from_dict({**FULL, **change})
    assert caught.value.field == field


def test_the_configuration_accepts_the_new_keys_and_names_the_path_of_a_bad_one(tmp_path: Path) -> None:
    config = build_config({"sla_policies": [FULL]}, base_dir=tmp_path, path=None)
    assert config.sla_policies["quarantine_review_48h_v1"].retry_window == timedelta(hours=1)
    bad = {**FULL, "retry_window_seconds": -5}
    with pytest.raises(ConfigurationError) as caught:
        build_config({"sla_policies": [bad]}, base_dir=tmp_path, path=None)
    assert caught.value.field == "sla_policies[0].retry_window_seconds"
    with pytest.raises(ConfigurationError) as caught:
        build_config({"sla_policies": [{**FULL, "escalate": True}]}, base_dir=tmp_path, path=None)
    assert caught.value.field == "sla_policies[0].escalate"
