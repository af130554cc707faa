"""Nodes that cannot reach Redis work through `clustersync serve` (docs/http-workers.md): a real
redis-server, serve as a subprocess, `scrapy crawl` nodes over Redis and over HTTP on one job."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from api_serve import ServeProcess

from scrapy_clustersync.store import JobStore
from scrapy_clustersync.store.http_client import http_client
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.records import as_text
from scrapy_clustersync.store.write_ops import Ack, Op
from testkit.redis_server import RedisServer
from testkit.tls_certs import issue, make_ca

from conftest import SiteFactory
from support import (
    EXAMPLE_PROJECT,
    clustersync,
    missing_pages,
    pages_fetched,
    pages_fetched_twice,
    push_op,
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
    web = site(120, delay_s=0.05)
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
    # (at least once: a page the killed node fetched but had not acked is fetched again)
    assert not missing_pages(web)
    assert sum(pages_fetched_twice(web).values()) <= 2 * death["leases_returned"]
    # (NODE_DEAD_AFTER is 3 s: declared dead by the Redis node's heartbeat, with margin)
    assert death["leases_returned"] > 0 and back_s < 3.0 * 3


def job_stats(server: RedisServer, job: str = JOB) -> dict[str, int]:
    raw = server.client().hgetall(f"clustersync:{{{job}}}:stats")
    return {as_text(k): int(v) for k, v in raw.items()}


def test_the_example_client_crawls_part_of_a_job_and_a_scrapy_node_finishes_it(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job seeded through serve
    web = site(40)
    token = add_token(redis_server.url)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        auth = {"Authorization": f"Bearer {token}"}
        seeded = serve.http.post(f"/api/jobs/{JOB}/seed", headers=auth,
                                 json={"urls": [web.start_url], "create": True})
        assert seeded.status_code == 200, seeded.text
        # when the example client crawls 12 of its pages
        ran = subprocess.run(
            [sys.executable, str(EXAMPLE_PROJECT / "http_worker.py"), serve.base_url, JOB,
             token, "12"], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        # then those 12 pages are fetched once and marked done, their links queued
        assert pages_fetched(web) == 12 and not pages_fetched_twice(web)
        stats = job_stats(redis_server)
        assert stats["acked"] == 12 and stats["pushed"] > 12
        # and a Scrapy node over HTTP finishes the job: every page once
        node = start_node("httpnode", "", web.start_url, tmp_path, http_settings(serve, token))
        wait_all([node], timeout_s=60)
    assert node.process.returncode == 0, node.log()[-3000:]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)


def test_a_flush_sent_again_with_its_call_id_is_applied_once_over_both_forms(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job with two queued URLs and a worker that leased them
    web = site(5)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        path = f"/api/v1/jobs/{JOB}/nodes/w1"
        epoch = serve.http.post(f"{path}/join", json={}).json()["epoch"]
        seed = {"epoch": epoch, "call_id": "seed", "push": [
            {"url": web.start_url}, {"url": web.start_url + "?b"}]}
        assert serve.http.post(f"{path}/flush", json=seed).json()["pushed"] == 2
        leased = serve.http.post(f"{path}/lease", json={
            "epoch": epoch, "call_id": "l1", "count": 2}).json()["entries"]
        first, second = (entry["id"] for entry in leased)
        # when a JSON flush (a push and an ack) is sent twice with one call id
        flush = {"epoch": epoch, "call_id": "f1", "push": [{"url": web.start_url + "?c"}],
                 "ack": [first]}
        answers = [serve.http.post(f"{path}/flush", json=flush).json() for _ in range(2)]
        # then the second answer is the first one's, and nothing changed twice
        assert answers[0] == answers[1] == {"pushed": 1, "filtered": 0, "acked": 1,
                                            "released": 0, "dead": 0}
        assert job_stats(redis_server)["pushed"] == 3
        # and likewise a Scrapy node's flush over calls (msgpack), sent twice
        store = JobStore(http_client(serve.base_url, "", JOB, "w1"), JOB, "w1")
        store.join_node(ttl_ms=0, claim=False, recrawl="join")
        ops: list[Op] = [push_op(web.start_url + "?d"), Ack(second)]
        results = [store.flush(epoch, ops, "f2") for _ in range(2)]
        assert results[0] == results[1] and (results[0].pushed, results[0].acked) == (1, 1)
    stats = job_stats(redis_server)
    assert (stats["pushed"], stats["acked"]) == (4, 2)


def serve_again(redis_url: str, workdir: Path, gone: ServeProcess) -> ServeProcess:
    """serve started again on the port of ``gone`` (stopped), where the nodes look for it."""
    again = ServeProcess(redis_url, workdir, "--port", str(gone.port))  # (the last --port wins)
    again.http.close()
    again.port, again.base_url = gone.port, gone.base_url
    again.http = httpx.Client(base_url=gone.base_url, timeout=10.0)
    return again.wait_ready()


def test_serve_away_mid_crawl_is_an_outage_the_http_node_rides_out(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node over HTTP crawling a slow site
    web = site(80, delay_s=0.05)
    serve = ServeProcess(redis_server.url, tmp_path).wait_ready()
    node = start_node("httpnode", "", web.start_url, tmp_path, http_settings(serve))
    try:
        wait_until(lambda: len(web.agent_hits("httpnode").times) > 20, 30, "the HTTP node")
        # when serve is away for longer than the node's NODE_DEAD_AFTER (3 s), then back
        serve.stop()
        time.sleep(4)
        assert node.process.poll() is None, node.log()[-3000:]
        serve = serve_again(redis_server.url, tmp_path, serve)
        # then the node finishes the crawl: every page fetched, its writes all applied
        wait_all([node], timeout_s=60)
    finally:
        serve.stop()
    assert node.process.returncode == 0, node.log()[-3000:]
    assert not missing_pages(web)
    assert job_stats(redis_server)["acked"] == web.pages
    # and each page's item is in the job's results once, written with its ack
    assert redis_server.client().xlen(JobKeys(JOB).results) == web.pages
    assert node.finish_reason() == "finished"


def test_a_pause_and_a_settings_change_reach_the_http_node_and_a_resume_finishes_it(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node over HTTP crawling a slow site
    web = site(80, delay_s=0.1)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        node = start_node("httpnode", "", web.start_url, tmp_path, http_settings(serve))
        wait_until(lambda: len(web.agent_hits("httpnode").times) > 10, 30, "the HTTP node")
        # when the job is paused over the API
        assert serve.http.post(f"/api/jobs/{JOB}/pause").status_code == 200
        paused_at = time.monotonic()
        time.sleep(3)
        # then the node fetches nothing more once it read the state (it polls: no pub/sub)
        late = [t for t in web.agent_hits("httpnode").times if t > paused_at + 1.5]
        assert late == [] and node.process.poll() is None
        # and a shared settings change made meanwhile is applied by it, live
        changed = serve.http.put(f"/api/jobs/{JOB}/settings",
                                 json={"set": {"DOWNLOAD_DELAY": 0.01}})
        assert changed.status_code == 200, changed.text
        wait_until(lambda: "shared settings version 1 applied" in node.log(), 10,
                   "the HTTP node to apply the shared settings")
        # and once resumed it finishes the crawl
        assert serve.http.post(f"/api/jobs/{JOB}/resume").status_code == 200
        wait_all([node], timeout_s=60)
    assert node.process.returncode == 0 and not missing_pages(web)


def test_a_node_reaches_serve_over_https_checking_its_certificate_with_the_ca_given(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given serve over HTTPS with a certificate of a CA of the test's own
    web = site(20)
    ca = make_ca(tmp_path / "tls")
    served = issue(ca, tmp_path / "tls", "serve")
    with ServeProcess(redis_server.url, tmp_path, "--ssl-certfile", str(served.cert),
                      "--ssl-keyfile", str(served.key),
                      verify=ssl.create_default_context(cafile=str(ca.cert))) as serve:
        # when a node is given serve's https:// URL and the CA
        settings = {**http_settings(serve), "CLUSTERSYNC_TLS_CA_CERTS": str(ca.cert)}
        node = start_node("httpsnode", "", web.start_url, tmp_path, settings)
        wait_all([node], timeout_s=60)
        # and a node without the CA is refused by its own check of serve's certificate
        stranger = start_node("stranger", "", web.start_url, tmp_path, http_settings(serve))
        wait_all([stranger], timeout_s=60)
    # then the first crawls the site, the second fetches nothing and says why
    assert serve.base_url.startswith("https://")
    assert node.process.returncode == 0 and not missing_pages(web), node.log()[-3000:]
    assert not web.agent_hits("stranger").times
    assert "certificate verify failed" in stranger.log()
