"""A misspelled ``CLUSTERSYNC_*`` setting is never ignored: a real node stops with one ERROR line
naming it and the closest known name (exit 1), and the `clustersync` command refuses it (exit 2),
wherever it was given: settings.py, ``-s``, a spider's custom_settings, the environment."""

from __future__ import annotations

import re
from pathlib import Path

from test_cli_project import make_project

from testkit.redis_server import RedisServer

from cli_runner import run_cli
from conftest import SiteFactory
from support import project_with_spiders, start_node, wait_all

ERROR_LINE = re.compile(r"\] ERROR: ")

MISSPELLING_SPIDER = '''
    from example.spiders.site import SiteSpider


    class MisspellingSpider(SiteSpider):
        """The site spider, whose custom_settings misspell CLUSTERSYNC_IDLE_CLOSE_AFTER."""

        name = "misspelling"
        custom_settings = {"CLUSTERSYNC_IDLE_CLOSE_AFTR": 5}
'''


def _error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ERROR_LINE.search(line)]


def test_a_node_given_a_misspelled_setting_stops_with_one_line_naming_the_closest(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a site, and a node started with -s CLUSTERSYNC_DEDUPE=exact (for CLUSTERSYNC_DEDUP)
    web = site(5)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"CLUSTERSYNC_DEDUPE": "exact"})
    # when it runs
    wait_all([node], timeout_s=90)
    log = node.log()
    # then it fetched nothing, logged one ERROR line naming the setting and the fix, closed
    # with clustersync_bad_setting and exited 1
    errors = _error_lines(log)
    assert len(errors) == 1, log[-3000:]
    assert ("CLUSTERSYNC_DEDUPE (set with -s) is not a clustersync setting; did you mean "
            "CLUSTERSYNC_DEDUP?") in errors[0]
    assert node.finish_reason() == "clustersync_bad_setting" and "Traceback" not in log
    assert node.process.returncode == 1
    assert web.hits() == {}


def test_a_spiders_custom_settings_are_checked_too(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a spider whose custom_settings misspell CLUSTERSYNC_IDLE_CLOSE_AFTER
    web = site(5)
    project = project_with_spiders(tmp_path, "misspelling", MISSPELLING_SPIDER)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      project_dir=project, spider="misspelling")
    # when it runs, then it stops the same way, naming where the name was given
    wait_all([node], timeout_s=90)
    errors = _error_lines(node.log())
    assert len(errors) == 1 and ("CLUSTERSYNC_IDLE_CLOSE_AFTR (in the spider's custom_settings) "
                                 "is not a clustersync setting; did you mean "
                                 "CLUSTERSYNC_IDLE_CLOSE_AFTER?") in errors[0], errors
    assert node.process.returncode == 1 and web.hits() == {}


def test_the_command_refuses_a_misspelled_setting_given_with_s(redis_server: RedisServer) -> None:
    # given a job name and a misspelled -s, before and after the command
    for args in (("-s", "CLUSTERSYNC_DEDUPE=exact", "status", "shop"),
                 ("status", "shop", "-s", "CLUSTERSYNC_DEDUPE=exact")):
        # when the command runs, then it is a usage error naming the closest setting
        result = run_cli(redis_server.url, *args)
        assert result.returncode == 2, result.output
        assert "did you mean CLUSTERSYNC_DEDUP?" in result.stderr


def test_the_command_refuses_a_misspelled_setting_of_the_project_and_of_the_environment(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project whose settings.py misspells CLUSTERSYNC_JOB
    project = make_project(tmp_path / "p", f"""
        CLUSTERSYNC_REDIS_URL = "{redis_server.url}"
        CLUSTERSYNC_JOBS = "shop"
    """)
    # when a command reads its settings, then it refuses, naming the setting and the fix
    inside = run_cli(None, "status", cwd=project)
    assert inside.returncode == 2, inside.output
    assert ("CLUSTERSYNC_JOBS (in the project's settings) is not a clustersync setting; did you "
            "mean CLUSTERSYNC_JOB?") in inside.stderr
    # and an environment with CLUSTERSYNC_REDIS_ULR, where the command looks for the URL
    outside = run_cli(None, "status", "shop", env={"CLUSTERSYNC_REDIS_ULR": redis_server.url})
    assert outside.returncode == 2, outside.output
    assert ("CLUSTERSYNC_REDIS_ULR (an environment variable) is not a clustersync setting; did "
            "you mean CLUSTERSYNC_REDIS_URL?") in outside.stderr
