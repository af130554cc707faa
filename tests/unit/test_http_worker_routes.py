"""The HTTP workers' routes in this process (FastAPI's TestClient over a fakeredis with Lua): who
may call them, a JSON worker's steps, and what ``calls`` refuses."""

from __future__ import annotations

import warnings

import fakeredis
import msgpack

from scrapy_clustersync.api.api_context import ApiContext
from scrapy_clustersync.api.web_app import create_app
from scrapy_clustersync.cli.project import ProjectContext
from scrapy_clustersync.store.api_tokens import TokenStore

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from fastapi.testclient import TestClient

NODE = "/api/v1/jobs/shop/nodes/w1"


def client_of(redis: fakeredis.FakeRedis) -> TestClient:
    project = ProjectContext(redis_url_flag="redis://127.0.0.1:1/0")  # (not connected to)
    return TestClient(create_app(ApiContext(redis, project, True)),
                      base_url="http://127.0.0.1")


def test_a_read_token_may_not_work_on_a_job_and_an_operator_token_may() -> None:
    redis = fakeredis.FakeRedis()
    tokens = TokenStore(redis)
    reader, operator = (tokens.add(role, role, "test") for role in ("read", "operator"))
    api = client_of(redis)
    refused = api.post(f"{NODE}/join", json={}, headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403, refused.text
    joined = api.post(f"{NODE}/join", json={}, headers={"Authorization": f"Bearer {operator}"})
    assert joined.status_code == 200 and joined.json()["epoch"]


def test_a_json_worker_pushes_leases_and_acks_and_the_job_dedups_its_urls() -> None:
    api = client_of(fakeredis.FakeRedis())
    epoch = api.post(f"{NODE}/join", json={"ttl_ms": 10_000}).json()["epoch"]
    urls = ["https://shop.example/a", "https://shop.example/b"]
    pushed = api.post(f"{NODE}/flush", json={"epoch": epoch, "call_id": "p1",
                                             "push": [{"url": u} for u in urls]}).json()
    assert (pushed["pushed"], pushed["filtered"]) == (2, 0)
    entries = api.post(f"{NODE}/lease", json={"epoch": epoch, "call_id": "l1",
                                              "count": 5}).json()["entries"]
    assert sorted(e["url"] for e in entries) == urls
    done = api.post(f"{NODE}/flush", json={"epoch": epoch, "call_id": "a1",
                                           "push": [{"url": urls[0]}],
                                           "ack": [e["id"] for e in entries]}).json()
    assert (done["pushed"], done["filtered"], done["acked"]) == (0, 1, 2)
    beat = api.post(f"{NODE}/heartbeat", json={"epoch": epoch, "idle": True}).json()
    assert (beat["queued"], beat["leased"], beat["done"], beat["control"]) == (0, 0, 2,
                                                                               "running")
    assert api.post(f"{NODE}/leave", json={"epoch": epoch}).status_code == 200


def test_calls_refuses_a_command_no_node_sends_and_a_body_that_is_no_msgpack() -> None:
    api = client_of(fakeredis.FakeRedis())
    headers = {"content-type": "application/msgpack"}
    flush_all = msgpack.packb({"calls": [["FLUSHALL"]]})
    answer = api.post(f"{NODE}/calls", content=flush_all, headers=headers)
    assert answer.status_code == 403 and "FLUSHALL" in answer.json()["error"]
    assert api.post(f"{NODE}/calls", content=b"{", headers=headers).status_code == 422
    bad_job = api.post("/api/v1/jobs/bad%7Bjob%7D/nodes/w1/calls", content=flush_all,
                       headers=headers)
    assert bad_job.status_code == 422
    ping = api.post(f"{NODE}/calls", content=msgpack.packb({"calls": [["PING"]]}),
                    headers=headers)
    assert msgpack.unpackb(ping.content)["replies"] == [[0, True]]
