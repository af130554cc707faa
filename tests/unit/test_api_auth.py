"""The HTTP API's access rules and error shapes, in this process (FastAPI's TestClient over a
fakeredis): who needs a token where, what each role may, and that every error is
``{"error": ...}``."""

from __future__ import annotations

import warnings

import fakeredis
import pytest

from scrapy_clustersync.api.api_context import ApiContext, is_loopback
from scrapy_clustersync.api.web_app import create_app
from scrapy_clustersync.cli.project import ProjectContext
from scrapy_clustersync.cli.serve_command import access_line
from scrapy_clustersync.store.api_tokens import TokenStore, secret_digest
from scrapy_clustersync.store.keys import api_tokens_key

with warnings.catch_warnings():  # Starlette would rather have httpx2; httpx does the same here
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from fastapi.testclient import TestClient


def client_of(redis: fakeredis.FakeRedis, loopback: bool = True) -> TestClient:
    return TestClient(create_app(ApiContext(redis, ProjectContext(), loopback)),
                      base_url="http://127.0.0.1")


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("127.0.0.2", True), ("0.0.0.0", False), ("10.0.0.5", False), ("crawl-admin", False)])
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_beyond_loopback_a_request_needs_a_token_even_while_none_exists() -> None:
    api = client_of(fakeredis.FakeRedis(), loopback=False)
    answer = api.get("/api/whoami")
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert "needs a token" in answer.json()["error"]
    assert "every request needs a token, and none exists" in access_line(0, False, "0.0.0.0")


def test_each_role_may_what_its_rank_allows_and_no_more() -> None:
    # given one token of each role
    redis = fakeredis.FakeRedis()
    tokens = TokenStore(redis)
    secrets = {role: tokens.add(role, role, "test") for role in ("read", "operator", "admin")}
    api = client_of(redis)
    # then each is who it says, and a role too low is 403 (before the job is even looked up)
    for role, secret in secrets.items():
        headers = {"Authorization": f"Bearer {secret}"}
        assert api.get("/api/whoami", headers=headers).json()["role"] == role
        pause = api.post("/api/jobs/shop/pause", headers=headers)
        assert pause.status_code == (403 if role == "read" else 404), (role, pause.text)
        settings = api.put("/api/jobs/shop/settings", headers=headers,
                           json={"set": {"DOWNLOAD_DELAY": 1}})
        assert settings.status_code == (404 if role == "admin" else 403), (role, settings.text)
        repair = api.post("/api/jobs/shop/check", headers=headers, json={"repair": True})
        assert repair.status_code == (403 if role == "read" else 404), (role, repair.text)


def test_redis_keeps_the_digest_of_a_secret_never_the_secret() -> None:
    redis = fakeredis.FakeRedis()
    secret = TokenStore(redis).add("grafana", "read", "test")
    assert secret is not None and secret.startswith("csk_")
    stored = redis.hget(api_tokens_key(), "grafana")
    assert stored is not None and secret.encode() not in stored
    assert secret_digest(secret).encode() in stored
    # and a second token of the same name is refused, the first kept
    assert TokenStore(redis).add("grafana", "admin", "test") is None
    assert [t.role for t in TokenStore(redis).tokens()] == ["read"]


def test_an_unknown_path_is_a_json_404() -> None:
    answer = client_of(fakeredis.FakeRedis()).get("/api/nothing")
    assert answer.status_code == 404 and answer.json() == {"error": "Not Found"}


def test_the_dashboard_and_the_openapi_document_are_served_and_fetch_nothing_elsewhere() -> None:
    api = client_of(fakeredis.FakeRedis())
    page = api.get("/")
    assert page.status_code == 200 and "<script>" in page.text
    assert "http://" not in page.text and "https://" not in page.text
    paths = api.get("/api/openapi.json").json()["paths"]
    assert {"/api/jobs", "/api/jobs/{job}", "/api/jobs/{job}/pause", "/api/jobs/{job}/seed",
            "/api/jobs/{job}/settings", "/metrics"} <= set(paths)


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 200),
    ({"Origin": "http://127.0.0.1"}, 200),  # the dashboard, served by serve itself
    ({"Origin": "https://evil.example"}, 403),  # a page elsewhere, in a browser here
    ({"Host": "rebound.evil.example:6810", "Origin": "http://rebound.evil.example:6810"}, 403),
    ({"Host": "localhost:6810"}, 200),
])
def test_without_tokens_only_this_machine_and_serves_own_page_may_call(
        headers: dict[str, str], status: int) -> None:
    api = client_of(fakeredis.FakeRedis())
    answer = api.post("/api/jobs/shop/pause", headers=headers)
    # 404: allowed, and there is no such job
    assert answer.status_code == (404 if status == 200 else 403), answer.text
