"""Nodes that cannot reach Redis work through `clustersync serve` (docs/http-workers.md): a real
redis-server, serve as a subprocess, `scrapy crawl` nodes over Redis and over HTTP on one job."""

from __future__ import annotations

import json
import time
from pathlib import Path

from api_serve import ServeProcess

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    clustersync,
    missing_pages,
    pages_fetched,
    start_node,
    wait_all,
    wait_until,
)

JOB = "site"
#: leases outlast NODE_DEAD_AFTER (3 s) by far: what brings a dead node's leases back is its
#: death, declared by the other node's heartbeat, not their deadlines
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "4", "CONCURRENT_REQUESTS": "4",
        "CLUSTERSYNC_LEASE_TIMEOUT": "30"}


def http_settings(serve: ServeProcess, token: str = "") -> dict[str, str]:
    """A node's settings that send it through ``serve`` instead of Redis."""
    return {"CLUSTERSYNC_URL": serve.base_url, "CLUSTERSYNC_TOKEN": token, **SLOW}


def add_token(redis_url: str, role: str = "operator") -> str:
    made = clustersync(redis_url, "token", "add", "worker", "--role", role)
    assert made.returncode == 0, made.stderr
    return next(word for word in made.stdout.split() if word.startswith("csk_"))


def test_a_node_over_http_and_one_over_redis_crawl_one_job_and_the_http_one_dies(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given serve with a token, one node over Redis and one over HTTP on a slow site
    web = site(200, delay_s=0.05)
    token = add_token(redis_server.url)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        over_http = start_node("httpnode", "", web.start_url, tmp_path,
                               http_settings(serve, token))
        wait_until(lambda: len(web.agent_hits("httpnode").times) > 20, 30, "the HTTP node")
        over_redis = start_node("redisnode", redis_server.url, web.start_url, tmp_path, SLOW)
        wait_until(lambda: len(web.agent_hits("redisnode").times) > 5, 30, "the Redis node")
        # when the HTTP node is killed mid-crawl
        over_http.kill()
        killed_at = time.monotonic()
        # then its leases come back within CLUSTERSYNC_NODE_DEAD_AFTER (3 s) and a margin
        client = redis_server.client()
        wait_until(lambda: client.hlen(f"clustersync:{{{JOB}}}:dead_nodes") > 0,
                   20, "the dead node's leases to come back")
        back_s = time.monotonic() - killed_at
        death = json.loads(next(iter(client.hvals(f"clustersync:{{{JOB}}}:dead_nodes"))))
        dead_id = death["record"]["node"].encode()
        wait_until(lambda: not any(v.endswith(b"|" + dead_id) for v in
                                   client.hvals(f"clustersync:{{{JOB}}}:leased")),
                   5, "every lease of the dead node to be back in the queue")
        back_s = time.monotonic() - killed_at
        # and the Redis node fetches every page
        wait_all([over_redis], timeout_s=60)
    hits = len(web.agent_hits("httpnode").times)
    print(f"\nhttp node: {hits} pages before its kill; its leases back {back_s:.1f}s after")
    assert over_redis.process.returncode == 0, over_redis.log()[-3000:]
    assert pages_fetched(web) == web.pages, missing_pages(web)[:10]
    # (NODE_DEAD_AFTER is 3 s: declared dead by the Redis node's heartbeat, with margin)
    assert death["leases_returned"] > 0 and back_s < 3.0 * 3
