"""pytest plugin: every crawler Scrapy's own tests create runs with the add-on switched on.

Loaded with ``-p clustersync_compat`` by `compat/run.py`, which puts this directory on
PYTHONPATH and the Redis to use in ``CLUSTERSYNC_COMPAT_REDIS_URL``. It patches
``Crawler.__init__`` (the one place every crawler of those tests goes through, ``get_crawler``,
``CrawlerRunner``, ``CrawlerProcess`` and test subclasses alike) to add the add-on and its
settings; the settings a test gives itself still win. Each crawler gets a job of its own, so it
starts afresh as a Scrapy crawler does; only crawlers of one test, spider and ``JOBDIR`` share a
job (a reopened scheduler finds what the first left, as Scrapy's does in that JOBDIR; a cluster
keeps a job's queue and dedup record in Redis, never deleted by a node). Test modules that build
Scrapy's ``Scheduler`` class by name get the cluster scheduler instead. Every outcome, with a
one-line reason, goes to the JSON file named by ``CLUSTERSYNC_COMPAT_REPORT``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

REDIS_URL_ENV = "CLUSTERSYNC_COMPAT_REDIS_URL"
REPORT_ENV = "CLUSTERSYNC_COMPAT_REPORT"
SPOOL_DIR_ENV = "CLUSTERSYNC_COMPAT_SPOOL_DIR"
ADDON_PATH = "scrapy_clustersync.Addon"
ADDON_PRIORITY = 100

#: Fast enough for tests that wait for a crawl to finish; a test's own settings still win.
FAST_SETTINGS: dict[str, Any] = {
    "CLUSTERSYNC_HEARTBEAT_INTERVAL": 0.1,
    "CLUSTERSYNC_LEASE_TIMEOUT": 5.0,
    # short, but not 0: 0 means "never finish" (heartbeat.lua), and every crawl would hang
    "CLUSTERSYNC_IDLE_CLOSE_AFTER": 0.1,
    # a Bloom filter sized for a test, not the 10 million URLs of the default
    "CLUSTERSYNC_BLOOM_CAPACITY": 100_000,
}

_UNSAFE_IN_JOB = re.compile(r"[^A-Za-z0-9_.:-]")
_test_numbers = itertools.count(1)
_crawler_numbers = itertools.count(1)
_job_prefix = "compat-outside-a-test"
_outcomes: dict[str, dict[str, str]] = {}


def job_name(prefix: str, spider_name: str | None, scope: str) -> str:
    """The job of a crawler: the current test's prefix, the spider's name (made valid) and the
    crawler's ``scope`` (``job_scope``)."""
    spider = _UNSAFE_IN_JOB.sub("_", spider_name or "spider")[:120]
    return f"{prefix}.{spider}.{scope}"


def job_scope(jobdir: str | None, crawler_number: int) -> str:
    """Which crawlers of a test and spider share a job: those of one ``JOBDIR`` (where Scrapy
    keeps a crawl's state between runs); without one, each crawler has a job of its own."""
    if jobdir:
        return "jobdir-" + hashlib.sha1(jobdir.encode()).hexdigest()[:8]
    return f"crawler{crawler_number}"


def cluster_settings(redis_url: str, job: str, spool_dir: str) -> dict[str, Any]:
    """Every setting the harness gives a crawler, besides the ``ADDONS`` entry."""
    return {
        "CLUSTERSYNC_REDIS_URL": redis_url,
        "CLUSTERSYNC_JOB": job,
        "CLUSTERSYNC_SPOOL_DIR": spool_dir,
        **FAST_SETTINGS,
    }


def _switch_on_addon(crawler: Any) -> None:
    settings = crawler.settings
    if settings.frozen:  # the test froze them itself: leave that crawler as the test made it
        return
    settings.set_in_component_priority_dict("ADDONS", ADDON_PATH, ADDON_PRIORITY)
    scope = job_scope(settings.get("JOBDIR"), next(_crawler_numbers))
    job = job_name(_job_prefix, getattr(crawler.spidercls, "name", None), scope)
    spool_dir = os.environ.get(SPOOL_DIR_ENV) or ".clustersync-spool"
    for name, value in cluster_settings(os.environ[REDIS_URL_ENV], job, spool_dir).items():
        if settings.getpriority(name) is None:
            settings.set(name, value, priority="default")


def _patched_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _switch_on_addon(self)

    __init__.clustersync_original = original  # type: ignore[attr-defined]
    return __init__


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(REDIS_URL_ENV):
        raise pytest.UsageError(f"{REDIS_URL_ENV} is not set: run this through compat/run.py")
    from scrapy.crawler import Crawler

    Crawler.__init__ = _patched_init(Crawler.__init__)  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    from scrapy.crawler import Crawler

    original = getattr(Crawler.__init__, "clustersync_original", None)
    if original is not None:
        Crawler.__init__ = original  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    # set before any fixture or setup_method of the test runs (they may create crawlers)
    global _job_prefix
    _job_prefix = f"compat{next(_test_numbers)}-{uuid.uuid4().hex[:6]}"
    try:
        return (yield)
    finally:
        _job_prefix = "compat-outside-a-test"


@pytest.fixture(autouse=True)
def _cluster_scheduler_where_scrapys_is_named(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test module that builds ``Scheduler`` itself (build_from_crawler) builds ours."""
    from scrapy.core.scheduler import Scheduler

    from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler

    module = getattr(request, "module", None)
    if module is not None and getattr(module, "Scheduler", None) is Scheduler:
        monkeypatch.setattr(module, "Scheduler", ClusterScheduler)


def one_line_reason(report: pytest.TestReport) -> str:
    """Why a test failed or was skipped, in one line."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])
    if "crashed while running" in str(longrepr):  # xdist, after pytest-timeout killed it
        return "hung: still running after the per-test timeout, worker killed"
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:2])[:300]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "reason": ""})
    if report.failed:
        phase = "" if report.when == "call" else f"[{report.when}] "
        if entry["outcome"] != "failed":
            entry.update(outcome="failed", reason=phase + one_line_reason(report))
    elif report.skipped and entry["outcome"] == "passed":
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        entry.update(outcome=outcome, reason=one_line_reason(report))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(REPORT_ENV)
    if path and "PYTEST_XDIST_WORKER" not in os.environ:  # xdist's controller has every report
        Path(path).write_text(json.dumps(_outcomes, indent=1, sort_keys=True))
