"""The workflows ``run_all.py`` starts, and the outcome each one must end with.

A case names a workflow definition, its params, the status it must end in, and a check that
reads what really happened — the workflow's record in jobgate's database and the stand-in
engines' files — and returns the outcome in a few words, or raises ``Unexpected`` naming what
differs. ``after`` orders cases that share state: the bad rollout starts once the good one has
ended (so it is rolled back to the good configuration), and the AII publication and the audit
check start last, so they count and verify everything the others did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobgate.core import merkle
from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.workflows import WorkflowView
from jobgate_examples import world
from jobgate_examples.ledger import Ledger
from jobgate_examples.standin_server import FORBIDDEN_FEEDBACK_FIELDS


class Unexpected(AssertionError):
    """The workflow did not end the way its example says it must."""


@dataclass(frozen=True)
class Finished:
    """A workflow run once it ended: its record, each step's run, and the stand-ins' folder."""

    view: WorkflowView
    runs: Mapping[str, JobRun]  # step id -> the step's run (compensation runs: "<step>:compensate")
    home: Path
    engine: Engine

    def step(self, step_id: str) -> str:
        return next(s.status for s in self.view.steps if s.step_id == step_id)

    def out(self, step_id: str) -> dict[str, Any]:
        outputs = next(s.outputs for s in self.view.steps if s.step_id == step_id)
        return dict(outputs or {})

    def json(self, *parts: str) -> Any:
        return json.loads(self.home.joinpath(*parts).read_text(encoding="utf-8"))

    def lines(self, *parts: str) -> list[dict[str, Any]]:
        """The JSON lines of a stand-in's file; none when nothing was ever written to it (a case
        checked before any other case's run sent a line)."""
        path = self.home.joinpath(*parts)
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Unexpected(message)


@dataclass(frozen=True)
class Case:
    example: str  # its folder under examples/
    label: str  # what distinguishes it from the other cases of the same example ("" if alone)
    workflow: str
    params: Callable[[], dict[str, str]]
    expected: RunStatus
    check: Callable[[Finished], str]
    after: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return f"{self.example}/{self.label}" if self.label else self.example


# --------------------------------------------------------------------------------- checks
def replay_match(f: Finished) -> str:
    expect(f.out("compare") == {"match": True, "verdict": "MATCH"}, f"compare said {f.out('compare')}")
    expect(f.step("flag_drift") == "SKIPPED", "a drift alert was raised for a matching replay")
    expect(f.out("audit")["audit_action"] == "replay.verified", "the audit entry is not replay.verified")
    return "Hash(original) = Hash(replay); audited; drift alert skipped"


def replay_drift(f: Finished) -> str:
    expect(f.out("compare")["verdict"] == "MISMATCH", "the drifted signal replayed to its recorded hash")
    expect(f.step("flag_drift") == "COMPLETED", "no drift alert for a mismatch")
    expect(f.out("audit")["audit_action"] == "replay.mismatch", "the mismatch was not audited as such")
    sent = [n for n in f.lines("notifications", "outbox.jsonl") if n["kind"] == "replay_drift"]
    expect(len(sent) == 1, f"{len(sent)} drift notifications")
    return f"hash mismatch: audited as critical, on-call alerted ({f.out('flag_drift')['notification_id']})"


def dal_batch(f: Finished) -> str:
    count, root, ref = (
        f.out("collect")["candidate_count"],
        f.out("build_tree")["root"],
        f.out("submit_root")["ledger_ref"],
    )
    expect(count == 6, f"{count} candidates in the window, not 6")
    entry = Ledger(f.home / "dal" / "ledger.jsonl").get(ref)
    expect(entry is not None and entry["artifact_hash"] == root, f"ledger entry {ref} does not hold the root")
    proofs = sorted((f.home / "dal" / "proofs" / "DALB-2026-06-25-1800").glob("*.json"))
    expect(len(proofs) == count, f"{len(proofs)} proofs published for {count} candidates")
    for p in proofs:  # each proof checks offline against the anchored root
        doc = json.loads(p.read_text(encoding="utf-8"))
        expect(merkle.verify(doc["artifact_hash"], doc["proof"], root), f"{p.name} does not reach the root")
    return f"{count} candidates, root {root[7:19]}… verified in ledger {ref}, {count} proofs published"


def federation_export(f: Finished) -> str:
    expect(f.out("verify_delivery") == {"delivery_verified": True}, "delivery not verified")
    received = list((f.home / "partners" / world.PARTNER_ECO / "received").glob("*.json"))
    expect(len(received) == 1, f"{len(received)} packages at {world.PARTNER_ECO}")
    text = received[0].read_text(encoding="utf-8")
    leaked = [s for s in world.SECRETS if s in text]
    expect(not leaked, f"redacted values reached the partner: {leaked}")
    return f"redacted ({f.out('redact')['redacted_count']} fields), signed, anchored, delivered and verified"


