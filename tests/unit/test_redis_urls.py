"""The forms of CLUSTERSYNC_REDIS_URL (Sentinel and Cluster included) and the TLS files they may
name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis.sentinel import SentinelConnectionPool
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig, ConfigError, TlsOptions
from scrapy_clustersync.redis_urls import parse_cluster_url, parse_sentinel_url
from scrapy_clustersync.store import JobStore, StoreUnavailable
from scrapy_clustersync.store.client import client_of_its_own, make_client
from scrapy_clustersync.store.cluster_client import LazyRedisCluster
from testkit.redis_server import free_port


def config_of(**settings: str) -> ClusterConfig:
    return ClusterConfig.from_settings(Settings(settings), "spider")


def test_a_sentinel_url_names_its_sentinels_service_db_and_the_servers_credentials() -> None:
    url = parse_sentinel_url(
        "redis+sentinel://crawler:p%40ss@10.0.0.1:26380,h2,[::1]:5000/jobs/3"
        "?sentinel_password=sp")
    assert url.sentinels == (("10.0.0.1", 26380), ("h2", 26379), ("::1", 5000))
    assert (url.service, url.db, url.username, url.password) == ("jobs", 3, "crawler", "p@ss")
    assert url.sentinel_auth == {"sentinel_password": "sp"} and not url.tls


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://h:1", "must name the sentinels and the service"),
    ("redis+sentinel://h:1/svc/x", "must be a number"),
    ("redis+sentinel://h:x/svc", "is not a sentinel's host:port"),
    ("redis+sentinel://h:1/svc?socket_timeout=1", "unknown query parameter"),
    ("redis+cluster:///", "must name at least one node of the cluster"),
    ("redis+cluster://h:1/3", "database 0 only"),
    ("redis+cluster://h:1,h:x/", "is not a cluster node's host:port"),
    ("redis+cluster://h:1/?socket_timeout=1", "unknown query parameter"),
    ("rediscluster://h:1/", "accepted: redis://"),
])
def test_a_malformed_url_is_refused_at_start_up_saying_why(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        config_of(CLUSTERSYNC_REDIS_URL=url)


def test_an_error_about_a_sentinel_url_masks_its_password() -> None:
    with pytest.raises(ConfigError) as refused:
        config_of(CLUSTERSYNC_REDIS_URL="redis+sentinel://u:s3cret@h:1/svc/x")
    assert "s3cret" not in str(refused.value) and "u:***@" in str(refused.value)


def test_a_missing_tls_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"CLUSTERSYNC_TLS_CA_CERTS = .*no such file"):
        config_of(CLUSTERSYNC_REDIS_URL="rediss://h:1/0",
                  CLUSTERSYNC_TLS_CA_CERTS=str(tmp_path / "nope.pem"))
    with pytest.raises(ConfigError, match=r"ssl_ca_certs = .*no such file"):
        config_of(CLUSTERSYNC_REDIS_URL=f"rediss://h:1/0?ssl_ca_certs={tmp_path}/nope.pem")


def test_tls_files_with_a_plain_text_url_are_refused(tmp_path: Path) -> None:
    # a node told to verify a CA must never fall back to talking in the clear
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError, match="is not a TLS URL: use rediss://"):
        config_of(CLUSTERSYNC_REDIS_URL="redis://h:1/0", CLUSTERSYNC_TLS_CA_CERTS=str(ca))
    assert config_of(CLUSTERSYNC_REDIS_URL="rediss://h:1/0",
                     CLUSTERSYNC_TLS_CA_CERTS=str(ca)).tls.ca_certs == str(ca)


def test_a_sentinel_client_asks_the_sentinels_for_the_primary_of_its_service() -> None:
    client = make_client("rediss+sentinel://u:pw@127.0.0.1:1,127.0.0.1:2/svc/2",
                         TlsOptions(verify=False))
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "svc"
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (2, "u", "pw")
    assert "SSL" in pool.connection_class.__name__
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
    assert all(s.connection_pool.connection_kwargs.get("ssl_cert_reqs") is not None
               for s in sentinels)


def test_a_client_of_its_own_of_a_sentinel_client_follows_the_same_service() -> None:
    client = make_client("redis+sentinel://127.0.0.1:1/svc")
    own = client_of_its_own(client).connection_pool
    assert isinstance(own, SentinelConnectionPool) and own is not client.connection_pool
    assert own.service_name == "svc" and own.connection_kwargs["connection_pool"] is own.proxy


def test_a_node_behind_sentinels_reports_the_address_it_reaches_them_from() -> None:
    from scrapy_clustersync.node.node_record import local_ip

    assert local_ip("redis+sentinel://127.0.0.1:26379,10.0.0.2:26379/svc") == "127.0.0.1"


def test_status_shows_the_primary_and_its_failovers() -> None:
    from scrapy_clustersync.cli.status_view import _primary_line, primary_of
    from scrapy_clustersync.store import JobStatus

    blank: dict[str, Any] = {"queued": 0, "leased": 0, "seen": 0, "dead_letters": 0, "counters": {},
             "start_claimed_by": None, "start_done": False, "server_ms": 0}
    report = JobStatus(job="j", exists=True, **blank, meta={
        "primary": "10.0.0.6:6379", "primary_before": "10.0.0.5:6379", "primary_changes": "2",
        "primary_changed_ms": "1748772843000"})
    primary = primary_of(report)
    assert primary == {"address": "10.0.0.6:6379", "failovers": 2, "before": "10.0.0.5:6379",
                       "changed_at": "2025-06-01T10:14:03+00:00"}
    assert str(_primary_line(primary)[0]) == (
        "  primary      10.0.0.6:6379 (through Sentinel); failed over 2 time(s), last at "
        "2025-06-01T10:14:03+00:00 from 10.0.0.5:6379")
    assert primary_of(JobStatus(job="j", exists=True, **blank)) is None


def test_a_cluster_url_names_some_of_its_nodes_and_their_credentials() -> None:
    url = parse_cluster_url("rediss+cluster://crawler:p%40ss@10.0.0.1:7000,h2,[::1]:7002/")
    assert url.nodes == (("10.0.0.1", 7000), ("h2", 6379), ("::1", 7002))
    assert (url.username, url.password, url.tls) == ("crawler", "p@ss", True)
    assert parse_cluster_url("redis+cluster://h:7000").nodes == (("h", 7000),)


def test_a_cluster_client_is_built_without_a_round_trip_and_holds_the_urls_options() -> None:
    # nothing listens there: building the client (on Scrapy's reactor thread) must not connect
    client = make_client("rediss+cluster://u:pw@127.0.0.1:1,127.0.0.1:2/", TlsOptions(verify=False))
    assert isinstance(client, LazyRedisCluster) and not client.built
    options = client.lazy_options
    assert (options["username"], options["password"], options["ssl"]) == ("u", "pw", True)
    own = client_of_its_own(client)
    assert isinstance(own, LazyRedisCluster) and own is not client and not own.built


def test_a_cluster_nobody_answers_for_is_an_outage_and_its_password_is_masked() -> None:
    # given a cluster URL whose node is not there (a cluster still starting, or away)
    url = f"redis+cluster://u:s3cret@127.0.0.1:{free_port()}/"
    store = JobStore(make_client(url, socket_timeout_s=0.5), "job", "n1")
    # when the node first uses it, then it is an outage the node waits out (not a crash)
    with pytest.raises(StoreUnavailable) as away:
        store.ping()
    assert "s3cret" not in str(away.value)
    with pytest.raises(StoreUnavailable):
        store.connect()  # and again on the next call: the client tries anew
