"""The console in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium; ``.ci/run`` installs them when missing): sign in, the overview, the runs
list, a run's page and its cancel form, what a consumer is not shown, and that no page asks
another origin for anything. Screenshots go to ``test-artifacts/console/``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from tests.api.conftest import World
from tests.runtime.runtime_support import wait_until

from jobgate.core.tokens import Role
from jobgate.service import safemode

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def served(world: World) -> Iterator[str]:
    """The application on a real socket of 127.0.0.1, served by uvicorn from a thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(world.client.app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30, what="uvicorn started")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are not installed (.ci/run installs them)")
        pytest.skip("chromium and chromium-driver are not installed")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(15)
    try:
        yield driver
    finally:
        driver.quit()


def _click_by_id(driver: Any, element_id: str, attempts: int = 5) -> None:
    """Click the element with ``element_id`` on a page that redraws itself in place (a live run
    page): an element found just before a redraw is stale by the click, so it is found again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for attempt in range(attempts):
        try:
            driver.find_element(By.ID, element_id).click()
            return
        except StaleElementReferenceException:
            if attempt == attempts - 1:
                raise


def _go(driver: Any, element: Any) -> None:
    """Click what navigates (a link, a form's button) and wait until the next page replaced this one."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(_: Any) -> bool:
        try:
            page.is_enabled()
        except WebDriverException:  # stale, or "does not belong to the document" mid-navigation
            return True
        return False

    WebDriverWait(driver, 30).until(replaced)  # generous: CI runs this beside the whole suite


def _text_of(driver: Any, element_id: str, by: str = "id") -> str | None:
    """An element's text now, or None while the page's script is replacing it (the run and
    workflow pages redraw their content in place as the run's events arrive, at once for a run
    that has ended)."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        text: str = driver.find_element(by, element_id).text
    except StaleElementReferenceException:
        return None
    return text


def _absent(driver: Any, by: str, value: str) -> bool:
    """Whether the page has no such element, asked at once (not after the implicit wait)."""
    driver.implicitly_wait(0)
    try:
        return driver.find_elements(by, value) == []
    finally:
        driver.implicitly_wait(15)


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _sign_in(driver: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/login")
    field = driver.find_element(By.ID, "token")
    field.send_keys(token)
    _go(driver, driver.find_element(By.XPATH, "//form[.//input[@id='token']]//button"))
    wait_until(lambda: driver.current_url == f"{base}/", timeout=30, what="the overview after signing in")


def _origins(driver: Any) -> set[str]:
    """Every origin the browser sent a request to, from Chromium's network log. A request the
    page's own Content-Security-Policy blocked never left the browser and is not counted."""
    asked: dict[str, str] = {}
    blocked: set[str] = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message.get("method") == "Network.requestWillBeSent":
            asked[params["requestId"]] = params["request"]["url"]
        elif message.get("method") == "Network.loadingFailed" and params.get("blockedReason") == "csp":
            blocked.add(params["requestId"])
    return {
        "/".join(url.split("/")[:3])
        for request_id, url in asked.items()
        if request_id not in blocked and not url.startswith(("data:", "about:", "blob:"))
    }


def test_an_operator_signs_in_finds_a_run_and_cancels_it(world: World, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = world.new_run("acme")
    _sign_in(browser, served, world.tokens[("acme", Role.OPERATOR)])
    assert "Overview" in browser.find_element(By.TAG_NAME, "h1").text
    _shot(browser, "overview")
    _go(browser, browser.find_element(By.LINK_TEXT, "Runs"))
    _go(browser, browser.find_element(By.LINK_TEXT, run.job_run_id))
    assert browser.find_element(By.ID, "run-status").text == "SCHEDULED"
    _shot(browser, "run")
    reason = browser.find_element(By.ID, "cancel-reason")  # a labelled control
    assert browser.find_element(By.CSS_SELECTOR, "label[for=cancel-reason]").text == "Reason"
    reason.send_keys("no longer needed")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Cancel run']"))
    wait_until(lambda: _text_of(browser, "run-status") == "CANCELLED", timeout=30, what="the run cancelled")
    assert "no longer needed" in browser.page_source
    browser.get(f"{served}/runs")
    _shot(browser, "runs")
    browser.set_window_size(390, 844)  # a phone's width: the same page, still usable
    browser.get(f"{served}/runs/{run.job_run_id}")
    _shot(browser, "run-phone")
    assert _origins(browser) == {served}  # nothing from another origin: no CDN, no font, no beacon


def test_a_consumer_sees_no_control_and_a_forged_post_is_refused(world: World, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = world.new_run("acme")
    _sign_in(browser, served, world.tokens[("acme", Role.CONSUMER)])
    browser.get(f"{served}/runs/{run.job_run_id}")
    assert browser.find_element(By.ID, "run-status").text == "SCHEDULED"
    assert _absent(browser, By.CSS_SELECTOR, "form.run-action")
    assert _absent(browser, By.LINK_TEXT, "Admin") and _absent(browser, By.LINK_TEXT, "Audit")
    # Forms the page does not offer, posted anyway from the signed-in browser with its own CSRF
    # token: the role is refused (403) and nothing changes; without the token, refused too.
    forged = """
    const done = arguments[arguments.length - 1];
    const csrf = document.querySelector('input[name=csrf]').value;
    const post = (path, body) => fetch(path, {method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: new URLSearchParams(body)});
    Promise.all([
      post('/admin/safe-mode', {csrf: csrf, active: 'true', reason: 'forged'}),
      post('/runs/' + arguments[0] + '/cancel', {csrf: csrf, reason: 'forged'}),
      post('/runs/' + arguments[0] + '/cancel', {reason: 'no token'}),
    ]).then(rs => done(rs.map(r => r.status)));
    """
    assert browser.execute_async_script(forged, run.job_run_id) == [403, 403, 403]
    assert safemode.status(world.engine, "acme") is None
    with world.engine.store.read() as tx:
        still = tx.run_get(run.job_run_id)
    assert still is not None and still.status.value == "SCHEDULED"
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
    wait_until(lambda: browser.current_url == f"{served}/login", timeout=30, what="the sign-in page")
    browser.get(f"{served}/runs")
    assert browser.current_url == f"{served}/login"  # signed out: pages send the browser to sign in


def _sign_out(driver: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    _go(driver, driver.find_element(By.XPATH, "//button[text()='Sign out']"))
    wait_until(lambda: driver.current_url == f"{base}/login", timeout=30, what="the sign-in page")


def test_four_eyes_end_to_end_and_the_run_completes_live(world: World, served: str, browser: Any) -> None:
    """A consumer requests a run (its parameter checked as typed); an operator dry-runs and
    approves it; the run page follows the run to COMPLETED without a reload. The operator's own
    request offers them no approval."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from tests.runtime.runtime_support import running_worker

    _sign_in(browser, served, world.tokens[("acme", Role.CONSUMER)])
    browser.get(f"{served}/requests?job=acme-job")
    n = browser.find_element(By.ID, "param-n")
    n.send_keys("5x")  # checked as typed against the declared pattern [0-9]{1,6}
    assert n.get_attribute("aria-invalid") == "true"
    assert "Does not match the declared pattern" in browser.find_element(By.ID, "param-n-hint").text
    n.send_keys(Keys.BACKSPACE)
    assert n.get_attribute("aria-invalid") == "false" and browser.find_element(By.ID, "param-n-hint").text == ""
    label = browser.find_element(By.ID, "param-label")  # [A-Za-z][A-Za-z0-9 _.-]{0,15}: no valid "v" pattern
    label.send_keys("<bad>!")
    assert label.get_attribute("aria-invalid") == "true"
    assert "Does not match the declared pattern" in browser.find_element(By.ID, "param-label-hint").text
    for _ in "<bad>!":
        label.send_keys(Keys.BACKSPACE)
    label.send_keys("Q4 close-v2.1")
    assert label.get_attribute("aria-invalid") == "false"
    browser.find_element(By.ID, "title").send_keys("month end")
    browser.find_element(By.ID, "reason").send_keys("close the books")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Submit request']"))
    assert browser.find_element(By.ID, "request-status").text == "pending"
    request_url = browser.current_url
    _sign_out(browser, served)

    _sign_in(browser, served, world.tokens[("acme", Role.OPERATOR)])
    browser.get(request_url)
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Dry run']"))
    assert browser.find_element(By.ID, "verdict").text == "admissible"
    _shot(browser, "request")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Approve and run']"))
    assert browser.find_element(By.ID, "request-status").text == "approved"
    _go(browser, browser.find_element(By.ID, "request-run"))
    status = browser.find_element(By.ID, "run-status")
    assert status.text == "SCHEDULED"
    with running_worker(world.engine):
        wait_until(
            lambda: _text_of(browser, "run-status") == "COMPLETED", timeout=30, what="the run page showing COMPLETED"
        )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#transitions tr")) >= 5  # rows added as they came
    assert _absent(browser, By.ID, "cancel-form")  # a finished run offers no cancel
    _shot(browser, "run-live")

    browser.get(f"{served}/requests?job=acme-job")
    browser.find_element(By.ID, "param-n").send_keys("6")
    browser.find_element(By.ID, "title").send_keys("mine")
    browser.find_element(By.ID, "reason").send_keys("my own")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Submit request']"))
    assert _absent(browser, By.XPATH, "//button[text()='Approve and run']")
    assert "a second person decides" in browser.page_source
    _shot(browser, "requests-own")
    assert _origins(browser) == {served}


def test_a_reviewer_reads_the_diff_and_approves_the_changed_definition(world: World, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    from jobgate.service import tokens

    admin = world.headers("acme", Role.ADMIN)
    doc = {"job_definition_id": "adhoc", "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print('v1')"}
    for body in ("print('v1')", "print('v2')"):
        doc["body"] = body
        assert world.client.post("/api/v1/definitions", json={"definitions": [doc]}, headers=admin).status_code == 200
    reviewer = tokens.create(world.engine, tenant_id="acme", role="admin", actor="root", principal="reviewer")
    _sign_in(browser, served, reviewer.token)
    _go(browser, browser.find_element(By.LINK_TEXT, "Definitions"))
    _go(browser, browser.find_element(By.LINK_TEXT, "adhoc"))
    diff = browser.find_element(By.ID, "diff")
    assert "version 1" in diff.text and "version 2" in diff.text and "v2" in diff.text
    assert browser.find_element(By.ID, "approve-digest").text == world.digest("adhoc")
    _shot(browser, "definition")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Approve']"))
    assert browser.find_element(By.ID, "approval-state").text.startswith("Approved: the current content and code match")
    assert _origins(browser) == {served}


def test_the_api_docs_work_offline(world: World, served: str, browser: Any) -> None:
    """Swagger UI and ReDoc from the installed fastapi-offline: they render the schema's
    operations and ask no other origin for a script, a style, a font or an image."""
    from selenium.webdriver.common.by import By

    browser.implicitly_wait(0)  # polled below: each look must not wait on its own
    browser.get(f"{served}/docs")
    wait_until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, ".opblock")) > 20, timeout=30, what="the operations drawn"
    )
    _shot(browser, "docs")
    assert _origins(browser) == {served}
    browser.get(f"{served}/redoc")
    wait_until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "[data-section-id^='operation/']")) > 20,
        timeout=60,
        what="ReDoc's operations drawn",
    )
    _shot(browser, "redoc")
    assert _origins(browser) == {served}


def test_an_auditor_verifies_the_chain_and_an_admin_switches_safe_mode(world: World, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    world.new_run("acme")
    _sign_in(browser, served, world.tokens[("acme", Role.AUDITOR)])
    assert _absent(browser, By.LINK_TEXT, "Admin")
    _go(browser, browser.find_element(By.LINK_TEXT, "Audit"))
    _go(browser, browser.find_element(By.XPATH, "//button[starts-with(text(), 'Verify')]"))
    assert browser.find_element(By.ID, "chain-result").text.startswith("Chain: ok")
    assert browser.find_element(By.ID, "records-result").text.startswith("Records: ok")
    _shot(browser, "audit")
    _sign_out(browser, served)
    _sign_in(browser, served, world.tokens[("acme", Role.ADMIN)])
    _go(browser, browser.find_element(By.LINK_TEXT, "Admin"))
    browser.find_element(By.ID, "safe-reason").send_keys("quarter close")
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Turn on']"))
    assert "Safe mode is on since" in browser.find_element(By.CSS_SELECTOR, ".banner").text
    browser.find_element(By.ID, "token-label").send_keys("reporting service")
    browser.find_element(By.CSS_SELECTOR, "#token-role option[value=consumer]").click()
    _go(browser, browser.find_element(By.XPATH, "//button[text()='Create token']"))
    secret = browser.find_element(By.ID, "new-secret").get_attribute("value")
    assert world.client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    _shot(browser, "admin")
    browser.get(f"{served}/admin")
    assert _absent(browser, By.ID, "new-secret")  # shown once
    assert _origins(browser) == {served}


def test_an_auditor_downloads_a_runs_evidence_and_the_cli_verifies_it(
    world: World, served: str, browser: Any, tmp_path: Path
) -> None:
    """The run page's evidence link downloads the signed bundle; ``jobgate evidence verify``
    (the installed command, in its own process) checks it with the published key; the audit
    page shows an entry's inclusion proof."""
    import subprocess
    import sys

    from selenium.webdriver.common.by import By

    from jobgate.evidence import keys as evidence_keys

    signer = evidence_keys.ensure(world.engine.config)
    run = world.terminal_run("acme")
    world.anchored("acme")
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    _sign_in(browser, served, world.tokens[("acme", Role.AUDITOR)])
    browser.get(f"{served}/runs/{run.job_run_id}")
    _click_by_id(browser, "evidence-link")
    bundle = tmp_path / f"evidence-run-{run.job_run_id}.zip"
    wait_until(bundle.exists, timeout=30, what="the bundle downloaded")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobgate",
            "evidence",
            "verify",
            str(bundle),
            "--public-key",
            f"{signer.key_id}={signer.public_b64}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"ok: {bundle} (signed by {signer.key_id}" in checked.stdout
    browser.get(f"{served}/audit")
    # the export form's id fields are checked by the browser: their patterns compile under the
    # "v" flag browsers use for a pattern attribute (an uncompilable one is silently ignored)
    mismatch = (
        "const i = document.getElementById(arguments[0]); i.value = arguments[1]; return i.validity.patternMismatch;"
    )
    for field in ("bundle-run", "bundle-workflow", "bundle-definition"):
        assert browser.execute_script(mismatch, field, "no spaces allowed") is True
        assert browser.execute_script(mismatch, field, "TGJOBRUN-a_b.c:d@e-f") is False
    _go(browser, browser.find_element(By.CSS_SELECTOR, "a[aria-label='Inclusion proof of entry 1']"))
    assert browser.find_element(By.ID, "proof-summary").text.startswith("Entry 1 ")
    _shot(browser, "audit-proof")
    assert _origins(browser) == {served}


def test_a_workflow_graph_follows_its_steps_to_the_end(world: World, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from tests.helpers import define
    from tests.runtime.runtime_support import running_worker

    from jobgate.core.models import Scope
    from jobgate.runtime.coordinator import WorkflowCoordinator
    from jobgate.runtime.loops import LoopThread
    from jobgate.service.workflows import StartWorkflow, start_workflow

    steps = [
        {"id": "extract", "job": "acme-job", "params": {"n": "1"}},
        {"id": "check", "job": "acme-job", "params": {"n": "2"}, "depends_on": ["extract"]},
        {"id": "report", "job": "acme-job", "params": {"n": "3"}, "depends_on": ["check"]},
    ]
    define(world.engine, job_definition_id="flow3", tenant_id="acme", handler=None, workflow={"steps": steps})
    record, _ = start_workflow(world.engine, StartWorkflow("flow3", scope=Scope(tenant_id="acme")), actor="test")
    _sign_in(browser, served, world.tokens[("acme", Role.OPERATOR)])
    _go(browser, browser.find_element(By.LINK_TEXT, "Workflows"))
    _go(browser, browser.find_element(By.LINK_TEXT, record.workflow_run_id))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#step-graph g.step")) == 3

    def finished() -> bool:
        browser.implicitly_wait(0)
        try:
            found = browser.find_elements(By.ID, "workflow-status")
            return bool(found) and found[0].text == "COMPLETED"
        except Exception:  # the page was reloading under the look
            return False
        finally:
            browser.implicitly_wait(15)

    browser.execute_script("window.notReloaded = true;")
    coordinator = LoopThread(WorkflowCoordinator(world.engine, interval=0.02), world.engine.clock)
    with running_worker(world.engine):
        coordinator.start()
        try:
            wait_until(finished, timeout=60, what="the workflow page showing COMPLETED")
        finally:
            coordinator.stop()
            assert coordinator.join(10)
    states = [g.get_attribute("data-status") for g in browser.find_elements(By.CSS_SELECTOR, "#step-graph g.step")]
    assert states == ["COMPLETED"] * 3
    assert browser.execute_script("return window.notReloaded === true;")  # redrawn in place
    _shot(browser, "workflow")
    assert _origins(browser) == {served}


UNLABELLED = """
const controls = document.querySelectorAll('input:not([type=hidden]), select, textarea, button');
return Array.from(controls).filter(function (el) {
  if (el.tagName === 'BUTTON') return !(el.textContent.trim() || el.getAttribute('aria-label'));
  return !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby');
}).map(function (el) { return el.outerHTML.slice(0, 160); });
"""


def test_every_page_has_labelled_controls_and_fits_a_desktop_and_a_phone(
    world: World, served: str, browser: Any
) -> None:
    """Each page an admin can open, at 1280 px and at a phone's 390 px: every control has a
    label, nothing makes the page scroll sideways, nothing is asked of another origin; a
    screenshot of each goes to ``test-artifacts/console/``."""
    from tests.api.conftest import ACME_JOB

    run = world.terminal_run("acme")
    world.log_for(run)
    pages = {
        "overview": "/",
        "runs-list": "/runs",
        "run-page": f"/runs/{run.job_run_id}",
        "requests-list": "/requests",
        "request-page": f"/requests/{world.proposal()}",
        "definitions-list": "/definitions",
        "definition-page": f"/definitions/{ACME_JOB}",
        "schedules-list": "/schedules",
        "schedule-page": f"/schedules/{world.schedule()}",
        "workflows-list": "/workflows",
        "workflow-page": f"/workflows/{world.workflow()}",
        "audit-page": "/audit?verify=true",
        "admin-page": "/admin",
    }
    _sign_in(browser, served, world.tokens[("acme", Role.ADMIN)])
    for width in (1280, 390):
        browser.set_window_size(width, 900)
        for name, path in pages.items():
            browser.get(served + path)
            wait_until(lambda: bool(_text_of(browser, "h1", "tag name")), timeout=30, what=f"{path}'s heading")
            assert browser.title.endswith(" · jobgate") and len(browser.title) < 120, (path, browser.title)
            assert browser.execute_script(UNLABELLED) == [], path
            sideways = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert sideways <= 0, f"{path} at {width} px scrolls {sideways} px sideways"
            _shot(browser, f"{name}-{width}")
    assert _origins(browser) == {served}


def test_the_keyboard_alone_signs_in_skips_to_the_content_and_follows_the_navigation(
    world: World, served: str, browser: Any
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    def press(*keys: str) -> None:
        ActionChains(browser).send_keys(*keys).perform()

    def focused() -> Any:
        return browser.switch_to.active_element

    def tab_to(check: Any, what: str) -> Any:
        for _ in range(30):
            press(Keys.TAB)
            if check(focused()):
                return focused()
        pytest.fail(f"Tab never reached {what}")

    browser.get(f"{served}/login")
    tab_to(lambda e: e.get_attribute("id") == "token", "the token field")
    press(world.tokens[("acme", Role.OPERATOR)], Keys.ENTER)
    wait_until(lambda: browser.current_url == f"{served}/", timeout=30, what="the overview after signing in")
    press(Keys.TAB)
    skip = focused()
    assert skip.text == "Skip to content"
    assert browser.execute_script("return getComputedStyle(arguments[0]).outlineStyle", skip) != "none"
    press(Keys.ENTER)
    assert focused().get_attribute("id") == "main"
    browser.get(f"{served}/")
    tab_to(lambda e: e.text == "Runs" and e.tag_name == "a", "the Runs link")
    press(Keys.ENTER)
    wait_until(lambda: browser.current_url == f"{served}/runs", timeout=30, what="the runs page by keyboard")
