"""Many local sites that link to each other: a broad crawl in miniature (bench/broad.py).

`BroadWeb` is the plan, pure and deterministic: site 0 is the *heavy* site, which 80% of every
page's links point at (``heavy_per_light`` heavy links to each link elsewhere, placed at random
positions among them, as a real broad crawl's pages point mostly at one big site), and sites
1..N are the *light* sites. A light page links to the next page of its own site (so every page
of a site is reachable from any other) and to random pages of the light sites. The light links
do not depend on whether the heavy site is there. Without it (``with_heavy=False``) the light
sites serve the same pages, each heavy link in one of two ways (``without``):

- ``"redirected"``: it points at one of the page's own light links instead (the same place
  among the page's links, a link chosen by the same draw), so that each page has as many links
  as with the heavy site and a crawler parses and follows as many, while the light sites' link
  graph stays the same: the extra links are duplicates, as a page's repeated links are;
- ``"removed"``: it is left out, and a page has a fifth of the links.

`Web` serves a plan's sites as `TestSite` threads of this process, each on its own loopback
address (`loopback_host`: Linux routes all of 127/8 to ``lo``), so that Scrapy gives each its
own download slot; pages link to each other by absolute URL.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._service import Service
from .site import TestSite

__all__ = ["HEAVY", "WITHOUT_HEAVY", "BroadWeb", "Web", "WebSite", "loopback_host"]

#: the index of the heavy site in a `BroadWeb`
HEAVY = 0

#: what becomes of the heavy links when the heavy site is absent (see the module doc)
WITHOUT_HEAVY = ("redirected", "removed")

Link = tuple[int, int]  # (site index, page number)


def loopback_host(index: int) -> str:
    """The address of site ``index`` of many local sites: ``127.0.0.2``, ``127.0.0.3``, ...
    (``127.0.0.1`` is left to everything else: Redis, the other tests' sites)."""
    if not 0 <= index < 253:
        raise ValueError(f"site index must be in 0..252, got {index}")
    return f"127.0.0.{index + 2}"


@dataclass(frozen=True)
class BroadWeb:
    """The link plan of a heavy site and ``light_sites`` light ones (see the module doc)."""

    light_sites: int = 19
    light_pages: int = 250
    #: many more pages than a crawl can fetch at the heavy site's delay, so that nearly every
    #: heavy link a crawler finds is one it has not seen
    heavy_pages: int = 1_000_000
    with_heavy: bool = True
    #: links of a page to the light sites: the next page of its own site (a light page), the
    #: rest to random light pages
    light_links: int = 3
    #: heavy links per light link: 4 makes 80% of the links heavy
    heavy_per_light: int = 4
    seed: int = 0
    #: without the heavy site: what becomes of its links, one of `WITHOUT_HEAVY`
    without: str = "redirected"

    def __post_init__(self) -> None:
        if self.without not in WITHOUT_HEAVY:
            raise ValueError(f"without must be one of {WITHOUT_HEAVY}, got {self.without!r}")

    @property
    def sites(self) -> list[int]:
        """The indexes of the sites served: the heavy one (0) if there, then the light ones."""
        first = HEAVY if self.with_heavy else HEAVY + 1
        return list(range(first, self.light_sites + 1))

    @property
    def light(self) -> list[int]:
        """The indexes of the light sites."""
        return list(range(HEAVY + 1, self.light_sites + 1))

    @property
    def heavy_share(self) -> float:
        """The share of every page's links that point at the heavy site, when it is there."""
        return self.heavy_per_light / (self.heavy_per_light + 1)

    def pages_of(self, site: int) -> int:
        return self.heavy_pages if site == HEAVY else self.light_pages

    def links_of(self, site: int, page: int) -> list[Link]:
        """The (site, page) links of page ``page`` of ``site``, in document order."""
        links = self._light_links_of(site, page)
        if not self.with_heavy and self.without == "removed":
            return links
        own = tuple(links)
        # the same draws with the heavy site and without it: its links and their stand-ins
        # take the same places
        rng = random.Random(f"{self.seed}/{site}/{page}/heavy")
        for _ in range(self.heavy_per_light * len(own)):
            at = rng.randrange(len(links) + 1)
            drawn = rng.randrange(self.heavy_pages)
            links.insert(at, (HEAVY, drawn) if self.with_heavy else own[drawn % len(own)])
        return links

    def _light_links_of(self, site: int, page: int) -> list[Link]:
        rng = random.Random(f"{self.seed}/{site}/{page}/light")
        links = [] if site == HEAVY else [(site, (page + 1) % self.light_pages)]
        while len(links) < self.light_links:
            links.append((rng.choice(self.light), rng.randrange(self.light_pages)))
        return links


class WebSite(TestSite):
    """One site of a `Web`: a `TestSite` whose pages are the plan's, linked by absolute URL."""

    __test__ = False

    def __init__(self, web: Web, index: int) -> None:
        super().__init__(web.plan.pages_of(index), host=loopback_host(index))
        self.web = web
        self.index = index

    def _render_page(self, i: int) -> bytes:
        links = "".join(f'<li><a href="{self.web.page_url(site, page)}">{site}/{page}</a></li>'
                        for site, page in self.web.plan.links_of(self.index, i))
        return (f"<!DOCTYPE html><html><head><title>Site {self.index} page {i}</title></head>"
                f"<body><h1>Page {i}</h1><ul>{links}</ul></body></html>").encode()


class Web(Service):
    """The sites of a `BroadWeb` plan, served by threads of this process while started."""

    def __init__(self, plan: BroadWeb) -> None:
        self.plan = plan
        self.sites = {index: WebSite(self, index) for index in plan.sites}

    def page_url(self, site: int, page: int) -> str:
        """The absolute URL of page ``page`` of ``site`` (its port is known once started)."""
        return self.sites[site].page_url(page)

    @property
    def start_url(self) -> str:
        """Page 0 of the first light site: every light page is reachable from it."""
        return self.page_url(self.plan.light[0], 0)

    def start(self) -> Web:
        try:
            for site in self.sites.values():
                site.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for site in self.sites.values():
            site.stop()
