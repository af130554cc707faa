"""The `clustersync` command inside a Scrapy project: its settings give the Redis URL, the job
and the request fingerprinter (the command run in-process in the project's directory, real
redis-servers, a real node; `scrapy clustersync` as a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from testkit.redis_server import RedisServer

from cli_runner import CliRun, run_cli
from conftest import RedisFactory, SiteFactory
from support import project_with_spiders, start_node, wait_all


def make_project(root: Path, settings: str) -> Path:
    """A minimal Scrapy project (scrapy.cfg + proj/settings.py holding ``settings``)."""
    (root / "proj").mkdir(parents=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "settings.py").write_text(textwrap.dedent(settings))
    return root


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a process in ``cwd``, without the shell's Redis URL or settings module."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLUSTERSYNC_REDIS_URL", "SCRAPY_SETTINGS_MODULE")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def clustersync(*args: str, cwd: Path, env_url: str | None = None,
                stdin: str | None = None) -> CliRun:
    """``clustersync ARGS...`` run in ``cwd`` (in-process), with ``env_url`` as the
    environment's CLUSTERSYNC_REDIS_URL."""
    return run_cli(None, *args, input=stdin, cwd=cwd,
                   env={"CLUSTERSYNC_REDIS_URL": env_url} if env_url else None)


def test_status_inside_a_project_needs_no_url_and_takes_the_job_from_its_settings(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project whose settings name the test Redis and a job, and that job seeded
    project = make_project(tmp_path, f"""
        CLUSTERSYNC_REDIS_URL = "{redis_server.url}"
        CLUSTERSYNC_JOB = "shop"
    """)
    seeded = clustersync("seed", "--create", "http://a/1", "http://a/2", cwd=project)
    assert seeded.returncode == 0, seeded.stderr
    # when status runs there with no URL and no JOB
    result = clustersync("status", "--json", cwd=project)
    # then it reports that job on that Redis
    assert result.returncode == 0, result.stderr
    assert (json.loads(result.stdout)["job"], json.loads(result.stdout)["queued"]) == ("shop", 2)


def test_a_setting_given_after_the_command_beats_the_projects(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project whose settings name job "shop", and jobs "shop" and "news" seeded
    project = make_project(tmp_path, f"""
        CLUSTERSYNC_REDIS_URL = "{redis_server.url}"
        CLUSTERSYNC_JOB = "shop"
    """)
    for job in ("shop", "news"):
        seeded = clustersync("seed", job, "--create", "http://a/1", cwd=project)
        assert seeded.returncode == 0, seeded.output
    # when status runs there with -s CLUSTERSYNC_JOB=news after the command
    result = clustersync("status", "-s", "CLUSTERSYNC_JOB=news", "--json", cwd=project)
    # then it reports job "news", as `scrapy -s` would make the project's setting news
    assert result.returncode == 0, result.output
    assert json.loads(result.stdout)["job"] == "news"


def test_the_url_flag_beats_the_environment_which_beats_the_project(
    redis_factory: RedisFactory, tmp_path: Path,
) -> None:
    # given three Redis servers, each with one job named after where its URL is given
    servers = {name: redis_factory() for name in ("project", "env", "flag")}
    for name, server in servers.items():
        created = clustersync("--redis-url", server.url, "seed", name, "--create", "http://a/",
                              cwd=tmp_path)
        assert created.returncode == 0, created.stderr
    project = make_project(tmp_path / "p", f'CLUSTERSYNC_REDIS_URL = "{servers["project"].url}"')

    def jobs_seen(*args: str, env_url: str | None = None) -> list[str]:
        listed = clustersync(*args, "jobs", "--json", cwd=project, env_url=env_url)
        assert listed.returncode == 0, listed.stderr
        return [row["job"] for row in json.loads(listed.stdout)]

    # when `jobs` runs with the project only, then with the variable, then with the flag too
    # then the most explicit source wins
    assert jobs_seen() == ["project"]
    assert jobs_seen(env_url=servers["env"].url) == ["env"]
    assert jobs_seen("--redis-url", servers["flag"].url, env_url=servers["env"].url) == ["flag"]


def test_scrapy_clustersync_status_works_inside_the_project(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project naming the test Redis, with job "shop" seeded
    project = make_project(tmp_path, f'CLUSTERSYNC_REDIS_URL = "{redis_server.url}"')
    assert clustersync("seed", "shop", "--create", "http://a/1", cwd=project).returncode == 0
    # when `scrapy clustersync status shop` runs there
    result = run([sys.executable, "-m", "scrapy", "clustersync", "status", "shop", "--json"],
                 project)
    # then Scrapy hands it to the clustersync command, with the project's settings
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queued"] == 1
    # and an unknown job is refused there too
    missing = run([sys.executable, "-m", "scrapy", "clustersync", "status", "nope"], project)
    assert missing.returncode == 3 and "clustersync jobs" in missing.stderr


QUERY_BLIND_FINGERPRINTER = """
    from scrapy.utils.request import RequestFingerprinter
    from w3lib.url import url_query_cleaner


    class QueryBlindFingerprinter(RequestFingerprinter):
        '''Two URLs that differ only in their query string are one page.'''

        def fingerprint(self, request):
            return super().fingerprint(request.replace(url=url_query_cleaner(request.url)))
"""


def test_urls_seeded_with_the_projects_fingerprinter_are_duplicates_of_the_links_a_node_finds(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a project whose REQUEST_FINGERPRINTER_CLASS ignores the query string, and every
    # page of a 30-page site seeded from it with a query string the site's links do not have
    web = site(30, links_per_page=4)
    project = project_with_spiders(tmp_path, "qfp", QUERY_BLIND_FINGERPRINTER)
    with (project / "example" / "settings.py").open("a") as settings:
        settings.write('\nREQUEST_FINGERPRINTER_CLASS = "example.spiders.qfp.'
                       'QueryBlindFingerprinter"\n')
    urls = "".join(f"{url}?from=seed\n" for url in web.page_urls())
    seeded = clustersync("seed", "site", "--create", "-f", "-", cwd=project,
                         env_url=redis_server.url, stdin=urls)
    assert seeded.returncode == 0, seeded.stderr
    # when a node of that project crawls the site, following every link
    node = start_node("node", redis_server.url, web.start_url, tmp_path / "node",
                      project_dir=project)
    wait_all([node])
    # then every page was fetched once: the links found were duplicates of the seeded URLs
    fetched = web.hits_by_agent()["node"]
    assert len(fetched) == 30 and set(fetched.values()) == {1}, fetched
