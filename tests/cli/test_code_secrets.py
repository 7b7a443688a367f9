"""A runner's environment and an HTTP target's URL can hold secrets (an API key, a password, a
key in the query): found by a review, both were written in plain text into each approval's
code identity, so into the audit chain (kept for good) and every evidence bundle, and the URL
into every run's log, which every role reads. The code identity binds them by digest; the log
names the target by scheme and host."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.test_cli import jobgate

from jobgate.core.code_identity import CodeIdentity, environment_part, protected, url_parts

SECRETS = ("S3CRET_ENV_VALUE", "S3CRET_URL_PASSWORD", "S3CRET_QUERY_KEY", "s3cret-path")


def _site(tmp_path: Path) -> Path:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    marker = tmp_path / "marker.txt"
    config = (folder / "jobgate.yaml").read_text()
    config = config.replace(
        "runners:\n",
        "runners:\n"
        "  keyed:\n"
        "    binary: python3\n"
        f"    args: [\"-c\", \"import os; open({str(marker)!r}, 'w').write(os.environ['API_KEY'])\"]\n"
        "    executes_body: false\n"
        "    env: {API_KEY: S3CRET_ENV_VALUE}\n",
        1,
    )
    config = config.replace(
        "targets:\n",
        "targets:\n"
        "  MEID_TRUST_SEC_HTTP:\n"
        "    cmi: vera.TG-SEC.ENGINE.HTTP.1_0_0\n"
        "    http: {url: 'http://user:S3CRET_URL_PASSWORD@127.0.0.1:9/s3cret-path?key=S3CRET_QUERY_KEY',"
        " timeout_seconds: 2}\n",
        1,
    )
    (folder / "jobgate.yaml").write_text(config)
    (folder / "definitions" / "keyed.yaml").write_text(
        "job_definition_id: keyed\njob_class: MAINTENANCE_JOB\nrunner: keyed\nbody: x\n"
    )
    (folder / "definitions" / "posting.yaml").write_text(
        "job_definition_id: posting\njob_class: MAINTENANCE_JOB\ntarget_engine_meid: MEID_TRUST_SEC_HTTP\n"
        "retry_policy: no_retry_v1\n"
    )
    return folder


def test_secrets_reach_no_approval_audit_entry_bundle_or_log_and_the_code_is_still_bound(tmp_path: Path) -> None:
    folder = _site(tmp_path)
    jobgate(folder, "apply", "definitions/keyed.yaml", "definitions/posting.yaml", "--by", "alice")
    keyed = json.loads(jobgate(folder, "--json", "definitions", "approve", "keyed", "--by", "bob").stdout)
    posting = json.loads(jobgate(folder, "--json", "definitions", "approve", "posting", "--by", "bob").stdout)
    assert json.loads(keyed["code_identity"]["environment"]) == {
        "API_KEY": "sha256:" + __import__("hashlib").sha256(b"S3CRET_ENV_VALUE").hexdigest()
    }
    assert posting["code_identity"]["url"] == "http://127.0.0.1:9"
    assert posting["code_identity"]["url_sha256"].startswith("sha256:")
    runs = [jobgate(folder, "submit", job).stdout.strip() for job in ("keyed", "posting")]
    jobgate(folder, "worker", "--exit-when-idle", timeout=90)
    assert (tmp_path / "marker.txt").read_text() == "S3CRET_ENV_VALUE"  # the runner still gets its environment
    log = jobgate(folder, "runs", "log", runs[1]).stdout
    assert "POST http://127.0.0.1:9 failed" in log
    jobgate(folder, "evidence", "export", runs[0], "--out", str(tmp_path / "keyed.zip"))
    seen = {
        "approval outputs": json.dumps([keyed, posting]),
        "run log": log,
        "audit log": jobgate(folder, "--json", "audit", "list", "--limit", "1000").stdout,
        "bundle": (tmp_path / "keyed.zip").read_bytes().decode("latin-1"),
        "database": (folder / "jobgate.db").read_bytes().decode("latin-1"),
        "run files": "".join(p.read_text("utf-8", "replace") for p in (folder / "data").rglob("*") if p.is_file()),
    }
    for where, text in seen.items():
        assert not [s for s in SECRETS if s in text], where


def test_an_approval_recorded_with_the_values_still_matches_and_shows_none(tmp_path: Path) -> None:
    """Approvals recorded before (the values themselves, and the digest over them) are read in
    today's form when their stored pair agrees: the runs they admitted still run; a row whose
    identity was edited by hand keeps a digest no code matches."""
    folder = _site(tmp_path)
    jobgate(folder, "apply", "definitions/keyed.yaml", "--by", "alice")
    jobgate(folder, "definitions", "approve", "keyed", "--by", "bob")
    with sqlite3.connect(folder / "jobgate.db") as db:
        (identity_text,) = db.execute(
            "SELECT code_identity FROM definition_approvals WHERE job_definition_id='keyed'"
        ).fetchone()
        legacy = json.loads(identity_text)
        legacy.pop("environment")
        legacy["env"] = json.dumps({"API_KEY": "S3CRET_ENV_VALUE"}, separators=(",", ":"), sort_keys=True)
        db.execute(
            "UPDATE definition_approvals SET code_identity=?, code_digest=? WHERE job_definition_id='keyed'",
            (json.dumps(legacy), CodeIdentity(legacy).digest),
        )
    shown = json.loads(jobgate(folder, "--json", "definitions", "approval", "keyed").stdout)
    assert shown["matches"], shown
    assert "S3CRET_ENV_VALUE" not in json.dumps(shown)
    run = jobgate(folder, "submit", "keyed").stdout.strip()
    jobgate(folder, "worker", "--exit-when-idle", timeout=90)
    assert json.loads(jobgate(folder, "--json", "runs", "show", run).stdout)["run"]["status"] == "COMPLETED"
    with sqlite3.connect(folder / "jobgate.db") as db:  # edited by hand: the digest no longer agrees
        db.execute(
            "UPDATE definition_approvals SET code_identity=? WHERE job_definition_id='keyed'",
            (json.dumps({**legacy, "env": '{"API_KEY":"other"}'}),),
        )
    assert not json.loads(jobgate(folder, "--json", "definitions", "approval", "keyed").stdout)["matches"]


def test_protected_is_the_form_the_reader_writes_and_leaves_it_unchanged() -> None:
    env = {"API_KEY": "k", "REGION": "eu"}
    today = {"runner": "r", "environment": environment_part(env)}
    assert protected({"runner": "r", "env": json.dumps(env)}) == today
    assert protected(today) == today
    url = "https://u:p@h.example:8443/hook/abc?key=z"
    assert protected({"url": url, "method": "POST"}) == {**url_parts(url), "method": "POST"}
    assert protected({**url_parts(url), "method": "POST"}) == {**url_parts(url), "method": "POST"}
    assert url_parts(url)["url"] == "https://h.example:8443"
    assert protected({"env": "not json"}) == {"env": "not json"}  # not jobgate's: shown as it is
