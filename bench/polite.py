"""Benchmark variant "polite": one politeness budget per site for the whole cluster.

    python bench/run.py --polite [--polite-pages 120] [--polite-mode cluster|node]
                                 [--polite-prefetch N] [--polite-no-jitter]
    python bench/polite.py [the same options]

Serves 20 local sites (distinct hostnames 127.0.0.2-21: distinct Scrapy download slots) in
this process, crawls them with two clustersync nodes at ``DOWNLOAD_DELAY = 0.1`` (a budget of
10 requests/s per site, 200 req/s for the 20) on a redis-server of its own, and prints, from
the sites' own access times: the fraction of the 200 req/s budget the cluster reached (over
the whole crawl, over its middle 80%, and while every site had pages left: the target, as a
site's last pages are found late by chance), and the largest excess of any site over its budget
in any 5 s window (50 requests, one more allowed at the window's edge). The nodes run with
``CONCURRENT_REQUESTS = 100``, as Scrapy's broad-crawl guide suggests: requests held for their
site's turn take places in it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.rates import most_in_window  # noqa: E402
from testkit.redis_server import RedisServer  # noqa: E402
from testkit.site import TestSite  # noqa: E402
from testkit.web import loopback_host  # noqa: E402

SITES = 20
DELAY_S = 0.1
NODES = ("node1", "node2")
WINDOW_S = 5.0
#: the targets: the share of the budget the two nodes reach, the most any site may see over it
TARGET_REACHED = 0.9
TARGET_EXCESS = 0.05
SPIDER = '''
    import scrapy

    class MultiSpider(scrapy.Spider):
        name = "multi"

        def __init__(self, start_urls: str = "", **kwargs):
            super().__init__(**kwargs)
            self.start_urls = start_urls.split(",")

        def parse(self, response):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)
'''


def write_project(root: Path, mode: str, jitter: bool = True) -> Path:
    (root / "polite" / "spiders").mkdir(parents=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = polite.settings\n")
    (root / "polite" / "__init__.py").write_text("")
    (root / "polite" / "spiders" / "__init__.py").write_text("")
    (root / "polite" / "spiders" / "multi.py").write_text(textwrap.dedent(SPIDER))
    (root / "polite" / "settings.py").write_text(textwrap.dedent(f"""
        import os
        BOT_NAME = "polite"
        SPIDER_MODULES = ["polite.spiders"]
        ADDONS = {{"scrapy_clustersync.Addon": 100}}
        CLUSTERSYNC_REDIS_URL = os.environ["CLUSTERSYNC_REDIS_URL"]
        CLUSTERSYNC_IDLE_CLOSE_AFTER = 1.0
        CLUSTERSYNC_POLITENESS = {mode!r}
        DOWNLOAD_DELAY = {DELAY_S}
        RANDOMIZE_DOWNLOAD_DELAY = {jitter}
        CONCURRENT_REQUESTS = 100  # Scrapy's broad-crawl guide: held requests take places too
        ROBOTSTXT_OBEY = False
        TELNETCONSOLE_ENABLED = False
        LOG_LEVEL = "INFO"
    """))
    return root


def site_times(site: TestSite) -> list[float]:
    return sorted(t for node in NODES for t in site.agent_hits(node).times)


def report(sites: list[TestSite], took_s: float) -> dict[str, float]:
    """The figures the module doc names, from the sites' access times."""
    every = sorted(t for site in sites for t in site_times(site))
    budget = SITES / DELAY_S
    span = every[-1] - every[0]
    cut = int(len(every) * 0.1)
    middle = every[cut:len(every) - cut]
    allowed = WINDOW_S / DELAY_S + 1
    excess = max(most_in_window(site_times(site), WINDOW_S) - allowed for site in sites)
    # while every site has pages left: from the first request of the last site to start until
    # the last request of the first site to finish (a site's last pages are found late, by
    # chance, in plain Scrapy too: at the end fewer sites than 20 have work)
    busy_from = max(site_times(site)[0] for site in sites)
    busy_to = min(site_times(site)[-1] for site in sites)
    busy = [t for t in every if busy_from <= t <= busy_to]
    return {"requests": len(every), "span_s": round(span, 2), "took_s": round(took_s, 1),
            "reached": round((len(every) - 1) / span / budget, 3),
            "reached_middle": round((len(middle) - 1) / (middle[-1] - middle[0]) / budget, 3),
            "reached_all_busy": round(len(busy) / max(1e-9, busy_to - busy_from) / budget, 3),
            "all_busy_s": round(busy_to - busy_from, 2),
            "max_excess_5s": excess, "max_excess_5s_share": round(excess / (allowed - 1), 3)}


