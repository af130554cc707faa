"""ProxyRule: sends requests through the proxy the job's CLUSTERSYNC_PROXY names, a setting
that can change while the crawl runs (``clustersync config set JOB CLUSTERSYNC_PROXY ...``).

The rule is one proxy URL, a list of them (requests take them in turn), or a table of sites to
proxy URLs (a request's host, or the closest parent domain listed, picks its proxy; ``"*"``
stands for any other site). This downloader middleware, which the add-on installs at ``ORDER``
(before Scrapy's HttpProxyMiddleware, 750, which turns the URL's credentials into a
Proxy-Authorization header), sets ``request.meta["proxy"]`` unless the request has a proxy of
its own (a ``proxy`` key in its meta, even None). A URL's credentials are never logged.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached

from ..url_secrets import redact_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

#: before HttpProxyMiddleware (750)
ORDER = 740
#: the table entry for any site not listed
ANY_SITE = "*"


class ProxyRule:
    """The downloader middleware (see the module doc); ``use_rule`` changes the rule."""

    def __init__(self, rule: Any = None) -> None:
        self._rule: Any = None
        self._turns: Iterator[str] | None = None
        self.use_rule(rule)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from .settings_in_force import local_value

        return cls(local_value(crawler.settings, "CLUSTERSYNC_PROXY", "proxy"))

    def use_rule(self, rule: Any) -> None:
        """The rule to follow from now on (a checked CLUSTERSYNC_PROXY value; None or "":
        no proxy)."""
        self._rule = rule or None
        self._turns = itertools.cycle(rule) if isinstance(rule, list) and rule else None

    def proxy_for(self, request: Request) -> str | None:
        """The proxy URL the rule gives ``request`` (None: none)."""
        rule = self._rule
        if isinstance(rule, str):
            return rule
        if self._turns is not None:
            return next(self._turns)
        if isinstance(rule, Mapping):
            return site_proxy(rule, urlparse_cached(request).hostname or "")
        return None

    def process_request(self, request: Request) -> None:
        if "proxy" in request.meta:
            return
        proxy = self.proxy_for(request)
        if proxy is not None:
            request.meta["proxy"] = proxy

    def __repr__(self) -> str:
        shown = self._rule
        if isinstance(shown, str):
            shown = redact_url(shown)
        elif isinstance(shown, list):
            shown = [redact_url(url) for url in shown]
        elif isinstance(shown, Mapping):
            shown = {site: redact_url(url) for site, url in shown.items()}
        return f"ProxyRule({shown!r})"


def site_proxy(table: Mapping[str, str], host: str) -> str | None:
    """The proxy of ``host`` in ``table``: its own entry, its closest parent domain's, or
    ``"*"``'s."""
    parts = host.lower().split(".")
    for i in range(len(parts)):
        url = table.get(".".join(parts[i:]))
        if url is not None:
            return url
    return table.get(ANY_SITE)
