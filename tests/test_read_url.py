"""`--read-url` (CLUSTERSYNC_READ_URL): the commands that only read take their figures from a
replica near the operator, and every write still goes to the job's Redis.

A real primary and a real replica (`replicaof`); the replica is then cut loose, so that the two
hold different figures and each answer shows which one it came from.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from api_serve import ServeProcess

from testkit.redis_server import RedisServer

from cli_runner import run_cli
from conftest import RedisFactory

JOB = "near"


def queued(url: str, *extra: str) -> int:
    answer = run_cli(url, *extra, "status", JOB, "--json")
    assert answer.returncode == 0, answer.output
    return int(json.loads(answer.stdout)["queued"])


def seed(url: str, tmp_path: Path, name: str, count: int) -> None:
    urls = tmp_path / name
    urls.write_text("".join(f"https://site.example/{name}/{n}\n" for n in range(count)))
    answer = run_cli(url, "seed", JOB, "--create", "-f", str(urls))
    assert answer.returncode == 0, answer.output


def apart(redis_factory: RedisFactory, tmp_path: Path) -> tuple[RedisServer, RedisServer]:
    """A primary and a replica that held the job's 10 requests, then was cut loose while the
    primary got 5 more: the replica holds 10, the primary 15."""
    primary = redis_factory()
    replica: RedisServer = redis_factory(extra_args=("--replicaof", "127.0.0.1",
                                                     str(primary.port)))
    seed(primary.url, tmp_path, "first", 10)
    deadline = time.monotonic() + 10
    while replica.client().info("replication").get("master_link_status") != "up" or \
            primary.client().wait(1, 1000) < 1:
        assert time.monotonic() < deadline, "the replica did not catch up"
    assert queued(primary.url, "--read-url", replica.url) == 10
    replica.client().replicaof("NO", "ONE")
    seed(primary.url, tmp_path, "second", 5)
    return primary, replica


def test_reads_come_from_the_replica_and_writes_go_to_the_primary(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    # given a replica that holds 10 of the job's requests and a primary that holds 15
    primary, replica = apart(redis_factory, tmp_path)
    # then status with --read-url reads the replica (10), without it the primary (15)
    assert queued(primary.url, "--read-url", replica.url) == 10
    assert queued(primary.url) == 15
    # and the project setting and the environment variable name it as the option does
    assert queued(primary.url, "-s", f"CLUSTERSYNC_READ_URL={replica.url}") == 10
    answer = run_cli(primary.url, "jobs", "--json", env={"CLUSTERSYNC_READ_URL": replica.url})
    assert answer.returncode == 0, answer.output
    [row] = json.loads(answer.stdout)
    assert row["queued"] == 10
    # and a write (pause) with a read URL given goes to the primary, the replica is untouched
    answer = run_cli(primary.url, "--read-url", replica.url, "pause", JOB)
    assert answer.returncode == 0, answer.output
    meta = f"clustersync:{{{JOB}}}:meta"
    assert primary.client().hget(meta, "control") == b"paused"
    assert replica.client().hget(meta, "control") in (None, b"running")


def test_a_read_url_that_is_no_redis_url_is_refused_with_what_to_give(
    redis_server: RedisServer,
) -> None:
    answer = run_cli(redis_server.url, "--read-url", "http://replica:6379", "status", JOB)
    assert answer.returncode == 2, answer.output
    assert "--read-url" in answer.stderr and "redis://" in answer.stderr, answer.stderr


def test_serve_given_a_read_url_answers_reads_from_the_replica_and_writes_to_the_primary(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    # given a replica that holds 10 of the job's requests and a primary that holds 15
    primary, replica = apart(redis_factory, tmp_path)
    with ServeProcess(primary.url, tmp_path, "-s",
                      f"CLUSTERSYNC_READ_URL={replica.url}").wait_ready() as serve:
        # then the job's status and the list of jobs come from the replica
        status = serve.http.get(f"/api/jobs/{JOB}")
        assert status.status_code == 200, status.text
        assert status.json()["queued"] == 10
        [row] = serve.http.get("/api/jobs").json()
        assert row["queued"] == 10
        # and a pause goes to the primary, not to the replica
        paused = serve.http.post(f"/api/jobs/{JOB}/pause")
        assert paused.status_code == 200, paused.text
        meta = f"clustersync:{{{JOB}}}:meta"
        assert primary.client().hget(meta, "control") == b"paused"
        assert replica.client().hget(meta, "control") in (None, b"running")
        assert "reads from the replica at" in serve.log()
