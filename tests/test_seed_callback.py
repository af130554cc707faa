"""`clustersync seed --callback NAME` inside a project is checked against the job's spider: a name
the spider lacks is refused (exit 2) with the methods that can be callbacks, before anything is
written; outside a project it cannot be checked and is seeded as given."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_project import clustersync

from testkit.redis_server import RedisServer

from cli_runner import run_cli
from support import clustersync as clustersync_at
from support import project_with_spiders

DETAIL_SPIDER = '''
    from example.spiders.site import SiteSpider


    class DetailSpider(SiteSpider):
        name = "detail"

        def parse_detail(self, response):
            yield {"url": response.url}

        def _helper(self):
            return None
'''
URL = "http://127.0.0.1:9/a"


def test_a_callback_the_jobs_spider_lacks_is_refused_with_its_methods_and_nothing_is_written(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project whose spider "detail" has parse and parse_detail
    project = project_with_spiders(tmp_path, "detail", DETAIL_SPIDER)
    # when job "detail" is seeded with a callback that spider lacks
    refused = clustersync("seed", "detail", "--create", URL, "--callback", "parse_nope",
                          cwd=project, env_url=redis_server.url)
    # then it is a usage error naming the spider's callbacks, and the job was not created
    assert refused.returncode == 2, refused.output
    assert "'parse_nope' is not a method of the spider of job 'detail'" in refused.stderr
    assert "spider 'detail' has parse, parse_detail" in refused.stderr
    assert clustersync_at(redis_server.url, "status", "detail").returncode == 3
    # and with a method it has, the URL is seeded
    accepted = clustersync("seed", "detail", "--create", URL, "--callback", "parse_detail",
                           cwd=project, env_url=redis_server.url)
    assert accepted.returncode == 0 and "seeded 1 request(s)" in accepted.stdout, accepted.output


def test_the_spider_is_found_through_clustersync_job_and_an_unknown_job_is_said_unchecked(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given the project, its spider "detail" running job "shop" (-s CLUSTERSYNC_JOB, as a node
    # started with it would)
    project = project_with_spiders(tmp_path, "detail", DETAIL_SPIDER)
    shop = ("-s", "CLUSTERSYNC_JOB=shop")
    # when job "shop" is seeded with a callback no spider has, then refused
    refused = clustersync(*shop, "seed", "shop", "--create", URL, "--callback", "parse_nope",
                          cwd=project, env_url=redis_server.url)
    assert refused.returncode == 2 and "spider 'detail' has parse, parse_detail" in \
        refused.stderr, refused.output
    # when a job no spider of the project runs is seeded, then it is seeded, said unchecked
    unknown = clustersync("seed", "elsewhere", "--create", URL, "--callback", "parse_nope",
                          cwd=project, env_url=redis_server.url)
    assert unknown.returncode == 0, unknown.output
    assert ("--callback parse_nope not checked: no spider of the project runs job "
            "'elsewhere'") in unknown.stderr


def test_outside_a_project_the_callback_is_not_checked(redis_server: RedisServer,
                                                        tmp_path: Path) -> None:
    # given no project in the directory, when a callback is seeded, then it is, as given
    seeded = run_cli(redis_server.url, "seed", "bare", "--create", URL, "--callback",
                     "parse_nope", "--json", cwd=tmp_path)
    assert seeded.returncode == 0 and json.loads(seeded.stdout)["seeded"] == 1, seeded.output


def test_a_project_whose_spiders_do_not_import_seeds_and_says_the_callback_is_unchecked(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a project with a spider module that fails to import
    project = project_with_spiders(tmp_path, "broken", "import no_such_module\n")
    # when a callback is seeded there, then it is seeded, and the command says why unchecked
    seeded = clustersync("seed", "site", "--create", URL, "--callback", "parse_nope",
                         cwd=project, env_url=redis_server.url)
    assert seeded.returncode == 0, seeded.output
    assert ("--callback parse_nope not checked: the project's spiders could not be loaded "
            "(ModuleNotFoundError") in seeded.stderr
