"""`clustersync` refuses bad arguments with a usage error before it talks to any Redis.

What the commands do against a real Redis is tested in tests/test_cli.py.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from scrapy_clustersync.cli import main

#: a URL these tests never reach: each is refused before any connection (see conftest.py)
REDIS_URL = "redis://127.0.0.1:1/0"
USAGE_ERROR = 2


def clustersync(*args: str) -> Result:
    """Run the command in-process, with no CLUSTERSYNC_REDIS_URL from the environment."""
    return CliRunner().invoke(main, list(args), env={"CLUSTERSYNC_REDIS_URL": None})


@pytest.mark.parametrize("command", ["status", "dead", "purge --yes", "seed http://a/1"])
def test_a_url_that_is_not_redis_is_a_usage_error_naming_the_option(command: str) -> None:
    # given a --redis-url of another scheme
    name, *rest = command.split()
    # when any command runs
    result = clustersync("--redis-url", "http://example:80", name, "shop", *rest)
    # then it stops with a usage error that names the option, the scheme and what is accepted
    assert result.exit_code == USAGE_ERROR
    assert "--redis-url 'http://example:80' has scheme 'http'; accepted: redis://" in result.stderr


def test_no_redis_url_at_all_is_a_usage_error_saying_how_to_give_one() -> None:
    # given neither --redis-url nor CLUSTERSYNC_REDIS_URL
    # when a command runs
    result = clustersync("status", "shop")
    # then it says both ways to give one
    assert result.exit_code == USAGE_ERROR
    assert "pass --redis-url URL or set CLUSTERSYNC_REDIS_URL" in result.stderr


def test_the_url_can_come_from_the_environment() -> None:
    # given CLUSTERSYNC_REDIS_URL set in the environment, to a URL of another scheme
    # when a command runs without --redis-url
    result = CliRunner().invoke(main, ["status", "shop"],
                                env={"CLUSTERSYNC_REDIS_URL": "http://example:80"})
    # then that URL is the one checked
    assert result.exit_code == USAGE_ERROR
    assert "--redis-url 'http://example:80' has scheme 'http'" in result.stderr


def test_a_password_in_a_refused_url_is_not_printed() -> None:
    # given a --redis-url of another scheme that carries a password
    # when a command runs
    result = clustersync("--redis-url", "http://user:s3cret@example:80", "status", "shop")
    # then the error shows the URL without its password
    assert result.exit_code == USAGE_ERROR
    assert "s3cret" not in result.output and "user:***@example:80" in result.stderr


@pytest.mark.parametrize("job", ["bad{tag}", "_underscore-first", "x" * 201, "with space"])
def test_a_job_name_that_cannot_name_a_job_is_a_usage_error(job: str) -> None:
    # given a job name with a character a job name cannot hold, or too long
    # when a command runs on it
    result = clustersync("--redis-url", REDIS_URL, "status", job)
    # then it stops with a usage error that says what a job name may hold
    assert result.exit_code == USAGE_ERROR
    assert f"JOB {job!r} is not a valid job name: use 1-200 characters" in result.stderr


def test_a_seed_that_is_not_a_url_is_a_usage_error_naming_it() -> None:
    # given a seed without a scheme
    # when it is seeded
    result = clustersync("--redis-url", REDIS_URL, "seed", "shop", "http://a/1", "www.a.com/2")
    # then nothing is sent and the error names the bad seed
    assert result.exit_code == USAGE_ERROR
    assert "'www.a.com/2': Missing scheme in request url" in result.stderr


def test_purge_without_yes_deletes_nothing_and_says_how_to_confirm() -> None:
    # given a purge without --yes
    # when it runs
    result = clustersync("--redis-url", REDIS_URL, "purge", "shop")
    # then it is refused before any Redis is reached, asking for --yes
    assert result.exit_code == USAGE_ERROR
    assert "run again with --yes to confirm" in result.stderr
