"""Regions: a node crawls the sites pinned to its region first, and those of other regions only
when it holds nothing else; `clustersync regions` pins sites, moving what they have queued.

The crawl: two real `scrapy crawl` nodes, one in region eu and one in us, and two sites on
their own loopback addresses (each its own Scrapy download slot), pinned one to each region.
The eu site is small and fast, the us site slow: the eu node crawls its own site alone, then
helps with the us site; the us node never has to take the eu site's pages.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from testkit.redis_server import RedisServer
from testkit.site import TestSite

from cli_runner import run_cli
from conftest import SiteFactory
from support import start_node, wait_all

JOB = "site"  # the example spider's name, so the job's name


def test_each_node_crawls_its_regions_site_first_and_helps_elsewhere_only_when_it_has_nothing(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a small fast site pinned to eu and a slow one pinned to us, both seeded
    eu_site: TestSite = site(30, host="127.0.0.2", links_per_page=3)
    us_site: TestSite = site(60, host="127.0.0.3", links_per_page=3, delay_s=0.05)
    urls = tmp_path / "start.txt"
    urls.write_text(f"{eu_site.start_url}\n{us_site.start_url}\n")
    seeded = run_cli(redis_server.url, "seed", JOB, "--create", "-f", str(urls))
    assert seeded.returncode == 0, seeded.output
    pinned = run_cli(redis_server.url, "regions", JOB, "--pin", "127.0.0.2=eu",
                     "--pin", "127.0.0.3=us")
    assert pinned.returncode == 0, pinned.output
    assert "2 site(s)" in pinned.stdout and "2 queued request(s) moved" in pinned.stdout
    # when a node of each region crawls
    slow = {"CONCURRENT_REQUESTS": "2"}
    nodes = [start_node(name, redis_server.url, eu_site.start_url, tmp_path,
                        {**slow, "CLUSTERSYNC_REGION": region})
             for name, region in (("eu-node", "eu"), ("us-node", "us"))]
    wait_all(nodes, timeout_s=90)
    # then every page of both sites was fetched once
    for each in (eu_site, us_site):
        hits = Counter(each.agent_hits("eu-node").hits) + Counter(each.agent_hits("us-node").hits)
        assert sorted(hits) == sorted(each.page_paths()), "a page missing"
        assert max(hits.values()) == 1, "a page fetched twice"
    # and the us node, never out of work of its own, took none of the eu site's pages
    assert eu_site.agent_hits("us-node").hits == {}
    # and the eu node crawled the us site only once it had finished its own
    eu_times, us_times = eu_site.agent_hits("eu-node").times, us_site.agent_hits("eu-node").times
    assert us_times, "the eu node never helped with the us site"
    assert min(us_times) > max(eu_times)


def test_a_pin_moves_what_a_site_has_queued_and_bad_pins_are_refused(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"https://a.example/{n}\n" for n in range(5)))
    assert run_cli(redis_server.url, "seed", JOB, "--create", "-f", str(urls)).returncode == 0
    # a pin moves the site's 5 queued requests, a second one of the same region changes nothing
    moved = run_cli(redis_server.url, "regions", JOB, "--pin", "a.example=eu-west-1", "--json")
    assert json.loads(moved.stdout) == {"job": JOB, "changed": 1, "moved": 5}
    again = run_cli(redis_server.url, "regions", JOB, "--pin", "a.example=eu-west-1", "--json")
    assert json.loads(again.stdout) == {"job": JOB, "changed": 0, "moved": 0}
    listed = run_cli(redis_server.url, "regions", JOB, "--json")
    assert json.loads(listed.stdout) == {"a.example": "eu-west-1"}
    # and what is queued still counts as queued
    status = json.loads(run_cli(redis_server.url, "status", JOB, "--json").stdout)
    assert status["queued"] == 5
    # an unpin moves them back
    back = run_cli(redis_server.url, "regions", JOB, "--unpin", "a.example", "--json")
    assert json.loads(back.stdout) == {"job": JOB, "changed": 1, "moved": 5}
    assert json.loads(run_cli(redis_server.url, "regions", JOB, "--json").stdout) == {}
    # bad input: a clear error, exit 2, nothing changed
    for bad, says in ((["--pin", "a.example"], "SITE=REGION"),
                      (["--pin", "a.example=eu west"], "cannot name a region"),
                      (["--pin", "a.example=eu", "--unpin", "a.example"], "both")):
        answer = run_cli(redis_server.url, "regions", JOB, *bad)
        assert answer.returncode == 2, answer.output
        assert says in answer.stderr, answer.stderr
    assert json.loads(run_cli(redis_server.url, "regions", JOB, "--json").stdout) == {}
    # and a job that does not exist is said so (exit 3)
    missing = run_cli(redis_server.url, "regions", "nojob")
    assert missing.returncode == 3, missing.output
