"""The console in a real headless Firefox (Debian's ``firefox-esr``, which ``.ci/run`` installs
when missing), driven through Mozilla's own Marionette client: Debian packages no geckodriver,
and nothing is downloaded at run time. Chromium's tests (``test_console_browser``) cover every
page; these show the same console works in the other engine: sign in, every page's controls
labelled, a run followed live over SSE to its end, a form refused without its CSRF token, and
nothing asked of another origin. Screenshots go to ``test-artifacts/console/firefox-*.png``."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.api.test_console_browser import SHOTS, UNLABELLED, served  # noqa: F401  (the served fixture)
from tests.runtime.runtime_support import running_worker, wait_until

from jobgate.core.tokens import Role

FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox") or "/usr/bin/firefox-esr"

pytestmark = [
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
    # Marionette's helpers (mozinfo, mozrunner) still call distro.linux_distribution() and import
    # telnetlib (for emulators never started here), and leave a socket of their port probe to
    # the collector: warnings about the test's tools, not about jobgate.
    pytest.mark.filterwarnings("ignore:distro.linux_distribution:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:'telnetlib' is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# Every resource the page loaded (scripts, styles, images, fetches, event streams) and the page.
LOADED = "return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name));"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def firefox(tmp_path: Path) -> Iterator[Any]:
    if not os.path.exists(FIREFOX):
        if os.environ.get("CI"):
            pytest.fail("firefox-esr is not installed (.ci/run installs it)")
        pytest.skip("firefox-esr is not installed")
    from marionette_driver.marionette import Marionette

    driver = Marionette(
        host="127.0.0.1",
        port=_free_port(),
        bin=FIREFOX,
        headless=True,
        gecko_log=str(tmp_path / "gecko.log"),
        startup_timeout=120,
    )
    driver.start_session()
    driver.set_window_rect(width=1280, height=900)
    try:
        yield driver
    finally:
        driver.delete_session()
        driver.cleanup()


def _wait_for_page(driver: Any, path_ends: str) -> None:
    wait_until(lambda: driver.get_url().endswith(path_ends), timeout=30, what=f"Firefox at {path_ends}")
    wait_until(
        lambda: driver.execute_script("return document.readyState") == "complete",
        timeout=30,
        what="the page loaded",
    )


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / f"firefox-{name}.png").write_bytes(driver.screenshot(format="binary"))


def _origins(driver: Any, seen: set[str]) -> None:
    for url in driver.execute_script(LOADED):
        if not url.startswith(("data:", "about:", "blob:")):
            seen.add("/".join(url.split("/")[:3]))


def test_the_console_works_in_firefox(world: World, served: str, firefox: Any) -> None:  # noqa: F811
    run = world.new_run("acme")
    origins: set[str] = set()
    firefox.navigate(f"{served}/login")
    firefox.find_element("id", "token").send_keys(world.tokens[("acme", Role.OPERATOR)])
    firefox.find_element("css selector", "form[aria-labelledby=token-title] button").click()
    _wait_for_page(firefox, "/")
    assert firefox.find_element("tag name", "h1").text == "Overview"
    _shot(firefox, "overview")
    _origins(firefox, origins)
    for path in ("/runs", "/requests", f"/definitions/{ACME_JOB}", "/schedules", "/workflows"):
        firefox.navigate(served + path)
        _wait_for_page(firefox, path)
        assert firefox.execute_script(UNLABELLED) == [], path
        _origins(firefox, origins)

    # A forged form (no CSRF token) is refused and changes nothing; the page's own form works.
    firefox.navigate(f"{served}/runs/{run.job_run_id}")
    _wait_for_page(firefox, run.job_run_id)
    firefox.execute_script("document.querySelector('#cancel-form input[name=csrf]').value = 'forged';")
    firefox.find_element("id", "cancel-reason").send_keys("forged")
    firefox.find_element("css selector", "#cancel-form button").click()
    wait_until(lambda: "CSRF" in firefox.page_source, timeout=30, what="the forged form refused")
    with world.engine.store.read() as tx:
        found = tx.run_get(run.job_run_id)
    assert found is not None and not found.status.is_terminal

    # The run page follows the run to its end over the event stream, without a reload.
    firefox.navigate(f"{served}/runs/{run.job_run_id}")
    _wait_for_page(firefox, run.job_run_id)
    # Set in the page's own scope (no sandbox): a reload would clear it.
    assert firefox.execute_script("window.notReloaded = true; return window.notReloaded;", sandbox=None) is True
    with running_worker(world.engine):
        wait_until(
            lambda: firefox.find_element("id", "run-status").text == "COMPLETED",
            timeout=60,
            what="Firefox showing COMPLETED live",
        )
    # ... and is then drawn again in place: its attempt, and a retry where the cancel was.
    wait_until(lambda: bool(firefox.find_elements("id", "retry-form")), timeout=30, what="the finished run redrawn")
    assert "succeeded" in firefox.find_element("id", "attempts").text
    assert firefox.execute_script("return window.notReloaded === true;", sandbox=None)
    _shot(firefox, "run-live")
    _origins(firefox, origins)
    assert origins == {served}
