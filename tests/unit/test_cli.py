"""`clustersync` refuses bad arguments with a usage error before it talks to any Redis, and its
commands share their options, arguments and exit codes.

What the commands do against a real Redis is tested in tests/test_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from scrapy_clustersync.cli.app import main
from scrapy_clustersync.cli.options import DEFAULT_LIMIT

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
    assert ("pass --redis-url URL, set the environment variable CLUSTERSYNC_REDIS_URL, or run "
            "inside a Scrapy project whose settings.py sets CLUSTERSYNC_REDIS_URL = "
            '"redis://') in result.stderr


def test_the_url_can_come_from_the_environment() -> None:
    # given CLUSTERSYNC_REDIS_URL set in the environment, to a URL of another scheme
    # when a command runs without --redis-url
    result = CliRunner().invoke(main, ["status", "shop"],
                                env={"CLUSTERSYNC_REDIS_URL": "http://example:80"})
    # then that URL is the one checked, and the error names the variable
    assert result.exit_code == USAGE_ERROR
    assert ("the environment variable CLUSTERSYNC_REDIS_URL 'http://example:80' has scheme "
            "'http'") in result.stderr


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
    assert "'www.a.com/2' has no scheme; write it in full, e.g. https://www.a.com/2" in \
        result.stderr


def test_purge_without_yes_deletes_nothing_and_says_how_to_confirm() -> None:
    # given a purge without --yes
    # when it runs
    result = clustersync("--redis-url", REDIS_URL, "purge", "shop")
    # then it is refused before any Redis is reached, asking for --yes
    assert result.exit_code == USAGE_ERROR
    assert "run again with --yes to confirm" in result.stderr


@pytest.mark.parametrize("url", ["http://", "https:///path", "http://:80/"])
def test_a_seed_without_a_host_is_a_usage_error_naming_it(url: str) -> None:
    # given an http(s) URL with no host
    # when it is seeded
    result = clustersync("--redis-url", REDIS_URL, "seed", "shop", "http://a/1", url)
    # then nothing is sent and the error names the URL and what it lacks
    assert result.exit_code == USAGE_ERROR
    assert f"{url!r} has no host; nothing was seeded" in result.stderr


def test_a_seed_of_a_scheme_scrapy_cannot_fetch_is_refused() -> None:
    result = clustersync("--redis-url", REDIS_URL, "seed", "shop", "gopher://a/1")
    assert result.exit_code == USAGE_ERROR
    assert "'gopher://a/1' has scheme 'gopher', which this project's DOWNLOAD_HANDLERS cannot " \
        "fetch; accepted: data, file, ftp, http, https, s3" in result.stderr


def test_a_bad_line_of_a_seed_file_is_named_with_its_line(tmp_path: Path) -> None:
    # given a file of URLs, with a comment, a blank line and a URL without a host on line 4
    urls = tmp_path / "urls.txt"
    urls.write_text("# shop\nhttp://a/1\n\nhttp://\n")
    # when it is seeded
    result = clustersync("--redis-url", REDIS_URL, "seed", "shop", "-f", str(urls))
    # then the error names the file, the line and the URL
    assert result.exit_code == USAGE_ERROR
    assert f"line 4 of {urls}: 'http://' has no host" in result.stderr


def leaf_commands() -> dict[str, click.Command]:
    """Every command, those of a group (``config get``) by their full name."""
    found: dict[str, click.Command] = {}
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            found.update({f"{name} {sub}": each for sub, each in command.commands.items()})
        else:
            found[name] = command
    return found


def test_every_command_that_prints_data_has_json() -> None:
    # every command prints something a script may want: its data, or what it did; export and
    # consume print the job's results, JSON lines already (export --format csv on request);
    # serve serves the data, as JSON, over HTTP
    without = [name for name, command in leaf_commands().items()
               if "as_json" not in {param.name for param in command.params}
               and name not in ("export", "consume", "serve")]
    assert without == []


def test_every_limit_has_the_same_default() -> None:
    limits = {name: param.default for name, command in leaf_commands().items()
              for param in command.params if param.name == "limit"}
    assert set(limits) == {"dead", "failed", "config history"}
    assert set(limits.values()) == {DEFAULT_LIMIT}


def test_every_command_takes_job_optionally_and_settings_after_it() -> None:
    for name, command in leaf_commands().items():
        params = {param.name: param for param in command.params}
        assert "overrides" in params, name  # -s NAME=VALUE after the command
        if name in ("jobs", "serve") or name.startswith("token "):  # of the Redis, no job
            continue
        job = params.get("job") or params["args"]  # seed [JOB] [URL]..., task [JOB] ID
        assert not job.required, name


def test_help_documents_every_exit_code() -> None:
    result = clustersync("--help")
    assert result.exit_code == 0
    for code, meaning in [(0, "done"), (1, "needs a person"), (2, "usage error"),
                          (3, "the job named does not exist"), (4, "Redis could not be reached")]:
        assert f"  {code}  {meaning}" in result.stdout, code


def test_a_bad_setting_after_the_command_is_a_usage_error_of_that_command() -> None:
    result = clustersync("--redis-url", REDIS_URL, "status", "shop", "-s", "NOVALUE")
    assert result.exit_code == USAGE_ERROR
    assert "Usage: clustersync status" in result.stderr and "use -s NAME=VALUE" in result.stderr


def test_task_with_more_than_job_and_id_is_a_usage_error() -> None:
    result = clustersync("--redis-url", REDIS_URL, "task", "shop", "t1", "extra")
    assert result.exit_code == USAGE_ERROR
    assert "task takes [JOB] ID, got 3 argument(s)" in result.stderr


def test_purge_of_the_default_job_without_yes_is_refused_before_any_redis() -> None:
    result = clustersync("--redis-url", REDIS_URL, "purge")
    assert result.exit_code == USAGE_ERROR
    assert "purge deletes the job for every node; run again with --yes" in result.stderr
