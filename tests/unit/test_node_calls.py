"""What serve runs for a node over HTTP (store/node_calls.py), and how the node's client turns
serve's answers into the store's errors (store/http_client.py)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import httpx
import msgpack
import pytest
import redis

from scrapy_clustersync.store.errors import (
    AccessRefused,
    StateLost,
    StoreUnavailable,
    translate_errors,
)
from scrapy_clustersync.store.http_client import HttpRedis, error_of, script_sha
from scrapy_clustersync.store.join_scripts import RestartScript
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.lease_script import LeaseScript
from scrapy_clustersync.store.node_calls import NODE_SCRIPTS, Refused, check_call
from scrapy_clustersync.store.script_base import JobScript, load_lua

KEYS = JobKeys("job")
LEASE = load_lua(LeaseScript.FILE, *LeaseScript.HELPERS)


def test_a_nodes_script_on_the_jobs_keys_is_run_by_text_or_by_sha() -> None:
    assert check_call(["EVAL", LEASE, 2, KEYS.meta, KEYS.queue, "x"], "job", "n1")[0] == "EVAL"
    assert check_call(["evalsha", script_sha(LEASE), 1, KEYS.meta], "job", "n1")[0] == "EVALSHA"
    assert check_call(["SCRIPT", "LOAD", LEASE], "job", "n1")[0] == "SCRIPT"
    assert check_call(["HGET", KEYS.meta, "control"], "job", "n1") == ["HGET", KEYS.meta,
                                                                       "control"]


@pytest.mark.parametrize("call", [
    ["EVAL", "return redis.call('FLUSHALL')", 0],  # a script of no node
    ["EVALSHA", script_sha(load_lua(RestartScript.FILE, *RestartScript.HELPERS)), 1, KEYS.meta],
    ["EVALSHA", script_sha(LEASE), 2, KEYS.meta, JobKeys("other").meta],  # another job's key
    ["EVALSHA", script_sha(LEASE), 3, KEYS.meta],  # fewer keys than it says
    ["HGETALL", JobKeys("other").settings],
    ["HSET", KEYS.meta, "control", "stopped"],  # a write of the job's state
    ["PEXPIRE", KEYS.last_call("n2"), 1],  # another node's call record
    ["SCRIPT", "FLUSH"],
    ["FLUSHALL"],
    [],
], ids=lambda call: " ".join(str(part)[:12] for part in call[:2]) or "empty")
def test_a_command_no_node_of_this_job_sends_is_refused(call: list[object]) -> None:
    with pytest.raises(Refused):
        check_call(call, "job", "n1")


def test_serves_error_replies_are_raised_as_the_stores_errors_a_redis_reply_makes() -> None:
    assert isinstance(error_of("NoScriptError", "No matching script"),
                      redis.exceptions.NoScriptError)
    assert type(error_of("SystemExit", "x")) is redis.ResponseError  # no redis-py class
    with pytest.raises(StateLost), translate_errors(redis.Redis()):
        raise error_of("ResponseError", "CLUSTERSYNC_STATE_LOST epoch changed")


def client_answering(answer: Callable[[httpx.Request], httpx.Response]) -> HttpRedis:
    return HttpRedis("http://serve", "csk_secret", "job", "n1",
                     transport=httpx.MockTransport(answer))


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(("answer", "error"), [
    (refused, StoreUnavailable),
    (lambda request: httpx.Response(503, json={"error": "Redis away"}), StoreUnavailable),
    (lambda request: httpx.Response(401, json={"error": "no token"}), AccessRefused),
    (lambda request: httpx.Response(403, json={"error": "role read"}), AccessRefused),
], ids=["refused", "503", "401", "403"])
def test_serve_out_of_reach_is_an_outage_and_a_token_refused_is_refused_access(
    answer: Callable[[httpx.Request], httpx.Response], error: type[Exception]
) -> None:
    client = client_answering(answer)
    with pytest.raises(error), translate_errors(client):  # type: ignore[arg-type]
        client.ping()


def test_a_round_trips_replies_come_back_in_order_each_error_in_its_place() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        calls = msgpack.unpackb(request.content)["calls"]
        assert [call[0] for call in calls] == ["HGET", "EVALSHA"]
        replies = [[0, b"paused"], [1, "NoScriptError", "No matching script"]]
        return httpx.Response(200, content=msgpack.packb({"replies": replies}))

    pipe = client_answering(answer).pipeline()
    pipe.hget(KEYS.meta, "control")
    pipe.evalsha(script_sha(LEASE), 1, KEYS.meta)
    value, error = pipe.execute(raise_on_error=False)
    assert value == b"paused" and isinstance(error, redis.exceptions.NoScriptError)


def test_a_value_redis_py_would_not_send_fails_the_round_trip_before_it_is_sent() -> None:
    pipe = client_answering(refused).pipeline()
    pipe.evalsha(script_sha(LEASE), 1, KEYS.meta, None)
    with pytest.raises(redis.DataError):
        pipe.execute()


def all_script_classes() -> set[type[JobScript]]:
    import scrapy_clustersync.store as store_package

    for module in pkgutil.iter_modules(store_package.__path__):
        importlib.import_module(f"scrapy_clustersync.store.{module.name}")
    found: set[type[JobScript]] = set()
    todo = list(JobScript.__subclasses__())
    while todo:
        kind = todo.pop()
        found.add(kind)
        todo.extend(kind.__subclasses__())
    return found


def test_every_script_of_the_package_is_either_a_nodes_or_refused_on_purpose() -> None:
    # a new script a node runs must be added to NODE_SCRIPTS, or nodes over HTTP are refused it
    # (PrimaryScript: Sentinel only, none over HTTP)
    not_a_nodes = {"RestartScript", "SettingsScript", "CheckScript", "RequeueScript",
                   "ResultsAckScript", "PrimaryScript", "RegionsScript"}
    names = {kind.__name__ for kind in all_script_classes()}
    assert names - not_a_nodes == {kind.__name__ for kind in NODE_SCRIPTS}
