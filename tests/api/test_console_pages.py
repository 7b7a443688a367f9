"""The console's overview and runs pages, through the application: each shows what the
caller's API call would return, and its form obeys the same rules (role, ownership, CSRF)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count

from jobgate.core.models import JobRun
from jobgate.core.records import AuditFilter, BreachRecord
from jobgate.core.states import RunStatus
from jobgate.core.tokens import Role
from jobgate.service import safemode, tokens


def _signed_in(w: World, tenant: str, role: Role) -> TestClient:
    client = TestClient(w.client.app, follow_redirects=False)
    page = client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    token = w.tokens[(tenant, role)]
    signed = client.post("/login", data={"csrf": csrf.group(1), "method": "token", "token": token})
    assert signed.status_code == 303, signed.text
    return client


def _csrf(page_text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page_text)
    assert found is not None
    return found.group(1)


def test_the_overview_counts_the_callers_tenant_only(world: World) -> None:
    world.new_run("acme")
    world.new_run("acme")
    world.new_run("other", job="shared-job")
    page = _signed_in(world, "acme", Role.CONSUMER).get("/")
    assert page.status_code == 200
    card = re.search(r'<div class="n">(\d+)</div>SCHEDULED', page.text)
    assert card is not None and card.group(1) == "2"
    safemode.activate(world.engine, "acme", actor="test", reason="quarter close")
    assert "Safe mode is on" in _signed_in(world, "acme", Role.CONSUMER).get("/").text
    assert "Safe mode is on" not in _signed_in(world, "other", Role.CONSUMER).get("/").text


def test_the_runs_page_lists_filters_and_hides_other_tenants(world: World) -> None:
    mine = world.new_run("acme")
    theirs = world.new_run("other", job="shared-job")
    client = _signed_in(world, "acme", Role.AUDITOR)
    listed = client.get("/runs")
    assert mine.job_run_id in listed.text and theirs.job_run_id not in listed.text
    assert mine.job_run_id not in client.get("/runs", params={"status": "COMPLETED"}).text
    assert client.get(f"/runs/{theirs.job_run_id}").status_code == 404
    detail = client.get(f"/runs/{mine.job_run_id}")
    assert detail.status_code == 200 and "SCHEDULED" in detail.text
    bound = re.search(r'id="run-bound">([^<]+)<code>([^<]+)</code>', detail.text)
    assert bound is not None and bound.group(1).startswith("python engine_handlers:succeed")  # target, code
    assert bound.group(2).startswith("sha256:")
    assert "Cancel run" not in detail.text  # an auditor controls no run


def test_cancel_from_the_run_page_needs_the_role_the_owner_and_the_token(world: World) -> None:
    run = world.new_run("acme")
    operator = _signed_in(world, "acme", Role.OPERATOR)
    page = operator.get(f"/runs/{run.job_run_id}")
    assert "Cancel run" in page.text
    forged = operator.post(f"/runs/{run.job_run_id}/cancel", data={"reason": "x", "csrf": "guess"})
    assert forged.status_code == 403
    consumer = _signed_in(world, "acme", Role.CONSUMER)
    refused = consumer.post(
        f"/runs/{run.job_run_id}/cancel", data={"reason": "x", "csrf": _csrf(consumer.get("/").text)}
    )
    assert refused.status_code == 403
    activator = _signed_in(world, "acme", Role.ACTIVATOR)  # not the run's requester
    assert "Cancel run" not in activator.get(f"/runs/{run.job_run_id}").text
    not_theirs = activator.post(
        f"/runs/{run.job_run_id}/cancel", data={"reason": "x", "csrf": _csrf(activator.get("/").text)}
    )
    assert not_theirs.status_code == 403
    # A reason longer than the API takes is refused naming the field, never cut short (found by a
    # review: the form kept the first 500 characters of any reason without a word).
    too_long = operator.post(f"/runs/{run.job_run_id}/cancel", data={"reason": "A" * 2001, "csrf": _csrf(page.text)})
    assert too_long.status_code == 422 and "reason" in too_long.text
    with world.engine.store.read() as tx:
        assert tx.run_get(run.job_run_id).status is RunStatus.SCHEDULED  # type: ignore[union-attr]
    why = "no longer needed " + "x" * 1500 + " END"
    done = operator.post(f"/runs/{run.job_run_id}/cancel", data={"reason": why, "csrf": _csrf(page.text)})
    assert done.status_code == 303
    after = operator.get(f"/runs/{run.job_run_id}")
    assert "CANCELLED" in after.text and "no longer needed" in after.text
    with world.engine.store.read() as tx:
        entries = tx.audit_list(AuditFilter(tenant_id="acme", target_type="run", target_id=run.job_run_id))
    assert why in [e.event.reason for e in entries]  # whole
    assert count(world.engine, "job_runs") == 1


def test_a_page_without_a_session_sends_the_browser_to_sign_in(world: World) -> None:
    client = TestClient(world.client.app, follow_redirects=False)
    for path in ("/", "/runs", f"/runs/{world.new_run('acme').job_run_id}"):
        response = client.get(path)
        assert response.status_code == 303 and response.headers["location"] == "/login", path
    posted = client.post("/runs/x/cancel", data={"reason": "x"})  # a form too: sign in, nothing done
    assert posted.status_code == 303 and posted.headers["location"] == "/login"


def test_four_eyes_through_the_request_pages(world: World) -> None:
    """A consumer proposes; an operator dry-runs and approves; an operator's own request shows
    them no approve button, and posting the form anyway is refused; a second operator approves."""
    consumer = _signed_in(world, "acme", Role.CONSUMER)
    chooser = consumer.get("/requests", params={"job": ACME_JOB})
    assert 'name="param.n"' in chooser.text and 'pattern="[0-9]{1,6}"' in chooser.text
    bad = consumer.post(
        "/requests",
        data={
            "csrf": _csrf(chooser.text),
            "job_definition_id": ACME_JOB,
            "param.n": "x;rm",
            "title": "t",
            "reason": "r",
        },
    )
    assert bad.status_code == 422 and "params.n" in bad.text and count(world.engine, "run_requests") == 0
    made = consumer.post(
        "/requests",
        data={
            "csrf": _csrf(chooser.text),
            "job_definition_id": ACME_JOB,
            "param.n": "7",
            "title": "month end",
            "reason": "close",
        },
    )
    assert made.status_code == 303
    path = made.headers["location"]
    assert "Approve and run" not in consumer.get(path).text  # a consumer reviews nothing
    operator = _signed_in(world, "acme", Role.OPERATOR)
    page = operator.get(path)
    assert "Dry run" in page.text and "Approve and run" in page.text
    assert operator.post(f"{path}/test", data={"csrf": _csrf(page.text)}).status_code == 303
    tested = operator.get(path)
    assert 'id="verdict">admissible' in tested.text
    assert operator.post(f"{path}/approve", data={"csrf": _csrf(tested.text), "note": "ok"}).status_code == 303
    approved = operator.get(path)
    assert 'id="request-status">approved' in approved.text and 'id="request-run"' in approved.text
    # The operator's own request: no button, and the form posted anyway is refused.
    own_form = operator.get("/requests", params={"job": ACME_JOB})
    own = operator.post(
        "/requests",
        data={
            "csrf": _csrf(own_form.text),
            "job_definition_id": ACME_JOB,
            "param.n": "8",
            "title": "mine",
            "reason": "r",
        },
    )
    own_path = own.headers["location"]
    own_page = operator.get(own_path)
    assert "Approve and run" not in own_page.text and "a second person decides" in own_page.text
    operator.post(f"{own_path}/test", data={"csrf": _csrf(own_page.text)})
    refused = operator.post(f"{own_path}/approve", data={"csrf": _csrf(own_page.text)})
    assert refused.status_code == 403 and "four_eyes" in refused.text
    admin = _signed_in(world, "acme", Role.ADMIN)
    second = admin.post(f"{own_path}/approve", data={"csrf": _csrf(admin.get(own_path).text)})
    assert second.status_code == 303 and count(world.engine, "job_runs") == 2


def test_a_definition_page_diffs_versions_and_approval_obeys_four_eyes(world: World, tmp_path: Path) -> None:
    """The page diffs any two versions; the approve form sends the digest it shows; the admin who
    applied a program cannot approve it (the page says why), a second person can."""
    admin = world.headers("acme", Role.ADMIN)
    doc = {"job_definition_id": "adhoc", "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print('one')"}
    assert world.client.post("/api/v1/definitions", json={"definitions": [doc]}, headers=admin).status_code == 200
    doc["body"] = "print('two <b>')"
    assert world.client.post("/api/v1/definitions", json={"definitions": [doc]}, headers=admin).status_code == 200
    applier = _signed_in(world, "acme", Role.ADMIN)
    page = applier.get("/definitions/adhoc", params={"from": 1, "to": 2})
    assert page.status_code == 200
    assert "version 1" in page.text and "version 2" in page.text and 'class="diff_chg"' in page.text
    assert "two &lt;b&gt;" in page.text and "<b>'" not in page.text  # the content is escaped in the diff
    digest = world.digest("adhoc")
    assert f'id="approve-digest">{digest}<' in page.text
    refused = applier.post("/definitions/adhoc/approve", data={"csrf": _csrf(page.text), "digest": digest})
    assert refused.status_code == 403 and "four_eyes" in refused.text
    stale = applier.post("/definitions/adhoc/approve", data={"csrf": _csrf(page.text), "digest": "sha256:" + "0" * 64})
    assert stale.status_code == 409 and "Not approved (conflict" in stale.text  # as the API answers it
    reviewer = tokens.create(world.engine, tenant_id="acme", role="admin", actor="root", principal="reviewer")
    second = TestClient(world.client.app, follow_redirects=False)
    login = second.get("/login")
    second.post("/login", data={"csrf": _csrf(login.text), "method": "token", "token": reviewer.token})
    review = second.get("/definitions/adhoc")
    assert (
        second.post("/definitions/adhoc/approve", data={"csrf": _csrf(review.text), "digest": digest}).status_code
        == 303
    )
    assert "Approved: the current content and code match" in second.get("/definitions/adhoc").text
    # found by a review: the revoke form's reason skipped the body rule (a NUL was a 500 on PostgreSQL)
    review = second.get("/definitions/adhoc")
    nul = second.post("/definitions/adhoc/revoke", data={"csrf": _csrf(review.text), "reason": "bad\x00reason"})
    assert nul.status_code == 422 and "NUL" in nul.text
    assert "Approved: the current content and code match" in second.get("/definitions/adhoc").text  # kept
    consumer = _signed_in(world, "acme", Role.CONSUMER)
    seen = consumer.get("/definitions/adhoc")
    assert seen.status_code == 200 and 'action="/definitions/adhoc/approve"' not in seen.text
    assert (
        consumer.post("/definitions/adhoc/approve", data={"csrf": _csrf(seen.text), "digest": digest}).status_code
        == 403
    )
    assert _signed_in(world, "other", Role.ADMIN).get("/definitions/adhoc").status_code == 404
    assert not (tmp_path / "ran").exists()


def test_the_api_docs_page_and_its_files_come_from_this_server(world: World) -> None:
    page = world.client.get("/docs")
    assert page.status_code == 200 and "/docs-assets/swagger-ui-bundle.js" in page.text
    assert "https://" not in page.text and "http://" not in page.text  # no CDN, no other origin
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"):
        assert world.client.get(f"/docs-assets/{asset}").status_code == 200
    assert world.client.get("/docs-assets/../../../etc/passwd").status_code == 404


def test_the_audit_page_pages_the_chain_and_verifies_it_for_auditors_only(world: World) -> None:
    world.new_run("acme")
    auditor = _signed_in(world, "acme", Role.AUDITOR)
    page = auditor.get("/audit")
    assert page.status_code == 200 and "token.created" in page.text and 'href="/audit"' in page.text
    checked = auditor.get("/audit", params={"verify": "true"})
    assert 'id="chain-result">Chain: ok' in checked.text and 'id="records-result">Records: ok' in checked.text
    operator = _signed_in(world, "acme", Role.OPERATOR)
    assert operator.get("/audit").status_code == 403 and 'href="/audit"' not in operator.get("/").text
    other = _signed_in(world, "other", Role.AUDITOR).get("/audit")
    assert other.status_code == 200 and "acme" not in other.text


def test_the_admin_page_switches_safe_mode_with_a_reason(world: World) -> None:
    admin = _signed_in(world, "acme", Role.ADMIN)
    page = admin.get("/admin")
    assert 'id="safe-state">Safe mode is <strong>off' in page.text
    empty = admin.post("/admin/safe-mode", data={"csrf": _csrf(page.text), "active": "true", "reason": " "})
    assert empty.status_code == 422 and safemode.status(world.engine, "acme") is None
    on = admin.post("/admin/safe-mode", data={"csrf": _csrf(page.text), "active": "true", "reason": "incident 42"})
    assert on.status_code == 303
    after = admin.get("/admin")
    assert (
        "Safe mode is <strong>on" in after.text
        and "incident 42" in after.text
        and "Safe mode is on since" in after.text
    )
    consumer = _signed_in(world, "acme", Role.CONSUMER)
    assert consumer.get("/admin").status_code == 403
    forged = consumer.post(
        "/admin/safe-mode", data={"csrf": _csrf(consumer.get("/").text), "active": "false", "reason": "x"}
    )
    assert forged.status_code == 403
    period = safemode.status(world.engine, "acme")
    assert period is not None and period.active
    # Found by a review: any value but "true", or none, switched safe mode off. Read as the API
    # reads it: "TRUE" is on; an unreadable or missing value is refused, naming the field.
    csrf = _csrf(admin.get("/admin").text)
    still = admin.post("/admin/safe-mode", data={"csrf": csrf, "active": "TRUE", "reason": "still on"})
    assert still.status_code == 409  # read as on: it is on already (read as off, it was switched off)
    for data in ({"active": "maybe"}, {}):
        refused = admin.post("/admin/safe-mode", data={"csrf": csrf, "reason": "meant on", **data})
        assert refused.status_code == 422 and "active" in refused.text, data
        period = safemode.status(world.engine, "acme")
        assert period is not None and period.active


def test_a_schedule_page_shows_its_next_fires_in_its_zone_and_pauses_for_operators(world: World) -> None:
    from jobgate.service import schedules

    now = world.engine.clock.now()
    doc = {"id": "paris-morning", "job": ACME_JOB, "every_seconds": 86400, "timezone": "Europe/Paris", "tenant": "acme"}
    schedules.put_schedules(world.engine, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
    operator = _signed_in(world, "acme", Role.OPERATOR)
    assert "paris-morning" in operator.get("/schedules").text
    page = operator.get("/schedules/paris-morning")
    assert page.status_code == 200 and "Europe/Paris" in page.text
    pairs = re.findall(r"<td>(\d{4}-[^<]+\+0[12]:00)</td><td>(\d{4}-[^<]+\+00:00)</td>", page.text)
    assert len(pairs) == 5, page.text  # each fire in Paris time (+01:00 or +02:00) and in UTC
    for local, utc in pairs:
        assert datetime.fromisoformat(local) == datetime.fromisoformat(utc)
    paused = operator.post("/schedules/paris-morning/pause", data={"csrf": _csrf(page.text)})
    assert paused.status_code == 303
    assert 'id="schedule-state">paused' in operator.get("/schedules/paris-morning").text
    consumer = _signed_in(world, "acme", Role.CONSUMER)
    seen = consumer.get("/schedules/paris-morning")
    assert "Resume" not in seen.text and "Pause" not in seen.text
    assert consumer.post("/schedules/paris-morning/resume", data={"csrf": _csrf(seen.text)}).status_code == 403
    assert _signed_in(world, "other", Role.OPERATOR).get("/schedules/paris-morning").status_code == 404
    # found by a review: the page looked its schedule up among the tenant's first 500 (a 500 past them)
    many = [
        schedules.schedule_from_document({**doc, "id": f"m{i:04d}"}, now=now) for i in range(510)
    ]  # sorted before "paris-morning"... and "zz-last" after all of them
    many.append(schedules.schedule_from_document({**doc, "id": "zz-last"}, now=now))
    schedules.put_schedules(world.engine, many, source="test", now=now)
    assert operator.get("/schedules/zz-last").status_code == 200


def test_a_workflow_page_draws_its_bound_step_graph(world: World) -> None:
    from tests.helpers import define

    from jobgate.core.models import Scope
    from jobgate.service.workflows import StartWorkflow, start_workflow

    steps = [
        {"id": "extract", "job": ACME_JOB, "params": {"n": "1"}},
        {"id": "check", "job": ACME_JOB, "params": {"n": "2"}, "depends_on": ["extract"]},
        {"id": "report", "job": ACME_JOB, "params": {"n": "3"}, "depends_on": ["extract"]},
    ]
    define(world.engine, job_definition_id="flow3", tenant_id="acme", handler=None, workflow={"steps": steps})
    record, _ = start_workflow(world.engine, StartWorkflow("flow3", scope=Scope(tenant_id="acme")), actor="test")
    client = _signed_in(world, "acme", Role.CONSUMER)
    assert record.workflow_run_id in client.get("/workflows").text
    page = client.get(f"/workflows/{record.workflow_run_id}")
    assert page.status_code == 200
    assert sorted(re.findall(r'data-step="([a-z]+)"', page.text)) == ["check", "extract", "report"]
    assert page.text.count("<line ") == 2 and 'data-live="true"' in page.text  # redrawn while it runs
    assert _signed_in(world, "other", Role.ADMIN).get(f"/workflows/{record.workflow_run_id}").status_code == 404
    from jobgate.runtime.coordinator import WorkflowCoordinator

    WorkflowCoordinator(world.engine).pass_once()  # its first step RUNNING: its run made, not started
    started = client.get(f"/workflows/{record.workflow_run_id}").text
    assert '<td>extract</td><td>RUNNING <span class="run-status">(its run is SCHEDULED)</span>' in started


def test_a_workflow_graph_links_a_step_to_the_one_before_it_when_it_names_none(world: World) -> None:
    """A step without ``depends_on`` waits for the step before it: the graph draws that edge too
    (found by a review: such steps were drawn as unlinked roots)."""
    from tests.helpers import define

    from jobgate.core.models import Scope
    from jobgate.service.workflows import StartWorkflow, start_workflow

    steps = [
        {"id": "first", "job": ACME_JOB, "params": {"n": "1"}},
        {"id": "second", "job": ACME_JOB, "params": {"n": "2"}},
        {"id": "third", "job": ACME_JOB, "params": {"n": "3"}, "depends_on": []},
    ]
    define(world.engine, job_definition_id="seq3", tenant_id="acme", handler=None, workflow={"steps": steps})
    record, _ = start_workflow(world.engine, StartWorkflow("seq3", scope=Scope(tenant_id="acme")), actor="test")
    page = _signed_in(world, "acme", Role.CONSUMER).get(f"/workflows/{record.workflow_run_id}").text
    assert page.count("<line ") == 1  # first -> second; third is a root of its own
    boxes = dict(re.findall(r'data-step="([a-z]+)"[^>]*>\s*<rect x="(\d+)"', page))
    assert boxes and boxes["first"] == boxes["third"] != boxes["second"], boxes


def test_a_run_page_shows_its_log_and_offers_its_artifact_with_the_digest(world: World) -> None:
    import hashlib

    run = world.running_run("acme")
    world.log_for(run, "line 1\nline <2>\n")
    world.artifact_for(run, b"quarterly report")
    client = _signed_in(world, "acme", Role.AUDITOR)
    page = client.get(f"/runs/{run.job_run_id}")
    digest = "sha256:" + hashlib.sha256(b"quarterly report").hexdigest()  # as the runner records it
    assert "line 1\nline &lt;2&gt;" in page.text and f'id="artifact-sha256">{digest}<' in page.text
    end = re.search(r'data-end="(\d+)"', page.text)
    assert end is not None and int(end.group(1)) == len("line 1\nline <2>\n")
    download = client.get(f"/runs/{run.job_run_id}/artifact")
    assert download.content == b"quarterly report" and download.headers["x-artifact-sha256"] == digest
    more = client.get(f"/runs/{run.job_run_id}/log", params={"offset": 7})
    assert more.text == "line <2>\n" and more.headers["x-log-end"] == end.group(1)
    for private in (download, more):  # signed-in content: never kept, never sniffed (found by a review)
        assert private.headers["cache-control"] == "no-store"
        assert private.headers["x-content-type-options"] == "nosniff"
    assert _signed_in(world, "other", Role.ADMIN).get(f"/runs/{run.job_run_id}/artifact").status_code == 404


def test_the_overview_shows_the_last_day_breaches_and_failing_schedules_in_scope(world: World) -> None:
    """The day's chart counts the caller's ended runs only (tenant, and definitions for a
    limited token); SLA breaches and failing schedules are listed from the API's own reads."""
    from sqlalchemy import text

    from jobgate.testing import connection

    world.terminal_run("acme")
    world.terminal_run("acme")
    control_cancel(world, world.new_run("other", job="shared-job"))
    control_cancel(world, world.new_run("acme", job="shared-job"))
    schedule_id = world.schedule("acme")
    with world.engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE schedules SET failures = 3, last_error = 'planner crashed' WHERE schedule_id = :s"),
            {"s": schedule_id},
        )
    assert "No SLA breach recorded" in _signed_in(world, "acme", Role.AUDITOR).get("/").text
    late = world.new_run("acme", job="shared-job")
    now = world.engine.clock.now()
    with world.engine.store.write() as tx:
        tx.sla.breach_insert(
            BreachRecord(
                "breach-1",
                "acme",
                "run",
                late.job_run_id,
                late.job_class,
                "shared-job",
                None,
                "sla_deadline",
                "breach",
                "tight",
                now,
                now,
                "high",
                True,
            )
        )
    page = _signed_in(world, "acme", Role.AUDITOR).get("/")
    assert re.search(r'id="day-total">3 runs ended', page.text), page.text
    assert page.text.count('data-outcome="CANCELLED"') == 1  # one bar: the hour under way
    assert late.job_run_id in page.text.split('id="breaches"')[1].split("</table>")[0]
    assert schedule_id in page.text.split('id="failing"')[1].split("</ul>")[0]
    limited = tokens.create(
        world.engine, tenant_id="acme", role=Role.AUDITOR.value, actor="test", label="limited", jobs=[ACME_JOB]
    )
    client = TestClient(world.client.app, follow_redirects=False)
    csrf = _csrf(client.get("/login").text)
    assert client.post("/login", data={"csrf": csrf, "method": "token", "token": limited.token}).status_code == 303
    mine = client.get("/")
    assert re.search(r'id="day-total">2 runs ended', mine.text), mine.text
    assert 'id="evidence-title"' not in mine.text  # the tenant's evidence backlog is not a limited token's
    assert 'id="breaches"' not in mine.text  # the breach is of another definition's run


