"""Governance from the host's command line: four eyes for programs, approvals pinned to the
reviewed digest and showing both digests, token principals, a production folder."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import jobgate

SCRIPT = "job_definition_id: adhoc-script\njob_class: MAINTENANCE_JOB\nrunner: python-script\nbody: |\n  print(1)\n"


def test_apply_approve_is_refused_for_a_program_and_stores_nothing(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    (folder / "script.yaml").write_text(SCRIPT)
    refused = jobgate(folder, "apply", "--approve", "script.yaml", "--by", "alice", check=False)
    assert refused.returncode == 1 and "four_eyes" in refused.stderr, refused.stderr
    listed = json.loads(jobgate(folder, "--json", "definitions", "list").stdout)
    assert "adhoc-script" not in {d["job_definition_id"] for d in listed}
    jobgate(folder, "apply", "script.yaml", "--by", "alice")
    own = jobgate(folder, "definitions", "approve", "adhoc-script", "--by", "alice", check=False)
    assert own.returncode == 1 and "four_eyes" in own.stderr
    approved = json.loads(jobgate(folder, "--json", "definitions", "approve", "adhoc-script", "--by", "bob").stdout)
    assert approved["approved_by"] == "bob" and approved["code_digest"].startswith("sha256:")
    assert {"runner", "binary", "binary_sha256", "args", "environment"} <= set(approved["code_identity"])


def test_approve_names_both_digests_and_refuses_one_not_reviewed(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    status = json.loads(jobgate(folder, "--json", "definitions", "approval", "demo-hello").stdout)
    assert status["matches"] and status["current_code_digest"].startswith("sha256:")
    stale = jobgate(folder, "definitions", "approve", "demo-hello", "--digest", "sha256:" + "0" * 64, check=False)
    assert stale.returncode == 1 and status["current_digest"] in stale.stderr
    shown = jobgate(folder, "definitions", "approve", "demo-hello", "--digest", status["current_digest"]).stdout
    assert f"content {status['current_digest']}" in shown and "code    sha256:" in shown
    history = json.loads(jobgate(folder, "--json", "definitions", "approval", "demo-hello").stdout)["history"]
    assert len(history) == 2 and history[0]["approval_id"] < history[1]["approval_id"]  # the first approver stays


def test_tokens_belong_to_principals(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    made = json.loads(jobgate(folder, "--json", "tokens", "create", "--role", "admin", "--principal", "alice").stdout)
    assert made["principal"] == "alice" and made["minted_by"] == []
    plain = json.loads(jobgate(folder, "--json", "tokens", "create", "--role", "operator").stdout)
    assert plain["principal"] == f"token:{plain['token_id']}"
    bad = jobgate(folder, "tokens", "create", "--role", "admin", "--principal", "token:abc", check=False)
    assert bad.returncode == 1 and "principal" in bad.stderr


def test_tokens_list_shows_each_limit_and_revoke_names_the_tenant_it_looked_in(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    jobgate(folder, "tokens", "create", "--role", "activator", "--job", "demo-hello")
    other = json.loads(jobgate(folder, "--json", "tokens", "create", "--role", "admin", "--tenant", "tenb").stdout)
    table = jobgate(folder, "tokens", "list").stdout
    assert "jobs" in table and "demo-hello" in table and "all" in table  # a limited token never looks unlimited
    missed = jobgate(folder, "tokens", "revoke", other["token_id"], check=False)
    assert missed.returncode == 1 and "tenant 'default'" in missed.stderr and "--tenant" in missed.stderr
    jobgate(folder, "tokens", "revoke", other["token_id"], "--tenant", "tenb")


def test_init_production_turns_four_eyes_on_and_applies_nothing(tmp_path: Path) -> None:
    out = json.loads(jobgate(tmp_path, "--json", "init", "--production", "prod").stdout)
    assert out["applied"] == []
    folder = tmp_path / "prod"
    assert "four_eyes: true" in (folder / "jobgate.yaml").read_text()
    (folder / "definitions" / "hello.yaml").write_text(
        "job_definition_id: hello\njob_class: MAINTENANCE_JOB\nhandler: jobgate.standins:hello\n"
    )
    jobgate(folder, "apply", "definitions", "--by", "alice")
    own = jobgate(folder, "definitions", "approve", "hello", "--by", "alice", check=False)
    assert own.returncode == 1 and "four_eyes" in own.stderr
    jobgate(folder, "definitions", "approve", "hello", "--by", "bob")


def test_audit_verify_fails_closed_on_a_damaged_sink_file(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    sink = folder / "data" / "anchors" / "anchors.jsonl"
    sink.parent.mkdir(parents=True, exist_ok=True)
    sink.write_text("garbage{\n")
    refused = jobgate(folder, "audit", "verify", check=False)
    assert refused.returncode == 1 and "sink_unreadable" in refused.stderr and "line 1" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_audit_verify_fails_closed_when_the_http_sink_cannot_be_read(tmp_path: Path) -> None:
    from tests.runtime.local_http import closed_port_url

    jobgate(tmp_path, "init", "demo")
    folder = tmp_path / "demo"
    config = folder / "jobgate.yaml"
    config.write_text(config.read_text() + f"\nevidence:\n  anchor_sink_url: {closed_port_url()}secret-token\n")
    refused = jobgate(folder, "audit", "verify", check=False)
    assert refused.returncode == 1 and "sink_unreadable" in refused.stderr and "--offline" in refused.stderr
    assert "secret-token" not in refused.stderr + refused.stdout and "Traceback" not in refused.stderr
    offline = jobgate(folder, "audit", "verify", "--offline")
    assert offline.returncode == 0 and "not checked against the sink" in offline.stderr


def test_audit_list_shows_the_newest_entries_and_pages_on_from_a_position(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    every = json.loads(jobgate(folder, "--json", "audit", "list", "--limit", "100000").stdout)
    seqs = [e["seq"] for e in every]
    assert seqs == sorted(seqs) and len(seqs) > 3
    newest = jobgate(folder, "--json", "audit", "list", "--limit", "2")
    assert [e["seq"] for e in json.loads(newest.stdout)] == seqs[-2:]  # the newest, in chain order
    table = jobgate(folder, "audit", "list", "--limit", "2")
    assert "the newest 2 entries" in table.stderr and "--after 0" in table.stderr
    page = json.loads(jobgate(folder, "--json", "audit", "list", "--after", str(seqs[0]), "--limit", "2").stdout)
    assert [e["seq"] for e in page] == seqs[1:3]


def test_tokens_revoke_by_principal_and_neither_or_both_is_refused(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    made = [
        json.loads(jobgate(folder, "--json", "tokens", "create", "--role", "admin", "--principal", who).stdout)
        for who in ("eve", "EVE", "ada")  # one person to four eyes, and to off-boarding
    ]
    neither = jobgate(folder, "tokens", "revoke", check=False)
    assert neither.returncode == 1 and "give a token id, or --principal NAME" in neither.stderr
    both = jobgate(folder, "tokens", "revoke", made[2]["token_id"], "--principal", "eve", check=False)
    assert both.returncode == 1 and "not both" in both.stderr
    said = jobgate(folder, "tokens", "revoke", "--principal", "eve").stdout
    assert said.startswith("2 token(s) revoked") and made[0]["token_id"] in said and made[1]["token_id"] in said
    listed = {t["token_id"]: t for t in json.loads(jobgate(folder, "--json", "tokens", "list").stdout)}
    assert [listed[m["token_id"]]["revoked_at"] is not None for m in made] == [True, True, False]
    # found by a review: a lifetime past a date's range was an internal OverflowError (exit 70)
    for days in ("1e12", "3651"):
        long = jobgate(folder, "tokens", "create", "--role", "admin", "--expires-in-days", days, check=False)
        assert long.returncode == 2 and "--expires-in-days" in long.stderr and "Traceback" not in long.stderr
    assert len(json.loads(jobgate(folder, "--json", "tokens", "list").stdout)) == len(listed)  # none made
