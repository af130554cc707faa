"""LiveComponents: changes Scrapy's running components to a set of live settings (the values in
force, settings_in_force.py), on the reactor.

Scrapy reads its settings once, when each component is built; what changes live must change in
the component itself. What each key changes:

- CONCURRENT_REQUESTS: the downloader's total concurrency (``Downloader.total_concurrency``);
- CONCURRENT_REQUESTS_PER_DOMAIN / _PER_IP, DOWNLOAD_DELAY, RANDOMIZE_DOWNLOAD_DELAY: the values
  new download slots get, and every existing slot's concurrency, delay and jitter (a slot that
  ``DOWNLOAD_SLOTS`` configures keeps what it sets);
- DOWNLOAD_TIMEOUT, USER_AGENT, DEFAULT_REQUEST_HEADERS: the attributes of Scrapy's
  DownloadTimeoutMiddleware, UserAgentMiddleware and DefaultHeadersMiddleware;
- RETRY_ENABLED / RETRY_TIMES / RETRY_HTTP_CODES: RetryMiddleware's (off: it retries nothing;
  a project that disabled RetryMiddleware has none to switch on: warned once);
- AUTOTHROTTLE_*: the AutoThrottle extension, switched on (built if the project had it off)
  and off (it stops adjusting; slots go back to DOWNLOAD_DELAY);
- CLUSTERSYNC_PROXY: the proxy middleware's rule (proxy_rule.py);
- the download gate's turns get ``configure(...)`` when they have one (a cluster-wide
  politeness budget) and any of DOWNLOAD_DELAY, RANDOMIZE_DOWNLOAD_DELAY,
  CLUSTERSYNC_SITE_DELAYS, CONCURRENT_REQUESTS_PER_DOMAIN changed.

CLOSESPIDER_* and the spider's own keys are left to the ``settings_changed`` signal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.downloadermiddlewares.defaultheaders import DefaultHeadersMiddleware
from scrapy.downloadermiddlewares.downloadtimeout import DownloadTimeoutMiddleware
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.extensions.throttle import AutoThrottle
from scrapy.utils.python import without_none_values

from ..live_settings import PROXY_KEY

if TYPE_CHECKING:
    from scrapy.core.downloader import Downloader
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: the keys the download gate's ``turns.configure`` is called for
GATE_KEYS = frozenset({"DOWNLOAD_DELAY", "RANDOMIZE_DOWNLOAD_DELAY", "CLUSTERSYNC_SITE_DELAYS",
                       "CONCURRENT_REQUESTS_PER_DOMAIN"})
_SLOT_KEYS = frozenset({"CONCURRENT_REQUESTS_PER_DOMAIN", "CONCURRENT_REQUESTS_PER_IP",
                        "DOWNLOAD_DELAY", "RANDOMIZE_DOWNLOAD_DELAY"})
_RETRY_KEYS = frozenset({"RETRY_ENABLED", "RETRY_TIMES", "RETRY_HTTP_CODES"})
AUTOTHROTTLE_PREFIX = "AUTOTHROTTLE_"
#: RANDOMIZE_DOWNLOAD_DELAY's jitter (Scrapy's ±50%)
RANDOM_JITTER = 0.5


class LiveComponents:
    """Applies values in force to the crawler's running components (see the module doc)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._throttle: AutoThrottle | None = None
        self._throttle_on = False
        self._retry_exceptions: dict[int, Any] = {}
        self._warned: set[str] = set()

    def apply(self, values: Mapping[str, Any], changed: Collection[str]) -> None:
        """Make the running components use ``values`` (key -> value in force, for every live
        key) for the keys in ``changed``. Before the engine exists it does nothing."""
        engine = self.crawler.engine
        moved = set(changed)
        if engine is None or not moved:
            return
        throttle = {key for key in moved if key.startswith(AUTOTHROTTLE_PREFIX)}
        steps: list[tuple[Collection[str], Callable[[Mapping[str, Any]], None]]] = [
            (throttle, self._autothrottle),
            ({"CONCURRENT_REQUESTS"}, self._total_concurrency),
            ({*_SLOT_KEYS, "AUTOTHROTTLE_ENABLED"}, self._slots),
            ({"USER_AGENT"}, self._user_agent),
            ({"DEFAULT_REQUEST_HEADERS"}, self._headers),
            ({"DOWNLOAD_TIMEOUT"}, self._timeout),
            ({PROXY_KEY}, self._proxy),
            (_RETRY_KEYS, self._retry),
            (GATE_KEYS, self._configure_gate),
        ]
        for keys, step in steps:
            if moved.intersection(keys):
                step(values)

    def _total_concurrency(self, values: Mapping[str, Any]) -> None:
        self._downloader().total_concurrency = int(values["CONCURRENT_REQUESTS"])

    def _user_agent(self, values: Mapping[str, Any]) -> None:
        for mw in self._middlewares(UserAgentMiddleware):
            mw.user_agent = values["USER_AGENT"]

    def _headers(self, values: Mapping[str, Any]) -> None:
        chosen = without_none_values(dict(values["DEFAULT_REQUEST_HEADERS"] or {}))
        for mw in self._middlewares(DefaultHeadersMiddleware):
            mw._headers = list(chosen.items())

    def _timeout(self, values: Mapping[str, Any]) -> None:
        for mw in self._middlewares(DownloadTimeoutMiddleware):
            mw._timeout = float(values["DOWNLOAD_TIMEOUT"])

    def _proxy(self, values: Mapping[str, Any]) -> None:
        for mw in self._downloader_middlewares():
            if hasattr(mw, "use_rule"):
                mw.use_rule(values.get(PROXY_KEY))

    def _downloader(self) -> Downloader:
        engine = self.crawler.engine
        assert engine is not None  # apply() runs only once it exists
        return engine.downloader

    def _downloader_middlewares(self) -> tuple[Any, ...]:
        engine = self.crawler.engine
        if engine is None:
            return ()
        return tuple(engine.downloader.middleware.middlewares)

    def _middlewares(self, cls: type) -> list[Any]:
        return [mw for mw in self._downloader_middlewares() if isinstance(mw, cls)]

    def _slots(self, values: Mapping[str, Any]) -> None:
        """New slots' values, then every existing slot's (but what DOWNLOAD_SLOTS sets)."""
        downloader = self._downloader()
        domain = int(values["CONCURRENT_REQUESTS_PER_DOMAIN"])
        per_ip = int(values["CONCURRENT_REQUESTS_PER_IP"])
        delay = float(values["DOWNLOAD_DELAY"])
        jitter = RANDOM_JITTER if values["RANDOMIZE_DOWNLOAD_DELAY"] else 0.0
        downloader.domain_concurrency, downloader.ip_concurrency = domain, per_ip
        downloader._jitter = jitter
        throttled = self._throttle_on and self._throttle is not None
        if throttled:
            assert self._throttle is not None
            self._throttle.mindelay = delay
            downloader._delay = max(delay, float(values["AUTOTHROTTLE_START_DELAY"]))
        else:
            downloader._delay = delay
        for key, slot in downloader.slots.items():
            own = downloader.per_slot_settings.get(key, {})
            if "concurrency" not in own:
                slot.concurrency = per_ip or domain
            if "delay" not in own:
                slot.delay = max(slot.delay, delay) if throttled else delay
            if "jitter" not in own and "randomize_delay" not in own:
                slot.jitter = jitter

    def _autothrottle(self, values: Mapping[str, Any]) -> None:
        """Switch AutoThrottle on or off and give it the values in force."""
        downloader = self._downloader()
        want = bool(values["AUTOTHROTTLE_ENABLED"])
        throttle = self._throttle or self._found_throttle()
        if throttle is None and want:
            throttle = AutoThrottle.__new__(AutoThrottle)  # its __init__ reads the settings
            throttle.crawler = self.crawler
        self._throttle = throttle
        if throttle is None:
            return
        throttle.debug = bool(values["AUTOTHROTTLE_DEBUG"])
        throttle.target_concurrency = float(values["AUTOTHROTTLE_TARGET_CONCURRENCY"])
        throttle.mindelay = float(values["DOWNLOAD_DELAY"])
        throttle.maxdelay = float(values["AUTOTHROTTLE_MAX_DELAY"])
        connected = signals.response_downloaded
        if want and not self._throttle_on:
            self.crawler.signals.connect(throttle._response_downloaded, signal=connected)
        elif not want and self._throttle_on:
            self.crawler.signals.disconnect(throttle._response_downloaded, signal=connected)
        self._throttle_on = want
        if want:
            downloader._delay = max(throttle.mindelay,
                                    float(values["AUTOTHROTTLE_START_DELAY"]))

    def _found_throttle(self) -> AutoThrottle | None:
        """The project's own AutoThrottle (on: it is connected already), if it has one."""
        for ext in getattr(self.crawler.extensions, "middlewares", ()):
            if isinstance(ext, AutoThrottle):
                self._throttle_on = True
                return ext
        return None

    def _retry(self, values: Mapping[str, Any]) -> None:
        found = self._middlewares(RetryMiddleware)
        if not found and values["RETRY_ENABLED"]:
            self._warn_once("retry", "clustersync: RETRY_ENABLED is true in the shared settings, "
                            "but this node was started without RetryMiddleware (RETRY_ENABLED "
                            "false in its settings); restart it to retry")
        for mw in found:
            # the exceptions it retries are no live setting: kept to switch retries on again
            exceptions = self._retry_exceptions.setdefault(id(mw), mw.exceptions_to_retry)
            mw.max_retry_times = int(values["RETRY_TIMES"])
            if values["RETRY_ENABLED"]:
                mw.retry_http_codes = {int(code) for code in values["RETRY_HTTP_CODES"]}
                mw.exceptions_to_retry = exceptions
            else:  # off: no code and no exception is retried
                mw.retry_http_codes, mw.exceptions_to_retry = set(), ()

    def _configure_gate(self, values: Mapping[str, Any]) -> None:
        for mw in self._downloader_middlewares():
            configure = getattr(getattr(mw, "turns", None), "configure", None)
            if callable(configure):
                configure(download_delay=float(values["DOWNLOAD_DELAY"]),
                          randomize=bool(values["RANDOMIZE_DOWNLOAD_DELAY"]),
                          site_delays=dict(values.get("CLUSTERSYNC_SITE_DELAYS") or {}),
                          per_domain=int(values["CONCURRENT_REQUESTS_PER_DOMAIN"]))

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message)