def control_cancel(world: World, run: JobRun) -> None:
    from jobgate.service import control

    control.cancel_run(world.engine, run.job_run_id, actor="test", tenant_id=run.tenant_id)


def test_the_audit_page_shows_an_entrys_proof_and_hands_out_verifiable_bundles(world: World) -> None:
    from jobgate.evidence import keys as evidence_keys
    from jobgate.export.bundles import verify_bundle

    signer = evidence_keys.ensure(world.engine.config)
    run = world.terminal_run("acme")
    auditor = _signed_in(world, "acme", Role.AUDITOR)
    waiting = auditor.get("/audit/proof", params={"seq": 1})
    assert waiting.status_code == 404 and "not anchored yet" in waiting.text
    world.anchored("acme")
    shown = auditor.get("/audit/proof", params={"seq": 1})
    assert shown.status_code == 200 and 'id="proof-summary">Entry 1 ' in shown.text
    assert 'id="evidence-link" href="/evidence?job_run_id=' in auditor.get(f"/runs/{run.job_run_id}").text
    bundle = auditor.get("/evidence", params={"job_run_id": run.job_run_id, "workflow_run_id": ""})
    assert bundle.status_code == 200 and bundle.headers["content-type"] == "application/zip"
    assert verify_bundle(bundle.content, public_keys={signer.key_id: signer.public_b64}).ok
    period = auditor.get("/evidence", params={"from": "2000-01-01T00:00", "to": "2999-01-01T00:00"})
    assert period.status_code == 200 and verify_bundle(period.content).ok
    refused = auditor.get("/evidence", params={"job_run_id": run.job_run_id, "job_definition_id": ACME_JOB})
    assert refused.status_code == 422 and "scope" in refused.text
    assert auditor.get("/evidence", params={"job_run_id": "../x"}).status_code == 422
    assert auditor.get("/evidence", params={"from": "yesterday", "to": "2999-01-01T00:00"}).status_code == 422
    operator = _signed_in(world, "acme", Role.OPERATOR)
    assert "evidence-link" not in operator.get(f"/runs/{run.job_run_id}").text
    assert operator.get("/evidence", params={"job_run_id": run.job_run_id}).status_code == 403
    assert operator.get("/audit/proof", params={"seq": 1}).status_code == 403


