"""The test utilities do what the rest of the suite relies on: site, Redis servers, proxy."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from testkit.proxy import TcpProxy
from testkit.redis_server import EmbeddedRedis, RedisServer
from testkit.site import TestSite
from testkit.site_process import SiteProcess
from testkit.web import HEAVY, BroadWeb, Web

HREF_RE = re.compile(r'href="([^"]+)"')
REPO_ROOT = Path(__file__).resolve().parents[1]

RedisFactory = Callable[..., RedisServer]
SiteFactory = Callable[..., TestSite]
ProxyFactory = Callable[..., TcpProxy]


def fetch(url: str, agent: str | None = None) -> tuple[int, bytes]:
    headers = {"User-Agent": agent} if agent is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def hrefs(body: bytes) -> list[str]:
    return HREF_RE.findall(body.decode())


def no_retry_client(url: str, socket_timeout_s: float = 2.0) -> redis.Redis:
    """A client that reports the first connection error instead of retrying it away."""
    return redis.Redis.from_url(
        url,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
    )


def ping_round_trips_s(client: redis.Redis, count: int) -> list[float]:
    client.ping()  # connect outside the measurement
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - started)
    return times


# -- TestSite ---------------------------------------------------------------------------------


def test_every_page_is_reachable_from_page_zero_by_following_links(make_site: SiteFactory) -> None:
    # Given a site of 150 pages
    site = make_site(150, links_per_page=4, seed=7)

    # When following every link breadth-first from the start URL
    seen = {urlsplit(site.start_url).path}
    queue = deque([site.start_url])
    while queue:
        url = queue.popleft()
        status, body = fetch(url)
        assert status == 200
        for href in hrefs(body):
            absolute = urljoin(url, href)
            if urlsplit(absolute).path not in seen:
                seen.add(urlsplit(absolute).path)
                queue.append(absolute)

    # Then every page was found and fetched exactly once
    assert seen == set(site.page_paths())
    assert site.hits() == dict.fromkeys(site.page_paths(), 1)


def test_pages_have_the_requested_relative_links_and_depend_only_on_the_seed() -> None:
    # Given two sites with the same seed and one with another seed
    first, same, other = TestSite(50, seed=3), TestSite(50, seed=3), TestSite(50, seed=4)

    # Then pages are identical for the same seed, differ for another, and links are relative
    assert [first.page_body(i) for i in range(50)] == [same.page_body(i) for i in range(50)]
    assert [first.page_body(i) for i in range(50)] != [other.page_body(i) for i in range(50)]
    links = hrefs(first.page_body(10))
    assert len(links) == 8
    assert links[0] == "/page/11.html"
    assert all(re.fullmatch(r"/page/\d+\.html", link) for link in links)
    assert b"<title>Page 10</title>" in first.page_body(10)


def test_hits_are_counted_per_page_and_per_user_agent(make_site: SiteFactory) -> None:
    # Given a site
    site = make_site(10)

    # When two crawlers fetch pages with their own User-Agents
    fetch(site.page_url(1), agent="node-a")
    fetch(site.page_url(1), agent="node-a")
    fetch(site.page_url(2), agent="node-a")
    fetch(site.page_url(1), agent="node-b")

    # Then hits are summed per page and split per agent, in process and over HTTP
    assert site.hits() == {"/page/1.html": 3, "/page/2.html": 1}
    expected = {"node-a": {"/page/1.html": 2, "/page/2.html": 1}, "node-b": {"/page/1.html": 1}}
    assert site.hits_by_agent() == expected
    status, body = fetch(site.url + "/__hits")
    assert status == 200
    assert json.loads(body) == expected
    assert site.hits_by_agent() == expected  # reading /__hits is not a hit


def test_the_site_logs_every_get_of_each_agent_in_order_with_its_query(
    make_site: SiteFactory,
) -> None:
    # Given a site
    site = make_site(10)
    # When an agent fetches a page with a query, a missing path and a redirect
    fetch(site.url + "/page/1.html?from=0", agent="a")
    fetch(site.url + "/missing.html", agent="a")
    fetch(site.url + "/redirect/2.html", agent="a")
    fetch(site.page_url(3), agent="b")
    # Then its GETs are listed in order, 404 and both ends of the redirect included
    assert site.requests_of("a") == ["/page/1.html?from=0", "/missing.html", "/redirect/2.html",
                                     "/page/2.html"]
    assert site.requests_of("b") == ["/page/3.html"]


def test_a_flaky_page_fails_once_per_agent_then_serves_its_page(make_site: SiteFactory) -> None:
    # Given a site
    site = make_site(10)
    # When two agents each fetch a flaky page twice
    statuses = {agent: [fetch(site.url + "/flaky/4.html", agent)[0] for _ in range(2)]
                for agent in ("a", "b")}
    # Then each got a 500 first, then page 4
    assert statuses == {"a": [500, 200], "b": [500, 200]}
    assert fetch(site.url + "/flaky/4.html", "a")[1] == site.page_body(4)


def test_the_tree_has_its_fanout_and_depth_and_nothing_below(make_site: SiteFactory) -> None:
    # Given a site
    site = make_site(1)
    # When the root, a leaf and a page below a leaf are fetched
    root, leaf, below = (fetch(f"{site.url}/tree/{node}.html") for node in ("0", "0.2.2.2",
                                                                            "0.2.2.2.0"))
    # Then the root links to its 3 children, the leaf to none, and below the leaves is a 404
    assert hrefs(root[1]) == ["/tree/0.0.html", "/tree/0.1.html", "/tree/0.2.html"]
    assert (leaf[0], hrefs(leaf[1])) == (200, [])
    assert below[0] == 404


def test_agent_hits_are_one_agents_fetches_with_the_time_of_each(make_site: SiteFactory) -> None:
    # Given a site fetched by two User-Agents
    site = make_site(10)
    before = time.monotonic()
    fetch(site.page_url(1), agent="node-a")
    fetch(site.page_url(2), agent="node-b")
    fetch(site.page_url(1), agent="node-a")
    after = time.monotonic()

    # When asking what one of them fetched
    seen = site.agent_hits("node-a")

    # Then it is that agent's fetches only, each timed, in order, by the site's clock
    assert seen.hits == {"/page/1.html": 2}
    assert len(seen.times) == 2
    assert before <= seen.times[0] <= seen.times[1] <= after
    assert seen.span_s == seen.longest_pause_s == seen.times[1] - seen.times[0]
    assert site.agent_hits("nobody").times == []


def test_unknown_paths_are_404_and_counted_apart_from_page_hits(make_site: SiteFactory) -> None:
    # Given a site of 10 pages
    site = make_site(10)

    # When asking for paths that are not pages
    statuses = [fetch(site.url + path)[0] for path in ("/page/10.html", "/robots.txt", "/x")]

    # Then each is a 404, counted in not_found and never as a page hit
    assert statuses == [404, 404, 404]
    assert site.not_found() == {"/page/10.html": 1, "/robots.txt": 1, "/x": 1}
    assert site.hits() == {}


def test_reset_hits_forgets_every_count(make_site: SiteFactory) -> None:
    site = make_site(5)
    fetch(site.start_url)
    fetch(site.url + "/missing")

    site.reset_hits()

    assert site.hits() == {}
    assert site.hits_by_agent() == {}
    assert site.not_found() == {}


def test_one_keep_alive_connection_serves_many_requests(make_site: SiteFactory) -> None:
    # Given one HTTP/1.1 connection
    site = make_site(20)
    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=5)

    # When fetching every page over it
    for path in site.page_paths():
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        # Then each answer is HTTP/1.1, sized, and leaves the connection open
        assert response.status == 200
        assert response.version == 11
        assert int(response.headers["Content-Length"]) == len(body)
        assert not response.will_close
    connection.close()
    assert sum(site.hits().values()) == 20


def test_delay_slows_every_page_answer_down(make_site: SiteFactory) -> None:
    site = make_site(3, delay_s=0.1)

    started = time.perf_counter()
    fetch(site.start_url)

    assert time.perf_counter() - started >= 0.1


def test_cli_prints_ready_serves_pages_and_exits_on_sigterm() -> None:
    # Given the site started as its own process
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "testkit.site", "--pages", "5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        # When it says it is ready
        assert line.startswith("READY http://127.0.0.1:")
        base_url = line.split()[1]
        # Then it serves pages and reports hits over HTTP
        assert fetch(base_url + "/page/4.html", agent="cli")[0] == 200
        assert json.loads(fetch(base_url + "/__hits")[1]) == {"cli": {"/page/4.html": 1}}
        # And it exits cleanly on SIGTERM
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()


def test_site_process_serves_the_same_site_from_a_child_and_ends_when_stopped() -> None:
    # Given the site of 20 pages with seed 3, served from a child process
    with SiteProcess(20, seed=3) as site:
        # When an agent fetches two pages
        status, body = fetch(site.page_url(5), agent="bench/run")
        fetch(site.start_url, agent="bench/run")

        # Then the pages are those a TestSite of the same arguments renders
        assert status == 200
        assert body == TestSite(20, seed=3).page_body(5)
        # And the child reports the hits, that agent's with their times
        assert site.hits() == {"/page/5.html": 1, "/page/0.html": 1}
        seen = site.agent_hits("bench/run")
        assert seen.hits == {"/page/5.html": 1, "/page/0.html": 1}
        assert len(seen.times) == 2
        stopping = time.monotonic()

    # And stopping it closes its stdin, which ends it at once (not the SIGKILL after 10 s)
    assert time.monotonic() - stopping < 5
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", site.port), timeout=1).close()


def test_a_web_serves_each_site_on_its_address_and_its_links_lead_to_the_other_sites() -> None:
    # Given a small broad-crawl web, started
    with Web(BroadWeb(light_sites=2, light_pages=5)) as web:
        # When an agent fetches the start page, then every page it links to
        status, body = fetch(web.start_url, agent="broad")
        for link in hrefs(body):
            assert fetch(link, agent="broad")[0] == 200

        # Then each site counted the fetches of its own pages: 12 of the 15 links were heavy
        fetches = {index: sum(site.agent_hits("broad").hits.values())
                   for index, site in web.sites.items()}
    assert status == 200
    assert fetches[HEAVY] == 12 and sum(fetches.values()) == 1 + 15


# -- RedisServer / EmbeddedRedis --------------------------------------------------------------


def test_restart_with_persistence_keeps_a_written_key(redis_factory: RedisFactory) -> None:
    # Given a persistent server holding a key
    server = redis_factory(persistence=True)
    server.client().set("job:seen", "yes")

    # When it restarts
    port = server.port
    server.restart(down_s=0.05)

    # Then the key is still there, on the same port
    assert server.port == port
    assert server.client().get("job:seen") == b"yes"


def test_restart_without_persistence_loses_every_key(redis_server: RedisServer) -> None:
    redis_server.client().set("job:seen", "yes")

    redis_server.restart()

    assert redis_server.client().get("job:seen") is None


def test_password_protected_server_needs_the_password_its_url_carries(
    redis_factory: RedisFactory,
) -> None:
    server = redis_factory(password="s3cret/:@")

    assert server.url.startswith("redis://:s3cret%2F%3A%40@127.0.0.1:")
    assert server.client().ping() is True
    with pytest.raises(redis.AuthenticationError):
        no_retry_client(f"redis://127.0.0.1:{server.port}/0").ping()


def test_killed_server_refuses_connections(redis_server: RedisServer) -> None:
    client = no_retry_client(redis_server.url)
    assert client.ping() is True

    redis_server.kill()

    assert not redis_server.is_running()
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_embedded_redis_serves_commands_over_tcp(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        client = server.client()
        client.set("k", "v")
        assert redis.Redis.from_url(server.url).get("k") == b"v"


# -- TcpProxy ---------------------------------------------------------------------------------


def test_proxy_forwards_commands_to_its_target(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(redis_server)

    client = no_retry_client(proxy.url())
    client.set("through", "proxy")

    assert client.ping() is True
    assert redis_server.client().get("through") == b"proxy"


@pytest.mark.timing
def test_proxy_sustains_thousands_of_round_trips_per_second(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(redis_server)

    round_trips = ping_round_trips_s(no_retry_client(proxy.url()), 500)

    assert 500 / sum(round_trips) > 1000


@pytest.mark.timing
def test_proxy_delay_adds_one_delay_each_way_to_every_round_trip(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    # Given a proxy adding 5 ms each way
    delay_s = 0.005
    proxy = proxy_factory(redis_server, delay_s=delay_s)

    # When timing 20 PINGs directly and 20 through the proxy
    direct = statistics.median(ping_round_trips_s(no_retry_client(redis_server.url), 20))
    proxied = statistics.median(ping_round_trips_s(no_retry_client(proxy.url()), 20))

    # Then each proxied round trip takes about 10 ms longer (never less, not much more)
    assert proxied - direct >= 2 * delay_s * 0.95
    assert proxied < direct + 2 * delay_s + 0.010


@pytest.mark.timing
def test_proxy_delay_does_not_serialize_independent_connections(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    # Given 8 connections through a proxy adding 10 ms per round trip
    proxy = proxy_factory(redis_server, delay_s=0.005)
    clients = [no_retry_client(proxy.url()) for _ in range(8)]
    for client in clients:
        client.ping()
    start = threading.Barrier(len(clients) + 1)

    def five_pings(client: redis.Redis) -> None:
        start.wait()
        for _ in range(5):
            client.ping()

    # When each does 5 PINGs at the same time (400 ms if the proxy served one at a time)
    threads = [threading.Thread(target=five_pings, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()

    # Then they overlap: the whole takes well under the serial time
    assert time.perf_counter() - started < 0.2


def test_proxy_keeps_byte_order_when_the_delay_shrinks_mid_stream(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    # Given a raw connection through a proxy with a long delay
    proxy = proxy_factory(redis_server, delay_s=0.1)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        # When a first command goes out slow, then the delay drops to zero for a second one
        sock.sendall(b"PING\r\n")
        time.sleep(0.02)
        proxy.delay_s = 0.0
        sock.sendall(b"*2\r\n$4\r\nECHO\r\n$5\r\nlater\r\n")
        expected = b"+PONG\r\n$5\r\nlater\r\n"
        received = b""
        while len(received) < len(expected):
            chunk = sock.recv(1024)
            assert chunk, "proxy closed the connection"
            received += chunk

    # Then Redis still saw them in the order they were sent
    assert received == expected


def test_cut_fails_commands_and_restore_lets_a_new_connection_work(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    # Given a connected client through the proxy
    proxy = proxy_factory(redis_server)
    client = no_retry_client(proxy.url())
    assert client.ping() is True

    # When the proxy cuts the network, commands on the open and on new connections fail
    proxy.cut()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    with pytest.raises(redis.ConnectionError):
        no_retry_client(proxy.url()).ping()

    # Then after restore a new connection works, and so does the old client (it reconnects)
    proxy.restore()
    assert no_retry_client(proxy.url()).ping() is True
    assert client.ping() is True


def test_retarget_sends_new_connections_elsewhere_and_leaves_open_ones_alone(
    redis_factory: RedisFactory, proxy_factory: ProxyFactory
) -> None:
    # Given two servers and a client connected to the first through the proxy
    first, second = redis_factory(), redis_factory()
    first.client().set("server", "first")
    second.client().set("server", "second")
    proxy = proxy_factory(first)
    old = no_retry_client(proxy.url())
    assert old.get("server") == b"first"

    # When the proxy is retargeted, like a DNS name or virtual IP moving to another server
    proxy.retarget("127.0.0.1", second.port)

    # Then new connections reach the second server and the open one still the first
    assert no_retry_client(proxy.url()).get("server") == b"second"
    assert old.get("server") == b"first"


def test_blackhole_cut_makes_commands_time_out_until_restored(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(redis_server)
    client = no_retry_client(proxy.url(), socket_timeout_s=0.2)
    assert client.ping() is True

    proxy.cut(blackhole=True)
    with pytest.raises(redis.TimeoutError):
        client.ping()

    proxy.restore()
    assert client.ping() is True
