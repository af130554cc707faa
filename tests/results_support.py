"""Results in a real redis-server for the readers' tests, written as the nodes write them
(encode_record + XADD), so that these tests do not depend on the writer's pipeline.

    job = make_job(client, "shop")
    ids = add_results(client, "shop", 100)    # result ids r0000.. in stream order
    finish_job(client, "shop")                # the job ended: readers without --follow stop
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from scrapy_clustersync.results.record_format import Result, encode_record
from scrapy_clustersync.store.keys import JobKeys

ROOT = Path(__file__).resolve().parents[1]
#: server ms of 2026-01-01, the results' crawl time
AT_MS = 1_767_225_600_000


def make_job(client: redis.Redis, job: str) -> JobKeys:
    """A job that exists (its meta hash holds an epoch), not finished."""
    keys = JobKeys(job)
    client.hset(keys.meta, mapping={"epoch": "e1", "created_ms": AT_MS})
    return keys


def finish_job(client: redis.Redis, job: str) -> None:
    """The job finished, as its heartbeat records it: nothing queued or leased."""
    client.hset(JobKeys(job).meta, mapping={
        "finished_ms": AT_MS, "finished_pages": 1, "finished_nodes": 1,
        "finished_idle_ms": 1000})


def default_item(n: int) -> dict[str, Any]:
    return {"title": f"title {n}", "price": n * 1.5, "n": n}


def add_results(client: redis.Redis, job: str, count: int, first: int = 0,
                kind: str = "item",
                item: Callable[[int], dict[str, Any]] = default_item) -> list[str]:
    """XADD ``count`` results (ids ``r<n>``, n from ``first``); answers their result ids."""
    keys, ids = JobKeys(job), []
    pipe = client.pipeline(transaction=False)
    for n in range(first, first + count):
        rid = f"r{n:05d}"
        data = item(n) if kind == "item" else {"status": 500, "error": "boom", "attempts": 3,
                                                "errback": False}
        fields = encode_record(Result(stream_id="", id=rid, kind=kind,
                                      url=f"http://site.test/{n}", spider="shop",
                                      node="n1", at_ms=AT_MS + n, data=data))
        pipe.xadd(keys.results, fields)  # type: ignore[arg-type]
        ids.append(rid)
    pipe.execute()
    return ids


def cli_process(redis_url: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``python -m scrapy_clustersync.cli --redis-url URL ARGS`` as a real process (one the
    test can SIGKILL), stdout and stderr piped unless told."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERSYNC_")}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(
        [sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", redis_url, *args],
        cwd=popen.pop("cwd", ROOT), env=env, **popen)


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    """Poll ``check`` until it holds; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)