def test_a_token_minted_in_the_console_never_outlives_the_session_s_token(world: World) -> None:
    """Found by a review: the console rebuilt its principal from the session without the
    credential's expiry, so a five-minute admin token signed in could mint one for ever."""
    from datetime import timedelta

    short = tokens.create(world.engine, tenant_id="acme", role="admin", actor="t", expires_in=timedelta(minutes=5))
    client = TestClient(world.client.app, follow_redirects=False)
    csrf = _csrf(client.get("/login").text)
    assert client.post("/login", data={"csrf": csrf, "method": "token", "token": short.token}).status_code == 303
    made = client.post(
        "/admin/tokens", data={"csrf": _csrf(client.get("/admin").text), "role": "admin", "expires_in_days": ""}
    )
    assert made.status_code == 201, made.text
    token_id = re.search(r"Token <code>([^<]+)</code> \(admin", made.text)
    assert token_id is not None
    [child] = [t for t in tokens.listed(world.engine, "acme") if t.token_id == token_id.group(1)]
    assert child.expires_at == short.stored.expires_at


def test_an_admin_creates_a_token_sees_its_secret_once_and_revokes_it(world: World) -> None:
    admin = _signed_in(world, "acme", Role.ADMIN)
    page = admin.get("/admin")
    assert 'id="settings"' in page.text and "governance.four_eyes" in page.text
    csrf = _csrf(page.text)
    made = admin.post(
        "/admin/tokens",
        data={"csrf": csrf, "label": "reports", "role": "consumer", "jobs": f"{ACME_JOB}", "expires_in_days": "30"},
    )
    assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
    secret = re.search(r'id="new-secret" type="text" readonly value="([^"]+)"', made.text)
    assert secret is not None
    token_id = re.search(r"Token <code>([^<]+)</code> \(consumer", made.text)
    assert token_id is not None
    assert world.client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret.group(1)}"}).status_code == 200
    again = admin.get("/admin")
    assert secret.group(1) not in again.text and token_id.group(1) in again.text  # listed, its secret never again
    before = len(tokens.listed(world.engine, "acme"))
    bad = admin.post("/admin/tokens", data={"csrf": csrf, "role": "emperor", "expires_in_days": "7"})
    assert bad.status_code == 422 and "role" in bad.text
    for days in ("x", "\u00b2", "\u0663", "1.5", "0", "-1", "99999999999", "3651"):  # ², Arabic-Indic 3
        bad = admin.post("/admin/tokens", data={"csrf": csrf, "role": "consumer", "expires_in_days": days})
        assert bad.status_code == 422 and "expires_in_days" in bad.text, days
        assert "expires_in_seconds" not in bad.text, days  # the form's own field, never the API's
    assert len(tokens.listed(world.engine, "acme")) == before
    assert admin.post("/admin/tokens", data={"csrf": "forged", "role": "admin"}).status_code == 403
    assert len(tokens.listed(world.engine, "acme")) == before
    revoked = admin.post(f"/admin/tokens/{token_id.group(1)}/revoke", data={"csrf": csrf})
    assert revoked.status_code == 303
    assert world.client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret.group(1)}"}).status_code == 401
    operator = _signed_in(world, "acme", Role.OPERATOR)
    assert (
        operator.post("/admin/tokens", data={"csrf": _csrf(operator.get("/").text), "role": "admin"}).status_code == 403
    )
    assert len(tokens.listed(world.engine, "acme")) == before


