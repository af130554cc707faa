"""Nodes and the CLI talk to a Redis that speaks TLS only (``--port 0``), with a CA, a client
certificate and its key; a node given the wrong CA stops at once with one clear error line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_clustersync.config import TlsOptions
from scrapy_clustersync.store import make_client
from testkit.redis_ha import SentinelGroup, TlsRedisServer
from testkit.site import TestSite
from testkit.tls_certs import CertFiles, issue, make_ca

from conftest import SiteFactory, require_redis_server
from support import (
    clustersync,
    missing_pages,
    pages_fetched,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, CertFiles]:
    ca = make_ca(tmp_path / "certs")
    return {"server": issue(ca, tmp_path / "certs", "server"),
            "node": issue(ca, tmp_path / "certs", "node"),
            "other_ca": make_ca(tmp_path / "certs", "other-ca")}


@pytest.fixture
def tls_redis(tmp_path: Path, certs: dict[str, CertFiles]) -> Iterator[TlsRedisServer]:
    require_redis_server()
    with TlsRedisServer(tmp_path / "redis-tls", certs["server"]) as server:
        yield server


def tls_settings(files: CertFiles, ca: Path | None = None) -> dict[str, str]:
    return {"CLUSTERSYNC_TLS_CA_CERTS": str(ca or files.ca),
            "CLUSTERSYNC_TLS_CERTFILE": str(files.cert),
            "CLUSTERSYNC_TLS_KEYFILE": str(files.key)}


def test_two_nodes_crawl_through_tls_with_a_client_certificate(
    tls_redis: TlsRedisServer, certs: dict[str, CertFiles], site: SiteFactory, tmp_path: Path,
) -> None:
    # given a Redis with no plain-text port, and nodes holding the CA and a certificate of it
    web: TestSite = site(60)
    nodes = start_nodes(2, tls_redis.url, web.start_url, tmp_path, tls_settings(certs["node"]))
    # when they crawl
    wait_all(nodes)
    # then every page was fetched and both nodes finished
    assert missing_pages(web) == [] and pages_fetched(web) == 60
    assert [node.process.returncode for node in nodes] == [0, 0]
    # and the server saw only TLS clients (it has no other port), as the CLI is one too
    assert tls_redis.client().config_get("port") == {"port": "0"}
    files = certs["node"]
    query = f"?ssl_ca_certs={files.ca}&ssl_certfile={files.cert}&ssl_keyfile={files.key}"
    run = clustersync(tls_redis.url + query, "status", "site")
    assert run.returncode == 0, run.output
    given = [f"-s{name}={value}" for name, value in tls_settings(files).items()]
    run = clustersync(tls_redis.url, "status", "site", *given)
    assert run.returncode == 0, run.output


def test_a_node_given_the_wrong_ca_exits_1_with_one_error_line(
    tls_redis: TlsRedisServer, certs: dict[str, CertFiles], site: SiteFactory, tmp_path: Path,
) -> None:
    # given a node that trusts a CA which did not sign the server's certificate
    web = site(5)
    settings = tls_settings(certs["node"], ca=certs["other_ca"].cert)
    node = start_node("wrong-ca", tls_redis.url, web.start_url, tmp_path, settings)
    # when it starts, then it stops at once with exit code 1, fetching nothing
    assert node.wait(60) == 1
    assert pages_fetched(web) == 0
    # and says why in one ERROR line, naming the certificate check
    errors = [line for line in node.log().splitlines() if " ERROR: " in line]
    assert len(errors) == 1, errors
    assert "certificate" in errors[0] and "CLUSTERSYNC_TLS_CA_CERTS" in errors[0], errors[0]


def test_a_client_without_a_certificate_is_refused_by_the_server(
    tls_redis: TlsRedisServer, certs: dict[str, CertFiles],
) -> None:
    client = make_client(tls_redis.url, TlsOptions(ca_certs=str(certs["node"].ca)))
    with pytest.raises(Exception, match="(?i)certificate|closed|reset|ssl"):
        client.ping()


def test_nodes_go_on_through_a_failover_with_sentinels_and_servers_speaking_tls_only(
    certs: dict[str, CertFiles], site: SiteFactory, tmp_path: Path,
) -> None:
    # given a primary, a replica and sentinels with no plain-text port, and two nodes on
    # rediss+sentinel:// holding the CA and a certificate of it
    require_redis_server()
    with SentinelGroup(tmp_path / "ha", certs=certs["server"]) as group:
        web = site(200, delay_s=0.02)
        nodes = start_nodes(2, group.url, web.start_url, tmp_path,
                            {"CONCURRENT_REQUESTS": "4", **tls_settings(certs["node"])})
        wait_until(lambda: pages_fetched(web) >= 40, 60, "40 pages fetched")
        # when the primary is killed and the replica promoted
        first = group.primary
        first.kill()
        group.wait_for_failover(first.port)
        wait_all(nodes, timeout_s=90)
    # then every page was fetched and both nodes finished
    assert missing_pages(web) == []
    assert [node.process.returncode for node in nodes] == [0, 0]
