"""The dashboard's script, run in Node against `clustersync serve` (tests/dashboard_harness.js
stands in for the browser's DOM): it shows the jobs and their progress, sends the token kept in
local storage, and its pause button pauses the job."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from api_serve import ServeProcess

from scrapy_clustersync.api import web_app
from scrapy_clustersync.store.api_tokens import TokenStore
from testkit.redis_server import RedisServer

from support import clustersync

HARNESS = Path(__file__).with_name("dashboard_harness.js")


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js (apt-get install nodejs)")
def test_the_dashboard_shows_the_jobs_and_its_pause_button_pauses_one(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a job of two queued URLs, an operator's token and serve
    seeded = clustersync(redis_server.url, "seed", "shop", "https://example.com/a",
                         "https://example.com/b", "--create")
    assert seeded.returncode == 0, seeded.output
    made = clustersync(redis_server.url, "token", "add", "ops", "--role", "operator", "--json")
    secret = json.loads(made.stdout)["secret"]
    page = tmp_path / "dashboard.html"
    page.write_text(web_app.dashboard_html())
    with ServeProcess(redis_server.url, tmp_path) as serve:
        # when the page runs with the token in its local storage, and its pause is clicked
        run = subprocess.run(["node", str(HARNESS), str(page), serve.base_url, secret],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    before, after = (json.loads(line) for line in run.stdout.splitlines())
    # then it showed the job, its progress and who the page is
    assert before["jobs"][0][:4] == ["shop", "waiting for nodes", "1", "2"]
    assert "queued 2" in before["details"] and before["who"].startswith("as ops (operator)")
    assert before["error"] == "" and before["alerts"] == []
    # and the pause was made, by the token's holder, and shown
    assert after["jobs"][0][1] == "paused"
    assert redis_server.client().hget("clustersync:{shop}:meta", "control") == b"paused"
    newest = TokenStore(redis_server.client()).audit(1)[0]
    assert (newest["who"], newest["action"], newest["job"]) == ("ops", "pause", "shop")