def import_genuine(f: Finished) -> str:
    expect(f.out("decide")["decision"] == "accept", f"decision {f.out('decide')}")
    expect(f.step("accept") == "COMPLETED" and f.step("reject") == "SKIPPED", "accept/reject did not follow")
    expect((f.home / "federation" / "accepted" / "FEDPKG-C789000000000001.json").is_file(), "not admitted")
    return "identity, signature and DAL anchor verified: package accepted"


def import_tampered(f: Finished) -> str:
    expect(f.out("decide")["decision"] == "reject", "a tampered package was not rejected")
    expect(f.step("accept") == "SKIPPED" and f.step("reject") == "COMPLETED", "accept/reject did not follow")
    failed = sorted(k[:-3] for k in ("identity_ok", "signature_ok", "dal_ok") if not _ok(f, k))
    expect(failed == ["dal", "signature"], f"failed checks {failed}, expected dal and signature")
    kept = f.home / "federation" / "rejected" / f"{f.view.record.workflow_run_id}.json"
    expect(kept.is_file(), "the rejected package was not kept for review")
    return "tampered package rejected: signature and DAL anchor do not match"


def _ok(f: Finished, key: str) -> bool:
    step = {"identity_ok": "verify_identity", "signature_ok": "verify_signature", "dal_ok": "verify_dal"}[key]
    return bool(f.out(step)[key])


def quarantine(f: Finished) -> str:
    record = f.view.record
    expect(record.error_code == "AWAITING_REVIEWER_DECISION", f"ended with {record.error_code}")
    expect(f.step("escalate") == "COMPLETED", "an overdue case was not escalated")
    case = f.json("quarantine", "cases", f"{world.OPEN_CASE}.json")
    expect(case["status"] == "ESCALATED" and case["decision"] is None, f"case is {case['status']}")
    kinds = sorted(n["kind"] for n in f.lines("notifications", "outbox.jsonl") if n["ref"] == case["quarantine_id"])
    expect(kinds == ["evidence_request", "quarantine_escalation", "reviewer_reminder"], f"notifications {kinds}")
    return f"escalated to {case['escalated_to']}; not released, not rejected: awaiting {case['reviewer']}'s decision"


def quarantine_decided(f: Finished) -> str:
    expect(f.out("await_decision") == {"decision": "RELEASE", "decided_by": "reviewer.kim"}, "decision not read")
    expect(f.step("escalate") == "SKIPPED", "a decided case was escalated")
    case = f.json("quarantine", "cases", f"{world.DECIDED_CASE}.json")
    expect(case["status"] == "RELEASED", f"case is {case['status']}")
    sent = [n for n in f.lines("notifications", "outbox.jsonl") if n["ref"] == world.DECIDED_CASE]
    expect(not sent, f"{len(sent)} notifications about a decided case")
    return "reviewer.kim's RELEASE recorded as theirs; no reminder, no escalation"


def ai_feedback(f: Finished) -> str:
    publish = f.out("publish")
    expect(f.out("apply_policy") == {"allowed": 3, "suppressed": 3}, f"policy split {f.out('apply_policy')}")
    expect(publish["published"] == 3 and publish["attempt"] == 2, f"publish {publish}")
    expect(f.runs["publish"].attempt == 2, "DSAIL's 503 was not retried")
    batch = f.json("dsail", "batches", "FBB-2026-06-30.json")
    leaked = sorted({k for item in batch["items"] for k in item} & FORBIDDEN_FEEDBACK_FIELDS)
    expect(not leaked, f"unredacted fields reached DSAIL: {leaked}")
    expect(f.out("suppress") == {"suppressed_logged": 3}, "suppressed outcomes not logged")
    return "3 published to DSAIL on attempt 2 (the first got 503), 3 suppressed"


def aii(f: Finished) -> str:
    publication = f.out("publish")
    published = f.lines("aii", "publications.jsonl")
    expect(publication["status"] == "PUBLISHED" and len(published) == 1, f"publication {publication}")
    payload = published[0]["payload"]
    expect(payload["jobs_scheduled"] > 0, "no job counted")
    return (
        f"{publication['publication_id']}: {payload['jobs_scheduled']} jobs, "
        f"success rate {payload['job_success_rate']:.2f}, retry rate {payload['retry_rate']:.2f}"
    )


def rollout_good(f: Finished) -> str:
    versions = _fleet_versions(f)
    expect(set(versions.values()) == {world.GOOD_CONFIG}, f"fleet versions {versions}")
    expect(f.out("complete_change") == {"change_status": "COMPLETED"}, "change not completed")
    return f"{len(versions)} nodes on {world.GOOD_CONFIG}; canary and fleet healthy"