def run(pages: int, mode: str, prefetch: int = 0, jitter: bool = True) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="clustersync-polite-"))
    sites = [TestSite(pages, host=loopback_host(i)).start() for i in range(SITES)]
    redis = RedisServer(workdir / "redis").start()
    try:
        project = write_project(workdir / "project", mode, jitter)
        start_urls = ",".join(site.start_url for site in sites)
        env = {**os.environ, "CLUSTERSYNC_REDIS_URL": redis.url}
        started = time.monotonic()
        nodes = [subprocess.Popen(
            [sys.executable, "-m", "scrapy", "crawl", "multi", "-a", f"start_urls={start_urls}",
             "-s", f"USER_AGENT={name}", "-s", f"CLUSTERSYNC_SPOOL_DIR={workdir / name}",
             "-s", f"CLUSTERSYNC_PREFETCH={prefetch}"],
            cwd=project, env=env, stdout=subprocess.DEVNULL,
            stderr=open(workdir / f"{name}.log", "wb")) for name in NODES]  # noqa: SIM115
        for node in nodes:
            node.wait(timeout=600)
        figures = report(sites, time.monotonic() - started)
        figures["pages"] = SITES * pages
        figures["fetched"] = sum(len(site.hits()) for site in sites)
        return figures
    finally:
        redis.stop()
        for site in sites:
            site.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--polite-pages", type=int, default=120,
                        help="pages of each of the 20 sites (default 120: about 12 s)")
    parser.add_argument("--polite-mode", choices=("cluster", "node"), default="cluster",
                        help="CLUSTERSYNC_POLITENESS of the nodes (default cluster)")
    parser.add_argument("--polite-prefetch", type=int, default=0,
                        help="CLUSTERSYNC_PREFETCH of the nodes (default 0: sized)")
    parser.add_argument("--polite-no-jitter", action="store_true",
                        help="RANDOMIZE_DOWNLOAD_DELAY = False (default: Scrapy's jitter)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    print_run(args)
    return 0


def print_run(args: argparse.Namespace) -> None:
    """Run the variant with ``args`` (``add_arguments``'s) and print its figures."""
    jitter = not args.polite_no_jitter
    figures = run(args.polite_pages, args.polite_mode, args.polite_prefetch, jitter)
    prefetch = args.polite_prefetch or "sized"
    print(f"polite ({args.polite_mode}, prefetch {prefetch}, jitter {'on' if jitter else 'off'})"
          f": 2 nodes, {SITES} sites at "
          f"DOWNLOAD_DELAY {DELAY_S}: "
          f"{figures['requests']} requests in {figures['span_s']}s; reached "
          f"{figures['reached']:.1%} of the {SITES / DELAY_S:.0f} req/s budget "
          f"({figures['reached_middle']:.1%} over the middle 80%, "
          f"{figures['reached_all_busy']:.1%} over the {figures['all_busy_s']}s every site had "
          f"pages left); max per-site excess over "
          f"any 5 s window: {figures['max_excess_5s']:+.0f} requests "
          f"({figures['max_excess_5s_share']:+.1%})")
    reached, excess = figures["reached_all_busy"], figures["max_excess_5s_share"]
    print(f"  budget reached while every site had pages left: {reached:.2f} (target >= "
          f"{TARGET_REACHED}: {'met' if reached >= TARGET_REACHED else 'NOT met'}); largest "
          f"excess of a site over a 5 s window: {excess:+.1%} (target <= {TARGET_EXCESS:.0%}: "
          f"{'met' if excess <= TARGET_EXCESS else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