def test_the_run_page_offers_each_action_its_state_and_role_allow_and_the_server_agrees(world: World) -> None:
    """Stop for a running run, retry for a finished one (landing on the new run), requeue of a
    dead letter for operators; a forged form for an action the run's state refuses answers the
    API's 409 and changes nothing."""
    from tests.helpers import define
    from tests.runtime.runtime_support import running_worker, wait_status

    from jobgate.core.models import Scope
    from jobgate.service.submission import SubmitRequest

    operator = _signed_in(world, "acme", Role.OPERATOR)
    csrf = _csrf(operator.get("/").text)
    running = world.running_run("acme")
    page = operator.get(f"/runs/{running.job_run_id}").text
    assert 'id="stop-form"' in page and 'id="cancel-form"' not in page and 'id="retry-form"' not in page
    stopped = operator.post(f"/runs/{running.job_run_id}/stop", data={"csrf": csrf, "reason": "wrong month"})
    assert stopped.status_code == 303
    with world.engine.store.read() as tx:
        assert tx.runs_stop_requested([running.job_run_id]) == {running.job_run_id}

    finished = world.terminal_run("acme")
    assert 'id="retry-form"' in operator.get(f"/runs/{finished.job_run_id}").text
    retried = operator.post(f"/runs/{finished.job_run_id}/retry", data={"csrf": csrf})
    assert retried.status_code == 303 and retried.headers["location"] != f"/runs/{finished.job_run_id}"
    pending_id = retried.headers["location"].rsplit("/", 1)[1]
    with world.engine.store.read() as tx:
        before = tx.run_transitions(pending_id)
    refused = operator.post(f"/runs/{pending_id}/stop", data={"csrf": csrf, "reason": "x"})
    assert refused.status_code == 409 and "Not stopped" in refused.text
    with world.engine.store.read() as tx:
        assert tx.run_transitions(pending_id) == before

    dead = define(world.engine, job_definition_id="acme-dies", tenant_id="acme", handler="engine_handlers:fail_final")
    lettered = world.engine.submit(SubmitRequest(dead, scope=Scope(tenant_id="acme"))).run.job_run_id
    with running_worker(world.engine):
        wait_status(world.engine, lettered, RunStatus.DEAD_LETTERED)
    assert 'id="requeue-form"' in operator.get(f"/runs/{lettered}").text
    activator = _signed_in(world, "acme", Role.ACTIVATOR)  # requeue is an operator's
    assert 'id="requeue-form"' not in activator.get(f"/runs/{lettered}").text
    assert activator.post(f"/runs/{lettered}/requeue", data={"csrf": _csrf(activator.get("/").text)}).status_code == 403
    assert operator.post(f"/runs/{lettered}/requeue", data={"csrf": csrf}).status_code == 303
    with world.engine.store.read() as tx:
        found = tx.run_get(lettered)
    assert found is not None and found.status is not RunStatus.DEAD_LETTERED


