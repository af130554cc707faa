"""End to end, under chaos: a listing spider (many items per page, then its links, a slow async
item pipeline) on two nodes, one node killed with SIGKILL at random moments and restarted.

No page and no item may be lost, whichever reactor runs the nodes. A node must not ack a
request (mark it done in Redis) before the requests its callback yielded are queued and its
items are through the pipelines: under the asyncio reactor Scrapy drains a callback's output
into a queue before the child requests reach the scheduler, so an ack sent when the callback's
output ends (as the add-on did) reached Redis first, and a SIGKILL in between lost those
children for good: 3 to 15 of the 600 pages per run, and 150-520 items under either reactor.

A second spider (the fault spider ``chaos``) reaches its links through redirects, retries and
errbacks, and is killed at random in the same way.

``CLUSTERSYNC_CHAOS_RUNS`` (default 1; ``make chaos`` runs 5) runs per reactor, each on its own
redis-server and site; ``CLUSTERSYNC_CHAOS_SEED`` replays the kill schedule of a printed seed.
Without ``CLUSTERSYNC_CHAOS_RUNS`` (``make test``) each run is a quick one: a smaller site and
fewer kills, each made once the crawl has fetched a random share of the site, so that every kill
still lands mid-crawl however fast or loaded the machine is; ``make chaos`` soaks with the full
site and kill counts on a schedule of random seconds.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from scrapy_clustersync.results import decode_record
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import (
    ROOT,
    Node,
    chaos_runs,
    chaos_seed,
    chaos_soak,
    missing_pages,
    node_env,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    wait_all,
)

LISTING_PROJECT = ROOT / "tests" / "projects" / "listing"

REACTORS = {
    "asyncio": {},  # Scrapy's default, the asyncio reactor
    "select": {"TWISTED_REACTOR": "twisted.internet.selectreactor.SelectReactor"},
}
RUNS = chaos_runs()
#: a soak (``make chaos``) or a quick run (``make test``)
SOAK = chaos_soak()

#: a quick run's 200 pages still take several node lifetimes to crawl, and its 3 kills, at
#: 15-75 % of the site, each land while both nodes hold leases, pages in callbacks and items in
#: the pipeline: the window the lost children and items of the bug fell into
PAGES = 600 if SOAK else 200
LINKS_PER_PAGE = 3  # the next page and two others: most pages are linked from few pages
ITEMS_PER_PAGE = 120
PIPELINE_DELAY_S = 0.01
KILL_INTERVAL_S = (1.5, 3.5)
MAX_KILLS = 8 if SOAK else 3
#: in a quick run, a kill comes once this share of the site was fetched (random in the range)
KILL_AT_SHARE = (0.15, 0.75)
NODE_SLOTS = ("a", "b")
#: the site of the spider that reaches its links in six ways
SIX_WAYS_PAGES = 400 if SOAK else 150


def kill_moments(rng: random.Random, web: TestSite, pages: int,
                 interval_s: tuple[float, float] = KILL_INTERVAL_S) -> Callable[[int], None]:
    """``wait(kills)``: wait for the moment of the next kill. A soak sleeps a random
    ``interval_s``; a quick run waits until the site served a random share of its
    ``pages`` (in ``KILL_AT_SHARE``, rising kill after kill), or the crawl is near its end."""
    shares = sorted(rng.uniform(*KILL_AT_SHARE) for _ in range(MAX_KILLS))

    def wait(kills: int) -> None:
        if SOAK:
            time.sleep(rng.uniform(*interval_s))
            return
        target = shares[min(kills, len(shares) - 1)] * pages
        deadline = time.monotonic() + 60
        while len(web.hits()) < target and time.monotonic() < deadline:
            time.sleep(0.05)

    return wait


def start_listing_node(name: str, redis_url: str, web: TestSite, workdir: Path,
                       reactor_settings: Mapping[str, str]) -> Node:
    settings = {
        "ITEMS_PER_PAGE": str(ITEMS_PER_PAGE),
        "PIPELINE_DELAY": str(PIPELINE_DELAY_S),
        "LISTING_ITEMS_FILE": str(workdir / f"items-{name}.txt"),
        **reactor_settings,
    }
    return start_node(name, redis_url, web.start_url, workdir, settings,
                      project_dir=LISTING_PROJECT, spider="listing")


def kill_and_restart_at_random(nodes: dict[str, Node], web: TestSite, rng: random.Random,
                               restart: Callable[[str], Node]) -> int:
    """Every few seconds, kill with SIGKILL a node that is crawling (has fetched a page; one
    still starting up has nothing to lose) and start another in its place at once; up to
    ``MAX_KILLS`` times or until a node ends by itself (the job is over). Returns the kills.
    """
    kills = 0
    wait_for_kill = kill_moments(rng, web, PAGES)
    while kills < MAX_KILLS:
        wait_for_kill(kills)
        if any(node.process.poll() is not None for node in nodes.values()):
            break
        by_agent = web.hits_by_agent()
        crawling = [slot for slot in NODE_SLOTS if by_agent.get(nodes[slot].name)]
        if not crawling:
            time.sleep(0.1)
            continue
        slot = rng.choice(crawling)
        nodes[slot].kill()
        kills += 1
        nodes[slot] = restart(f"{slot}{kills}")
    return kills


def items_never_processed(web: TestSite, workdir: Path) -> int:
    """Items of the site that no node's pipeline finished."""
    done = {line for path in workdir.glob("items-*.txt") for line in path.read_text().splitlines()}
    expected = {f"{web.url}{path} {position}" for path in web.page_paths()
                for position in range(ITEMS_PER_PAGE)}
    return len(expected - done)


