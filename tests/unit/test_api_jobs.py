"""The HTTP API's answers about one job, in this process (FastAPI's TestClient over a fakeredis
that runs the job's Lua scripts): the status is status --json's, and what cannot be done as the
job is answers 409 with the CLI's words."""

from __future__ import annotations

import warnings

import pytest

from scrapy_clustersync.api.api_context import ApiContext
from scrapy_clustersync.api.web_app import create_app
from scrapy_clustersync.cli.project import ProjectContext
from scrapy_clustersync.cli.status_view import status_dict
from scrapy_clustersync.store import DeadLetterWrite, JobStore
from scrapy_clustersync.store.job_store import new_call_id

with warnings.catch_warnings():  # Starlette would rather have httpx2; httpx does the same here
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from fastapi.testclient import TestClient



@pytest.fixture
def api(store: JobStore) -> TestClient:
    # the URL a seed's fingerprinter is built with (as serve was given it); never connected to
    project = ProjectContext(redis_url_flag="redis://127.0.0.1:1/0")
    return TestClient(create_app(ApiContext(store.client, project, loopback=True)),
                      base_url="http://127.0.0.1")


def test_the_status_is_what_status_json_prints(store: JobStore, api: TestClient) -> None:
    answer = api.get("/api/jobs/shop").json()
    expected = status_dict(store.status())
    assert answer["queued"] == expected["queued"] == 1
    assert set(answer) == set(expected) and answer["state"] == expected["state"]
    checked = api.get("/api/jobs/shop", params={"check": True}).json()
    assert checked["needs_attention"] == []


def test_a_pause_twice_says_it_was_paused_already_and_a_restart_of_a_queued_job_is_409(
    api: TestClient,
) -> None:
    assert api.post("/api/jobs/shop/pause").json()["verdict"] == "changed"
    assert api.post("/api/jobs/shop/pause").json()["verdict"] == "same"
    restart = api.post("/api/jobs/shop/restart")
    assert restart.status_code == 409 and "1 queued" in restart.json()["error"]
    stop = api.post("/api/jobs/shop/stop").json()
    assert stop["after"] == "stopped"
    assert api.post("/api/jobs/shop/pause").status_code == 409  # a stopped job is resumed


def test_a_settings_change_against_an_older_version_is_409_and_changes_nothing(
    api: TestClient,
) -> None:
    first = api.put("/api/jobs/shop/settings", json={"set": {"DOWNLOAD_DELAY": 2}})
    assert first.json()["version"] == 1
    stale = api.put("/api/jobs/shop/settings",
                    json={"set": {"DOWNLOAD_DELAY": 3}, "expect_version": 0})
    assert stale.status_code == 409 and "version 1, not 0" in stale.json()["error"]
    current = api.get("/api/jobs/shop/settings").json()
    assert current == {"version": 1, "settings": {"DOWNLOAD_DELAY": 2.0}, "unreadable": []}
    unset = api.put("/api/jobs/shop/settings", json={"unset": ["DOWNLOAD_DELAY"]})
    assert unset.json()["changed"] == ["DOWNLOAD_DELAY"]


def test_the_check_of_a_sound_job_finds_nothing(api: TestClient) -> None:
    answer = api.post("/api/jobs/shop/check")
    assert answer.status_code == 200 and answer.json() == {"job": "shop", "findings": [],
                                                           "left": 0}


def test_a_dead_letter_is_an_alert_and_a_metric(store: JobStore, api: TestClient) -> None:
    # given a job whose only entry went to the dead letters
    epoch = store.ensure_job()
    store.flush(epoch, [DeadLetterWrite("refused", b"what")], new_call_id())
    # then the alerts say so, and so does the metric an alert rule reads
    assert api.get("/api/alerts").json()["needs_attention"] == [
        {"job": "shop", "alert": "1 dead letter(s): `clustersync dead` lists them"}]
    assert 'clustersync_job_needs_attention{job="shop"} 1.0' in api.get("/metrics").text


def test_a_seed_queues_each_new_url_once(api: TestClient) -> None:
    urls = ["https://example.com/new", "https://example.com/new", "https://example.org/"]
    seeded = api.post("/api/jobs/shop/seed", json={"urls": urls})
    assert seeded.json() == {"job": "shop", "seeded": 2, "already_seen": 1}
    assert api.get("/api/jobs/shop").json()["queued"] == 3
    again = api.post("/api/jobs/shop/seed", json={"urls": urls[:1]})
    assert again.json()["already_seen"] == 1
