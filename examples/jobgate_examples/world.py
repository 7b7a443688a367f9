"""The data the stand-in engines start with: what the examples work on.

``seed(root)`` lays out, under ``root``, the recorded signals the replay coordinator holds,
the DAL's anchor candidates, an attestation with fields that must never leave the host, this
ECO's federation identity and key, two packages a partner ECO delivered (one altered after it
was signed), the quarantine roster and a case its reviewer already decided, the reviewer
outcomes DSAIL may learn from, a fleet of four nodes with their configuration, and two
candidate configurations. Everything is fixed data except the Ed25519 keys, made here.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from jobgate.core.canonical import canonical_json, digest
from jobgate.governance.signing import generate, sign
from jobgate_examples.common import write_json
from jobgate_examples.ledger import Ledger
from jobgate_examples.pipeline import score

OUR_ECO = "ECO-A123"
PARTNER_ECO = "ECO-B456"  # receives our export
SENDER_ECO = "ECO-C789"  # sends us packages
WEIGHTS = {"evidence_quality": 0.5, "source_reliability": 0.3, "consistency": 0.2}
PIPELINE = {"version": "trust-score-1.4", "weights": WEIGHTS, "score_threshold": 0.7}
# What standard_federation redaction must remove: none of these may reach the partner.
SECRETS = (
    "anna.keller@supplier.example",
    "Supplier audit gap, see ticket SEC-4411",
    "Jonas Brandt",
    "E-20931",
    "TGJOBRUN-2026-00001472",
)
GOOD_CONFIG = "cfg-2026-06-a"
BAD_CONFIG = "cfg-2026-06-b"
GENUINE_DELIVERY = "IN-0001"
TAMPERED_DELIVERY = "IN-0002"
OPEN_CASE = "TGQ-2026-00001472"  # nobody decided it yet
DECIDED_CASE = "TGQ-2026-00001471"  # its reviewer released it in the Quarantine Manager


def seed(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    _replay(root)
    _dal(root)
    _federation(root)
    _quarantine(root)
    _feedback(root)
    _fleet(root)


def _replay(root: Path) -> None:
    signals = root / "replay" / "signals"
    # Reproducible: production recorded exactly what the pipeline computes.
    inputs = {"evidence_quality": 0.82, "source_reliability": 0.9, "consistency": 0.77}
    output = score(inputs, WEIGHTS, 0.7)
    _signal(signals, "SIG-2026-00001472", inputs, output)
    # Drifted: what production recorded is not what the recorded inputs and pipeline give.
    inputs = {"evidence_quality": 0.61, "source_reliability": 0.74, "consistency": 0.69}
    _signal(signals, "SIG-2026-00001473", inputs, {"score": 0.712, "decision": "PASS"})


def _signal(folder: Path, signal_id: str, inputs: dict[str, float], output: dict[str, Any]) -> None:
    write_json(
        folder / f"{signal_id}.json",
        {
            "signal_id": signal_id,
            "eco_number": OUR_ECO,
            "inputs": inputs,
            "pipeline": PIPELINE,
            "recorded_output": output,
            "recorded_output_hash": digest(output),
        },
    )


def _dal(root: Path) -> None:
    lines = []
    for i in range(12):  # 17:40 to 19:30, every 10 minutes: six fall in the 18:00-19:00 window
        minutes = 40 + 10 * i
        artifact_id = f"TGWF-2026-{1460 + i:08d}"
        lines.append(
            {
                "artifact_type": "TrustSchedulerWorkflowEvent",
                "artifact_id": artifact_id,
                "artifact_hash": digest({"artifact_id": artifact_id, "event": "workflow_completed"}),
                "created_at": f"2026-06-25T{17 + minutes // 60:02d}:{minutes % 60:02d}:00Z",
            }
        )
    path = root / "dal" / "candidates.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(canonical_json(x) + b"\n" for x in lines))


def _federation(root: Path) -> None:
    fed = root / "federation"
    ours, sender = generate(f"did:eco:{OUR_ECO}#key-1"), generate(f"did:eco:{SENDER_ECO}#key-1")
    revoked = generate("did:eco:ECO-D000#key-1")
    (fed / "keys").mkdir(parents=True, exist_ok=True)
    key_file = fed / "keys" / f"{OUR_ECO}.key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(ours.private_b64 + "\n")
    write_json(fed / "identity.json", {"eco_number": OUR_ECO, "key_id": ours.key_id})
    registry = {
        eco: {"did": f"did:eco:{eco}", "key_id": pair.key_id, "public_key": pair.public_b64, "status": status}
        for eco, pair, status in (
            (OUR_ECO, ours, "active"),
            (SENDER_ECO, sender, "active"),
            ("ECO-D000", revoked, "revoked"),
        )
    }
    write_json(fed / "trust-registry.json", registry)
    write_json(
        fed / "profiles.json",
        {
            "profiles": {
                "buyer_standard_assurance_v1": {
                    "allowed_targets": [PARTNER_ECO],
                    "redaction_profile": "standard_federation",
                    "require_dal_anchor": True,
                }
            },
            "redaction_profiles": {
                "standard_federation": [
                    "attestation.job_run_id",
                    "attestation.internal_notes",
                    "attestation.reviewer",
                    "attestation.subject.contact_email",
                ]
            },
        },
    )
    write_json(
        root / "attestations" / "ATT-2026-00001472.json",
        {
            "attestation_id": "ATT-2026-00001472",
            "eco_number": OUR_ECO,
            "subject": {"product": "BP-7 battery pack", "carbon_passport": "CP-2026-0042", "contact_email": SECRETS[0]},
            "trust_score": 0.87,
            "decision": "PASS",
            "evidence_refs": ["EV-2026-0311", "EV-2026-0312"],
            "internal_notes": SECRETS[1],
            "reviewer": {"name": SECRETS[2], "employee_id": SECRETS[3]},
            "job_run_id": SECRETS[4],
        },
    )
    # Two deliveries from ECO-C789: the package as signed and anchored, and a copy altered later.
    package: dict[str, Any] = {
        "package_id": "FEDPKG-C789000000000001",
        "source_eco": SENDER_ECO,
        "target_eco": OUR_ECO,
        "federation_profile": "buyer_standard_assurance_v1",
        "sync_type": "trust_attestation_export",
        "redaction_profile": "standard_federation",
        "redacted_fields": ["attestation.internal_notes"],
        "attestation": {"attestation_id": "ATT-C789-0042", "trust_score": 0.64, "decision": "REVIEW"},
    }
    package_digest = digest(package)
    entry, _ = Ledger(root / "dal" / "ledger.jsonl").append(
        "FederationPackage", package["package_id"], package_digest, "seed:" + package["package_id"]
    )
    envelope = {
        "package": package,
        "package_digest": package_digest,
        "signature": sign(package_digest, sender.key_id, sender.private_b64),
        "dal_ref": entry["ledger_ref"],
    }
    write_json(fed / "inbox" / f"{GENUINE_DELIVERY}.json", envelope)
    tampered = copy.deepcopy(envelope)
    tampered["package"]["attestation"].update(trust_score=0.94, decision="PASS")  # after signing
    write_json(fed / "inbox" / f"{TAMPERED_DELIVERY}.json", tampered)


def _quarantine(root: Path) -> None:
    q = root / "quarantine"
    write_json(
        q / "roster.json",
        {"reviewers": ["reviewer.kim", "reviewer.osei", "reviewer.lund"], "escalation_contact": "quarantine-lead"},
    )
    write_json(q / "evidence-required.json", {"required": ["lab_report", "supplier_declaration"]})
    write_json(q / "evidence" / OPEN_CASE / "supplier_declaration.json", {"received": "2026-06-25"})
    # A case its reviewer has already decided, in the Quarantine Manager (a person did this).
    for name in ("lab_report", "supplier_declaration"):
        write_json(q / "evidence" / DECIDED_CASE / f"{name}.json", {"received": "2026-06-26"})
    write_json(
        q / "cases" / f"{DECIDED_CASE}.json",
        {
            "quarantine_id": DECIDED_CASE,
            "eco_number": OUR_ECO,
            "record_id": "SIG-2026-00001470",
            "status": "RELEASED",
            "opened_at": "2026-06-26T08:00:00Z",
            "deadline": "2026-06-28T08:00:00Z",
            "reviewer": "reviewer.kim",
            "decision": {
                "decision": "RELEASE",
                "decided_by": "reviewer.kim",
                "decided_at": "2026-06-26T17:40:00Z",
                "note": "lab report confirms the supplier declaration",
            },
            "history": [],
        },
    )


def _feedback(root: Path) -> None:
    def outcome(n: int, month: str, **extra: Any) -> dict[str, Any]:
        base = {
            "outcome_id": f"FB-{n:03d}",
            "reviewed_at": f"2026-{month}-1{n % 10}T09:00:00Z",
            "model": "trust-score-1.4",
            "decision_id": f"DEC-2026-{4400 + n}",
            "ai_decision": "PASS",
            "human_decision": "REVIEW" if n % 2 else "PASS",
            "category": "score_override",
            "training_consent": True,
            "subject_email": f"subject{n}@customer.example",
            "subject_name": f"Customer {n}",
            "reviewer_notes": f"Reviewer comment {n}: evidence was outdated",
        }
        return {**base, **extra}

    outcomes = [
        outcome(1, "06"),
        outcome(2, "06"),
        outcome(3, "06", training_consent=False),
        outcome(4, "06", category="legal_hold"),
        outcome(5, "06"),
        outcome(6, "06", model="experimental-x"),
        outcome(7, "05"),  # another period
    ]
    path = root / "feedback" / "outcomes.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(canonical_json(o) + b"\n" for o in outcomes))
    write_json(
        root / "feedback" / "policy.json",
        {
            "require_training_consent": True,
            "suppressed_categories": ["legal_hold", "minor_subject"],
            "governed_models": ["trust-score-1.4"],
        },
    )


def _fleet(root: Path) -> None:
    base = {
        "version": "cfg-2026-05",
        "weights": WEIGHTS,
        "score_threshold": 0.7,
        "replay_sample_size": 25,
        "feature_flags": {},
    }
    for n in range(1, 5):
        write_json(root / "fleet" / "nodes" / f"node-{n}.json", base)
    golden = []
    for i in range(10):  # scores 0.585 to 0.882: six PASS at the 0.7 threshold
        inputs = {
            "evidence_quality": round(0.55 + 0.04 * i, 4),
            "source_reliability": round(0.6 + 0.03 * i, 4),
            "consistency": round(0.65 + 0.02 * i, 4),
        }
        golden.append({"inputs": inputs, "expected_decision": score(inputs, WEIGHTS, 0.7)["decision"]})
    write_json(root / "fleet" / "golden-set.json", golden)
    candidates = root / "config" / "candidates"
    write_json(
        candidates / f"{GOOD_CONFIG}.json",
        {**base, "version": GOOD_CONFIG, "replay_sample_size": 30, "feature_flags": {"new_review_ui": True}},
    )
    # Valid (every value in range), but a 0.92 threshold turns most golden PASS decisions into REVIEW.
    write_json(candidates / f"{BAD_CONFIG}.json", {**base, "version": BAD_CONFIG, "score_threshold": 0.92})