def items_in_stream_not_once(server: RedisServer, web: TestSite) -> list[tuple[str, int]]:
    """The items of the site that the job's results stream holds other than exactly once."""
    entries: Any = server.client().xrange(JobKeys("listing").results)
    found = Counter((record.data["page"], record.data["position"])
                    for record in (decode_record(sid, fields) for sid, fields in entries))
    expected = {(url, position) for url in web.page_urls() for position in range(ITEMS_PER_PAGE)}
    return sorted(item for item in expected | set(found) if found.get(item) != 1)


@pytest.mark.chaos
@pytest.mark.parametrize("run", range(RUNS), ids=lambda run: f"run{run + 1}")
@pytest.mark.parametrize("reactor", sorted(REACTORS))
def test_listing_spider_loses_no_page_when_nodes_are_killed_at_random(
    reactor: str, run: int, redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a listing site, and two nodes whose spider yields many items per page before
    # the page's links, into an async pipeline that waits on every item
    seed = chaos_seed()
    rng = random.Random(seed)
    print(f"\n[{reactor} run{run + 1}] seed {seed} (replay: CLUSTERSYNC_CHAOS_SEED={seed} "
          f"CLUSTERSYNC_CHAOS_RUNS=1 pytest tests/test_listing_spider_kills.py -k {reactor})")
    web = site(PAGES, links_per_page=LINKS_PER_PAGE)

    started: list[Node] = []

    def restart(name: str) -> Node:
        node = start_listing_node(name, redis_server.url, web, tmp_path, REACTORS[reactor])
        started.append(node)
        return node

    nodes = {slot: restart(f"{slot}0") for slot in NODE_SLOTS}

    # when one node or the other is killed with SIGKILL at random moments, and restarted
    # under a new name at once, and the survivors then finish the job
    try:
        kills = kill_and_restart_at_random(nodes, web, rng, restart)
        survivors = list(nodes.values())
        wait_all(survivors, timeout_s=180)
    finally:
        for node in started:
            if node.process.poll() is None:
                node.kill()

    # then every page was fetched (some twice: those a killed node held), and the survivors
    # ended the job normally
    missing = missing_pages(web)
    summary = (f"[{reactor} run{run + 1}] seed {seed}: {kills} kills, {len(missing)} of {PAGES} "
               f"pages never fetched, {len(pages_fetched_twice(web))} fetched twice or more, "
               f"{pages_fetched(web)} fetches, {items_never_processed(web, tmp_path)} items "
               f"never through the pipeline")
    print(summary)
    assert SOAK or kills == MAX_KILLS, f"{summary}: a quick run kills {MAX_KILLS} times mid-crawl"
    assert missing == [], f"{summary}; first missing: {missing[:10]}"
    assert items_never_processed(web, tmp_path) == 0, summary
    # and the job's results stream holds every item exactly once, however often its page was
    # fetched
    assert items_in_stream_not_once(redis_server, web) == [], summary
    # (a node restarted just as the other finished the job finds it finished: it says so, has
    # fetched nothing and closes with clustersync_job_finished, as any node started then does)
    late = [node for node in survivors if node.finish_reason() == "clustersync_job_finished"
            and "already finished" in node.log() and not web.hits_by_agent().get(node.name)]
    ended = [node.finish_reason() for node in survivors if node not in late]
    assert ended and ended == ["finished"] * len(ended), (
        summary + "".join(f"\n--- {node.name}:\n{node.log()[-2000:]}" for node in survivors))


# ---- a spider that reaches its links in six ways ------------------------------------------------

@pytest.mark.chaos
@pytest.mark.parametrize("run", range(RUNS), ids=lambda run: f"run{run + 1}")
@pytest.mark.parametrize("reactor", sorted(REACTORS))
def test_a_spider_reaching_links_through_redirects_retries_and_errbacks_loses_no_page_under_kills(
    reactor: str, run: int, redis_server: RedisServer, site: SiteFactory, fault_project: Path,
    tmp_path: Path,
) -> None:
    """The fault spider ``chaos`` reaches its links in six ways: plain, meta copied from the
    parent (lease token included), a redirect, a 503 then a retry then a redirect, an errback
    of a request the downloader ignores, an errback of a 404; its callback is async."""
    # given two nodes of that spider on a slow site
    seed = chaos_seed()
    rng = random.Random(seed)
    web = site(SIX_WAYS_PAGES, links_per_page=3, delay_s=0.1)
    settings = {
        "DOWNLOADER_MIDDLEWARES": '{"example.spiders.faults.ChaosDownloaderMiddleware": 950}',
        "ITEM_PIPELINES": '{"example.spiders.faults.PagesPipeline": 100}',
        "CONCURRENT_ITEMS": "4",
        **REACTORS[reactor],
    }
    started: list[Node] = []

    def launch(name: str) -> Node:
        node = start_node(name, redis_server.url, web.start_url, tmp_path,
                          {**settings, "PAGES_FILE": str(tmp_path / f"pages-{name}.txt")},
                          project_dir=fault_project, spider="chaos", env=node_env(tmp_path))
        started.append(node)
        return node

    nodes = {"a": launch("a0"), "b": launch("b0")}
    # when one node or the other is killed with SIGKILL every 1-3 s and restarted at once
    kills = 0
    wait_for_kill = kill_moments(rng, web, SIX_WAYS_PAGES, interval_s=(1.0, 3.0))
    try:
        while kills < MAX_KILLS:
            wait_for_kill(kills)
            if any(node.process.poll() is not None for node in nodes.values()):
                break
            slot = rng.choice(sorted(nodes))
            nodes[slot].kill()
            kills += 1
            nodes[slot] = launch(f"{slot}{kills}")
        wait_all(list(nodes.values()), timeout_s=180)
    finally:
        for node in started:
            if node.process.poll() is None:
                node.kill()
    # then every page was parsed, and every node closed cleanly: the job finished, or it had
    # finished before a node started last joined it (that node says so and stops)
    parsed = {int(line) for path in tmp_path.glob("pages-*.txt")
              for line in path.read_text().split()}
    missing = sorted(set(range(SIX_WAYS_PAGES)) - parsed)
    summary = (f"{reactor} seed {seed}: {kills} kills, {len(missing)} of {SIX_WAYS_PAGES} "
               f"pages never parsed {missing[:10]}, "
               f"{len(pages_fetched_twice(web))} fetched twice or more")
    print(summary)
    assert SOAK or kills == MAX_KILLS, f"{summary}: a quick run kills {MAX_KILLS} times mid-crawl"
    assert missing == [], summary
    reasons = {node.name: node.finish_reason() for node in nodes.values()}
    late = [node.name for node in nodes.values() if "already finished at" in node.log()]
    assert all(reason == "finished" or reason == "clustersync_job_finished" and name in late
               for name, reason in reasons.items()), (summary, reasons)
    assert "finished" in reasons.values(), (summary, reasons)
