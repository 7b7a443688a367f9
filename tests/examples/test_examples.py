"""The examples command (``python examples/run_all.py``) end to end, on SQLite and PostgreSQL.

Every seed 000 §8 workflow type runs through a real worker and coordinator against the local
stand-in engines; the runner's own checks must all pass, and this test looks again, from the
outside, at what each example promises: the tampered package rejected, the bad configuration
rolled back in reverse order, the quarantine case left to its reviewer, no redacted value at
the partner, DSAIL's first refusal retried. A last test breaks one example's data and expects
the runner to say so and exit 1, so the checks are known to be able to fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jobgate.core.states import RunStatus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from jobgate_examples import world  # noqa: E402
from jobgate_examples.cases import CASES  # noqa: E402
from jobgate_examples.runner import Options, main, run  # noqa: E402

pytestmark = pytest.mark.slow

EXPECTED = {
    "replay-verification/match": (RunStatus.COMPLETED, "Hash(original) = Hash(replay)"),
    "replay-verification/drift": (RunStatus.COMPLETED, "hash mismatch"),
    "dal-batch": (RunStatus.COMPLETED, "6 proofs published"),
    "federation-export": (RunStatus.COMPLETED, "delivered and verified"),
    "federation-import/genuine": (RunStatus.COMPLETED, "package accepted"),
    "federation-import/tampered": (RunStatus.COMPLETED, "tampered package rejected"),
    "quarantine-review/undecided": (RunStatus.ESCALATED, "not released, not rejected"),
    "quarantine-review/reviewer decided": (RunStatus.COMPLETED, "recorded as theirs"),
    "ai-feedback": (RunStatus.COMPLETED, "on attempt 2"),
    "config-rollout/good config": (RunStatus.COMPLETED, "4 nodes on cfg-2026-06-a"),
    "config-rollout/bad config": (RunStatus.FAILED, "rolled back: canary failed"),
    "aii-publication": (RunStatus.COMPLETED, "AII-00001"),
    "audit-integrity": (RunStatus.COMPLETED, "0 conflicts"),
}


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_example_ends_as_its_example_expects(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    report = run(Options(directory=folder, database=database_url, timeout=60))
    results = {r.case.key: r for r in report.results}
    assert set(results) == set(EXPECTED) == {c.key for c in CASES}
    assert {k: r.outcome for k, r in results.items() if not r.ok} == {}
    for key, (status, phrase) in EXPECTED.items():
        assert results[key].status is status, key
        assert phrase in results[key].outcome, (key, results[key].outcome)
    assert report.ok and report.seconds < 60

    home = folder / "engines"
    # The tampered delivery is kept with its reasons; only the genuine one was admitted.
    tampered = results["federation-import/tampered"].workflow_run_id
    reasons = _json(home / "federation" / "rejected" / f"{tampered}.json")["reasons"]
    assert [r.split(":")[0] for r in reasons] == ["signature", "dal"]
    assert [p.name for p in (home / "federation" / "accepted").iterdir()] == ["FEDPKG-C789000000000001.json"]
    # Nothing redacted reached the partner ECO.
    received = list((home / "partners" / world.PARTNER_ECO / "received").glob("*.json"))
    assert len(received) == 1
    assert not [s for s in world.SECRETS if s in received[0].read_text(encoding="utf-8")]
    # The bad configuration was rolled back: every node on the good one, the change ROLLED_BACK.
    assert {_json(p)["version"] for p in (home / "fleet" / "nodes").glob("*.json")} == {world.GOOD_CONFIG}
    bad = results["config-rollout/bad config"].workflow_run_id
    assert _json(home / "config" / "changes" / f"{bad}.json")["status"] == "ROLLED_BACK"
    # The quarantine workflow decided nothing: the case waits for its reviewer.
    case = _json(home / "quarantine" / "cases" / f"{world.OPEN_CASE}.json")
    assert case["status"] == "ESCALATED" and case["decision"] is None
    assert case["history"][-1]["event"] == "awaiting_reviewer_decision"
    # DSAIL got the redacted batch on the second call; the suppressed outcomes never left.
    batch = _json(home / "dsail" / "batches" / "FBB-2026-06-30.json")
    assert sorted(i["outcome_id"] for i in batch["items"]) == ["FB-001", "FB-002", "FB-005"]
    assert not any("subject_email" in i or "reviewer_notes" in i for i in batch["items"])


def test_the_runner_reports_an_example_that_does_not_end_as_expected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 'bad' configuration made healthy: its rollout completes, which is not what the
    example expects, so the runner marks it and exits 1."""
    seed = world.seed

    def healthy_bad_config(root: Path) -> None:
        seed(root)
        path = root / "config" / "candidates" / f"{world.BAD_CONFIG}.json"
        path.write_text(json.dumps({**_json(path), "score_threshold": 0.7}), encoding="utf-8")

    monkeypatch.setattr(world, "seed", healthy_bad_config)
    code = main(["--dir", str(tmp_path / "run"), "--only", "config-rollout", "--timeout", "30"])
    out = capsys.readouterr().out
    assert code == 1
    assert "UNEXPECTED" in out and "expected FAILED" in out
    assert "1/2 outcomes as expected" in out
