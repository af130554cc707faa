"""Shared settings applied live: `clustersync config set` while real `scrapy crawl` nodes crawl a
real site; what the site (or a proxy) receives shows what every node applied."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.forward_proxy import ForwardProxy
from testkit.proxy import TcpProxy
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import ProxyFactory, SiteFactory
from support import (
    Node,
    clustersync,
    project_with_spiders,
    start_node,
    wait_all,
    wait_until,
)

JOB = "live"
#: a node's own identity, set at download time (a request may be crawled by any node)
NODE_HEADER = "X-Node"
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "2", "CONCURRENT_REQUESTS": "2"}

LIVE_SPIDER = '''
import os
from typing import Any

import scrapy


class NodeHeader:
    """Marks every request with the node that downloads it."""

    def process_request(self, request: Any) -> None:
        request.headers["X-Node"] = os.environ["NODE_NAME"]


class LiveSpider(scrapy.Spider):
    """Follows every link; an item's title carries the live rule TITLE_PREFIX."""

    name = "live"
    clustersync_live_settings = {"TITLE_PREFIX": "str"}
    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"example.spiders.live.NodeHeader": 100},
        "TITLE_PREFIX": "v1:",
    }

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self):
        yield scrapy.Request(self.start_url)

    def parse(self, response):
        prefix = self.live_settings["TITLE_PREFIX"]
        yield {"title": prefix + (response.css("title::text").get() or ""),
               "node": os.environ["NODE_NAME"]}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)