def test_the_runs_page_takes_the_apis_filters_and_names_a_bad_one(world: World) -> None:
    mine = world.new_run("acme")
    shared = world.new_run("acme", job="shared-job")
    client = _signed_in(world, "acme", Role.AUDITOR)
    by_class = client.get("/runs", params={"job_class": mine.job_class, "job_definition_id": ACME_JOB})
    assert mine.job_run_id in by_class.text and shared.job_run_id not in by_class.text
    created = mine.created_at.strftime("%Y-%m-%dT%H:%M")
    later = client.get("/runs", params={"created_from": "2999-01-01T00:00"})
    assert later.status_code == 200 and mine.job_run_id not in later.text
    period = client.get("/runs", params={"created_from": created, "created_to": "2999-01-01T00:00"})
    assert mine.job_run_id in period.text and shared.job_run_id in period.text
    assert client.get("/runs", params={"trigger_type": "cron"}).text.count("/runs/TG") == 0
    bad_status = client.get("/runs", params={"status": "DONE"})
    assert bad_status.status_code == 422 and "status: not one of" in bad_status.text
    bad_time = client.get("/runs", params={"created_from": "last week"})
    assert bad_time.status_code == 422 and "created_from" in bad_time.text


def test_a_refused_console_page_is_a_page_naming_the_code_and_field(world: World) -> None:
    """A role refusal, a missing record, an unknown or malformed parameter: the console's own
    page (navigation, the reason, a way back), never the API's JSON, and nothing changed."""
    auditor = _signed_in(world, "acme", Role.AUDITOR)
    operator = _signed_in(world, "acme", Role.OPERATOR)
    approvals = count(world.engine, "definition_approvals")
    cases = [
        (auditor.get("/admin"), 403, "forbidden"),
        (auditor.post(f"/definitions/{ACME_JOB}/approve", data={"csrf": _csrf(auditor.get("/").text)}), 403, "role"),
        (operator.get("/runs/doesnotexist"), 404, "job_run_id"),
        (operator.get("/runs", params={"limit": "5"}), 400, "limit"),
        (operator.get(f"/definitions/{ACME_JOB}", params={"from": "abc"}), 422, "from"),
    ]
    for response, status, named in cases:
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("text/html"), response.text
        assert "<nav" in response.text and named in response.text and 'href="/"' in response.text
    assert count(world.engine, "definition_approvals") == approvals
