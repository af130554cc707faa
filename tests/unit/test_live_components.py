"""Live settings change Scrapy's running downloader and middlewares (a real Downloader)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from scrapy.core.downloader import Downloader, Slot
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.utils.test import get_crawler

from scrapy_clustersync.plugin.live_components import LiveComponents
from scrapy_clustersync.plugin.settings_in_force import local_values


class Turns:
    def __init__(self) -> None:
        self.configured: list[dict[str, Any]] = []

    def configure(self, **values: Any) -> None:
        self.configured.append(values)


def running() -> tuple[Any, Downloader, Turns]:
    crawler = get_crawler(settings_dict={"DOWNLOAD_SLOTS": {"own.com": {"delay": 9.0}}})
    crawler._apply_settings()
    downloader = Downloader(crawler)
    turns = Turns()
    downloader.middleware.middlewares += (SimpleNamespace(turns=turns),)  # the download gate
    crawler.engine = SimpleNamespace(downloader=downloader)  # type: ignore[assignment]
    downloader.slots["a.com"] = Slot(8, 0.0, 0.0)
    downloader.slots["own.com"] = Slot(8, 9.0, 0.0)
    return crawler, downloader, turns


def test_delay_and_concurrency_change_existing_and_future_slots_and_the_gate_is_told() -> None:
    crawler, downloader, turns = running()
    values = {**local_values(crawler.settings, {}), "DOWNLOAD_DELAY": 1.5,
              "CONCURRENT_REQUESTS_PER_DOMAIN": 3, "CONCURRENT_REQUESTS": 5,
              "RANDOMIZE_DOWNLOAD_DELAY": False}
    LiveComponents(crawler).apply(values, ["DOWNLOAD_DELAY", "CONCURRENT_REQUESTS_PER_DOMAIN",
                                           "CONCURRENT_REQUESTS", "RANDOMIZE_DOWNLOAD_DELAY"])
    slot, own = downloader.slots["a.com"], downloader.slots["own.com"]
    assert (slot.delay, slot.concurrency, slot.jitter) == (1.5, 3, 0.0)
    assert own.delay == 9.0  # DOWNLOAD_SLOTS keeps what it sets
    assert (downloader._delay, downloader.domain_concurrency) == (1.5, 3)
    assert downloader.total_concurrency == 5
    assert turns.configured == [{"download_delay": 1.5, "randomize": False, "site_delays": {},
                                 "per_domain": 3}]


def test_user_agent_and_retries_change_in_the_running_middlewares() -> None:
    crawler, downloader, _ = running()
    values = {**local_values(crawler.settings, {}), "USER_AGENT": "team/2",
              "RETRY_ENABLED": False}
    components = LiveComponents(crawler)
    components.apply(values, ["USER_AGENT", "RETRY_ENABLED"])
    mws = downloader.middleware.middlewares
    assert [mw.user_agent for mw in mws if isinstance(mw, UserAgentMiddleware)] == ["team/2"]
    [retry] = [mw for mw in mws if isinstance(mw, RetryMiddleware)]
    assert retry.retry_http_codes == set() and retry.exceptions_to_retry == ()
    components.apply({**values, "RETRY_ENABLED": True}, ["RETRY_ENABLED"])
    assert 503 in retry.retry_http_codes and retry.exceptions_to_retry