'''


def live_nodes(count: int, redis_url: str, web: TestSite, tmp_path: Path,
               settings: dict[str, str | None] | None = None, first: int = 1) -> list[Node]:
    """``count`` nodes of the live spider; each writes its items to ``<name>.jsonl``."""
    project = project_with_spiders(tmp_path, "live", LIVE_SPIDER)
    nodes = []
    for i in range(first, first + count):
        name = f"node{i}"
        nodes.append(start_node(name, redis_url, web.start_url, tmp_path,
                                {**SLOW, **(settings or {})}, project_dir=project,
                                spider="live", env={"NODE_NAME": name},
                                options=("-o", str(tmp_path / f"{name}.jsonl"))))
    return nodes


def config_set(url: str, *pairs: str) -> float:
    """`clustersync config set JOB KEY VALUE...`; returns when it returned (monotonic)."""
    answer = clustersync(url, "config", "set", JOB, *pairs)
    assert answer.returncode == 0, answer.stderr
    return time.monotonic()


def by_node(web: TestSite, since: float) -> dict[str, list[dict[str, str]]]:
    """The headers of the GETs after ``since``, per node (its X-Node header)."""
    seen: dict[str, list[dict[str, str]]] = {}
    for headers in web.headers_seen(since):
        seen.setdefault(headers.get(NODE_HEADER, "?"), []).append(headers)
    return seen


def items_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def crawling(web: TestSite, names: list[str]) -> bool:
    seen = by_node(web, 0.0)
    return all(len(seen.get(name, [])) >= 5 for name in names)


@pytest.mark.timing
def test_user_agent_headers_and_spider_rule_set_mid_crawl_reach_every_node_on_its_next_requests(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site, with no USER_AGENT of their own on the command line
    web = site(300, delay_s=0.05)
    nodes = live_nodes(2, redis_server.url, web, tmp_path, {"USER_AGENT": None})
    names = [node.name for node in nodes]
    wait_until(lambda: crawling(web, names), 30, "both nodes to crawl")
    # when a user agent, a default header, a proxy and the spider's own rule are set
    proxy = ForwardProxy().start()
    try:
        proxy_url = proxy.url.replace("http://", "http://crawler:s3cret@")
        changed_at = config_set(redis_server.url, "USER_AGENT", "shared-agent/2",
                                "DEFAULT_REQUEST_HEADERS", '{"X-Probe": "two"}',
                                "CLUSTERSYNC_PROXY", proxy_url, "TITLE_PREFIX", "v2:")
        check_applied(web, proxy, names, changed_at)
        wait_all(nodes, 120)
    finally:
        proxy.stop()
    # and the spider's rule changed the items each node yields after the change
    for name in names:
        titles = [item["title"] for item in items_of(tmp_path / f"{name}.jsonl")]
        assert titles[-1].startswith("v2:"), (name, titles[-3:])
    assert any(t.startswith("v1:") for n in names
               for t in (i["title"] for i in items_of(tmp_path / f"{n}.jsonl")))
    # and the proxy's password is in no log
    assert not any("s3cret" in node.log() for node in nodes)


def check_applied(web: TestSite, proxy: ForwardProxy, names: list[str], changed_at: float
                  ) -> None:
    """Every node sends the new user agent and header through the proxy on its next requests."""

    # then every node sends them on its next requests
    def applied(name: str) -> bool:
        return any(h.get("User-Agent") == "shared-agent/2" and h.get("X-Probe") == "two"
                   for h in by_node(web, changed_at).get(name, []))

    wait_until(lambda: all(applied(name) for name in names), 5, "every node to apply")
    settled = time.monotonic() + 1.0  # requests held before the change may still go out
    wait_until(lambda: all(len(by_node(web, settled).get(n, [])) >= 3 for n in names), 10,
               "more requests of every node")
    later = by_node(web, settled)
    for name in names:
        assert {h.get("User-Agent") for h in later[name]} == {"shared-agent/2"}, name
        assert {h.get("X-Probe") for h in later[name]} == {"two"}, name
    proxied = {headers.get(NODE_HEADER) for url, headers in proxy.requests}
    assert proxied == set(names)
    assert {headers.get("Proxy-Authorization") for url, headers in proxy.requests} == {
        "Basic Y3Jhd2xlcjpzM2NyZXQ="}  # crawler:s3cret
    # what the site received after the change came through the proxy
    assert len(proxy.requests) >= sum(len(seen) for seen in later.values())


def first_time_with(web: TestSite, agent: str) -> float | None:
    """time.monotonic() of the first GET the site received with User-Agent ``agent``."""
    with web._lock:
        return next((at for at, headers in web._headers if headers.get("User-Agent") == agent),
                    None)


def reconnected_at(redis_proxy: TcpProxy, accepted: int, timeout_s: float) -> float:
    """When the node's first connection after ``accepted`` reached Redis through the proxy."""
    deadline = time.monotonic() + timeout_s
    while redis_proxy.connections_accepted <= accepted:
        assert time.monotonic() < deadline, "the node never reconnected"
        time.sleep(0.001)  # a poll of the proxy's counter, not a wait for the node
    return time.monotonic()


@pytest.mark.timing
def test_a_node_cut_off_while_a_setting_changed_applies_it_within_a_second_of_reconnecting(
    redis_server: RedisServer, proxy_factory: ProxyFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node crawling, whose connection to Redis is cut
    web = site(600, delay_s=0.05)
    redis_proxy = proxy_factory(redis_server)
    [node] = live_nodes(1, redis_proxy.url(), web, tmp_path, {"USER_AGENT": None})
    wait_until(lambda: crawling(web, [node.name]), 30, "the node to crawl")
    redis_proxy.cut()
    wait_until(lambda: "is unreachable" in node.log(), 10, "the node to see Redis gone")
    # when a setting changes meanwhile, and Redis comes back
    config_set(redis_server.url, "USER_AGENT", "after-outage/1")
    accepted = redis_proxy.connections_accepted
    redis_proxy.restore()
    back = reconnected_at(redis_proxy, accepted, 10)
    # then its requests use it within a second of its first call after the outage
    wait_until(lambda: first_time_with(web, "after-outage/1") is not None, 10, "the new agent")
    applied = first_time_with(web, "after-outage/1")
    assert applied is not None
    print(f"\napplied {applied - back:.3f}s after the node reconnected")
    assert applied - back < 1.0
    node.kill()


def record_of(server: RedisServer, node: Node) -> dict[str, Any]:
    """The node record (heartbeat's node_info) of ``node``'s process."""
    for raw in server.client().hvals(f"clustersync:{{{JOB}}}:node_info"):
        record: dict[str, Any] = json.loads(raw)
        if record.get("pid") == node.process.pid:
            return record
    return {}


@pytest.mark.timing
def test_a_late_node_uses_the_shared_settings_from_its_first_request_and_s_keys_win(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node started with -s DOWNLOAD_TIMEOUT, crawling a site that answers in 0.3 s
    web = site(200, delay_s=0.3)
    [first] = live_nodes(1, redis_server.url, web, tmp_path,
                         {"USER_AGENT": None, "DOWNLOAD_TIMEOUT": "10"})
    wait_until(lambda: crawling(web, [first.name]), 30, "the first node to crawl")
    # when a shorter timeout and a user agent are shared, then a second node starts
    config_set(redis_server.url, "DOWNLOAD_TIMEOUT", "0.1", "USER_AGENT", "late/1")
    # (its retries would carry its timeout in their meta to the first node: none here)
    [late] = live_nodes(1, redis_server.url, web, tmp_path,
                        {"USER_AGENT": None, "RETRY_ENABLED": "False"}, first=2)
    wait_until(lambda: "took longer than 0.1 seconds" in late.log(), 20,
               "the late node to time out")
    # then the late node's very first request used the shared agent, and it times out
    late_requests = by_node(web, 0.0)[late.name]
    assert {h.get("User-Agent") for h in late_requests} == {"late/1"}
    # and the first node kept its own timeout (and took the agent), as its record says
    wait_until(lambda: record_of(redis_server, first).get("settings_version") == 1, 10,
               "the first node's record")
    assert "took longer than" not in first.log()
    assert first_time_with(web, "late/1") is not None
    assert record_of(redis_server, first)["settings_overrides"] == ["DOWNLOAD_TIMEOUT"]
    wait_until(lambda: record_of(redis_server, late).get("settings_version") == 1, 10,
               "the late node's record")
    assert record_of(redis_server, late)["settings_overrides"] == []  # RETRY_* is not shared
    first.kill()
    late.kill()
