"""The dashboard in a real headless browser (Debian's chromium, driven by Selenium through
/usr/bin/chromedriver: nothing is downloaded) beside a real crawl of two nodes: it shows both
nodes and a growing count, a node killed with SIGKILL shown dead with its dead-node record, and
a click on its pause button pauses the crawl (the site's request count stops growing). A
screenshot is left in the test's tmp dir."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_serve import ServeProcess

from testkit.redis_server import RedisServer

from conftest import SiteFactory, running_in_ci
from support import pages_fetched, start_nodes, wait_until

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "4", "CONCURRENT_REQUESTS": "4",
        "CLUSTERSYNC_LEASE_TIMEOUT": "30"}


def need_a_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (the test extra)")
    if not missing:
        return
    message = (f"{', '.join(missing)} not found: scripts/ensure-chromium.sh installs "
               "chromium and chromium-driver")
    if running_in_ci():
        pytest.fail(f"{message} (CI=true: the browser test must run)")
    pytest.skip(message)


@pytest.fixture
def browser() -> Iterator[Any]:
    need_a_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1400,2200"):
        options.add_argument(flag)
    # the driver's path given: Selenium Manager is not asked for one (nor for a browser)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def texts(browser: Any, selector: str) -> list[str]:
    """The text of every element ``selector`` finds, read in one script (the page rebuilds
    its tables at every poll: elements found one call earlier may be gone)."""
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent)",
        selector)
    return [str(text) for text in found]


def click(browser: Any, selector: str) -> None:
    """A real click on the element ``selector`` finds, found again if a poll replaced it."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{selector} was replaced at each try")


def job_done(browser: Any) -> int:
    shown = texts(browser, "#jobs tr.job td.done")
    return int(shown[0].replace(",", "")) if shown and shown[0] else 0


def node_states(browser: Any) -> list[str]:
    return texts(browser, "table.nodes tr.node td:nth-child(2)")


@pytest.mark.timing
def test_the_dashboard_in_a_browser_shows_the_nodes_a_dead_one_and_pauses_the_crawl(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path, browser: Any
) -> None:
    # given serve and two nodes crawling a slow site, and the dashboard open in chromium
    web = site(3000, delay_s=0.05)
    with ServeProcess(redis_server.url, tmp_path, "--alert-every", "1") as serve:
        nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, SLOW)
        browser.get(serve.base_url + "/")
        # then it shows both nodes crawling and a count that grows
        wait_until(lambda: node_states(browser).count("crawling") == 2, 30, "two crawling nodes")
        first = job_done(browser)
        wait_until(lambda: job_done(browser) > first, 15, "the done count to grow")
        # when one node is killed with SIGKILL
        nodes[1].kill()
        # then it is shown dead, with when and what was returned
        wait_until(lambda: "dead" in node_states(browser), 20, "the killed node shown dead")
        records = [t for t in texts(browser, "td.dead-record") if t]
        assert len(records) == 1 and "lease(s) returned" in records[0]
        # when pause is clicked
        click(browser, "#jobs tr.job button.steer-pause")
        wait_until(lambda: texts(browser, "#jobs tr.job td.state-paused") == ["paused"], 10,
                   "the job shown paused")
        time.sleep(1.5)  # what was under way when the pause came
        # then the site's request count stops growing
        paused_at = web.hits()
        time.sleep(2)
        assert web.hits() == paused_at, "pages were fetched after the pause"
        assert pages_fetched(web) < web.pages
        # and, the page reloaded (its first poll reads the alerts), the dead node's alert is
        # listed, firing
        browser.refresh()
        wait_until(lambda: any("node_dead" in t for t in texts(browser, "#alerts li.firing")),
                   15, "the dead node's alert")
        assert "Busiest sites" in browser.page_source
        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        print(f"\nscreenshot: {shot}")
