"""The `clustersync` command against a real redis-server (argument checks: tests/unit)."""

from __future__ import annotations

import json
import subprocess
import sys

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer


def clustersync(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env_url = [] if url is None else ["--redis-url", url]
    return subprocess.run([sys.executable, "-m", "scrapy_clustersync.cli", *env_url, *args],
                          capture_output=True, text=True, timeout=60)


def test_seed_then_status_shows_the_queue(redis_server: RedisServer) -> None:
    seeded = clustersync("seed", "shop", "http://a/1", "http://a/2", "http://a/1",
                         url=redis_server.url)
    assert seeded.returncode == 0, seeded.stderr
    assert "seeded 2 request(s)" in seeded.stdout and "1 already seen" in seeded.stdout
    status = json.loads(clustersync("status", "shop", "--json", url=redis_server.url).stdout)
    assert (status["queued"], status["seen"], status["state"]) == (2, 2, "waiting for nodes")
    assert status["dedup"]["mode"] == "bloom" and status["dedup"]["layers"] == 1
    text = clustersync("status", "shop", url=redis_server.url).stdout
    assert "bloom filter  2 entries (estimated), 1 layer(s)" in text
    assert "expected error rate now" in text


def test_purge_needs_yes_and_then_deletes_only_that_job(redis_server: RedisServer) -> None:
    clustersync("seed", "shop", "http://a/1", url=redis_server.url)
    clustersync("seed", "other", "http://a/1", url=redis_server.url)
    refused = clustersync("purge", "shop", url=redis_server.url)
    assert refused.returncode != 0 and "--yes" in refused.stderr
    assert clustersync("purge", "shop", "--yes", url=redis_server.url).returncode == 0
    client = make_client(redis_server.url)
    assert JobStore(client, "shop", "t").status().exists is False
    assert JobStore(client, "other", "t").status().queued == 1


def test_status_of_a_job_that_does_not_exist_is_a_clear_error(redis_server: RedisServer) -> None:
    missing = clustersync("status", "nope", url=redis_server.url)
    assert missing.returncode != 0 and "job 'nope' does not exist" in missing.stderr


def test_unreachable_redis_is_reported_not_a_traceback() -> None:
    result = clustersync("status", "shop", url="redis://127.0.0.1:1/0")
    assert result.returncode != 0
    assert "could not be reached" in result.stderr and "Traceback" not in result.stderr