def rollout_bad(f: Finished) -> str:
    record = f.view.record
    expect(record.error_code == "CANARY_CHECK_FAILED", f"ended with {record.error_code}")
    compensated = [t.step_id for t in f.view.transitions if t.to_status == "COMPENSATED"]
    expect(compensated == ["canary", "open_change"], f"compensated {compensated}, expected canary then open_change")
    expect(f.step("expand") == "CANCELLED", "expand ran after a failed canary")
    versions = _fleet_versions(f)
    expect(set(versions.values()) == {world.GOOD_CONFIG}, f"fleet versions after the rollback {versions}")
    change = f.json("config", "changes", f"{record.workflow_run_id}.json")
    expect(change["status"] == "ROLLED_BACK", f"change record {change['status']}")
    return f"rolled back: canary failed; compensated canary, then open_change; fleet on {world.GOOD_CONFIG}"


def _fleet_versions(f: Finished) -> dict[str, str]:
    return {p.stem: f.json("fleet", "nodes", p.name)["version"] for p in sorted((f.home / "fleet" / "nodes").glob("*"))}


def audit_integrity(f: Finished) -> str:
    report = f.out("report")
    expect(report["status"] == "VERIFIED_AND_ANCHORED", f"report {report}")
    expect(f.out("detect_conflicts")["conflicts"] == 0, "conflicts found")
    verified = f.out("verify_chain")
    return f"{verified['entries']} audit entries verified, 0 conflicts, head #{verified['head_seq']} anchored"


# ---------------------------------------------------------------------------------- cases
LAST = (
    "replay-verification/match",
    "replay-verification/drift",
    "dal-batch",
    "federation-export",
    "federation-import/genuine",
    "federation-import/tampered",
    "quarantine-review/undecided",
    "quarantine-review/reviewer decided",
    "ai-feedback",
    "config-rollout/good config",
    "config-rollout/bad config",
)


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


CASES: tuple[Case, ...] = (
    Case("replay-verification", "match", "replay-verification",
         lambda: {"signal_id": "SIG-2026-00001472"}, RunStatus.COMPLETED, replay_match),
    Case("replay-verification", "drift", "replay-verification",
         lambda: {"signal_id": "SIG-2026-00001473"}, RunStatus.COMPLETED, replay_drift),
    Case("dal-batch", "", "dal-batch",
         lambda: {"batch_id": "DALB-2026-06-25-1800", "window_from": "2026-06-25T18:00:00Z",
                  "window_to": "2026-06-25T19:00:00Z"},
         RunStatus.COMPLETED, dal_batch),
    Case("federation-export", "", "federation-export",
         lambda: {"source_eco": world.OUR_ECO, "target_eco": world.PARTNER_ECO, "attestation_id": "ATT-2026-00001472"},
         RunStatus.COMPLETED, federation_export),
    Case("federation-import", "genuine", "federation-import",
         lambda: {"delivery_id": world.GENUINE_DELIVERY}, RunStatus.COMPLETED, import_genuine),
    Case("federation-import", "tampered", "federation-import",
         lambda: {"delivery_id": world.TAMPERED_DELIVERY}, RunStatus.COMPLETED, import_tampered),
    Case("quarantine-review", "undecided", "quarantine-review",
         lambda: {"quarantine_id": world.OPEN_CASE, "eco_number": world.OUR_ECO, "record_id": "SIG-2026-00001473",
                  "opened_at": "2026-06-25T10:00:00Z", "as_of": "2026-06-27T12:22:44Z"},
         RunStatus.ESCALATED, quarantine),
    Case("quarantine-review", "reviewer decided", "quarantine-review",
         lambda: {"quarantine_id": world.DECIDED_CASE, "eco_number": world.OUR_ECO, "record_id": "SIG-2026-00001470",
                  "opened_at": "2026-06-26T08:00:00Z", "as_of": "2026-06-26T20:00:00Z"},
         RunStatus.COMPLETED, quarantine_decided),
    Case("ai-feedback", "", "ai-feedback",
         lambda: {"batch_id": "FBB-2026-06-30", "period": "2026-06"}, RunStatus.COMPLETED, ai_feedback),
    Case("config-rollout", "good config", "config-rollout",
         lambda: {"config_id": world.GOOD_CONFIG}, RunStatus.COMPLETED, rollout_good),
    Case("config-rollout", "bad config", "config-rollout",
         lambda: {"config_id": world.BAD_CONFIG}, RunStatus.FAILED, rollout_bad, after=("config-rollout/good config",)),
    Case("aii-publication", "", "aii-publication",
         lambda: {"eco_number": world.OUR_ECO, "period": _today()}, RunStatus.COMPLETED, aii, after=LAST),
    Case("audit-integrity", "", "audit-integrity", dict, RunStatus.COMPLETED, audit_integrity, after=LAST),
)  # fmt: skip
