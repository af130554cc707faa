"""`clustersync config` against a real redis-server, in process (cli_runner): bad values are
refused with the key and what it accepts and change nothing, a multi-key set and a load are all
or nothing, and the history shows every change in order with who and when."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.shared_settings import SharedSettings, SharedSettingsStore
from testkit.redis_server import RedisServer

from cli_runner import CliRun, run_cli

JOB = "shop"


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    """The URL of a Redis holding the job JOB (a node joined it)."""
    JobStore(make_client(redis_server.url), JOB, "n1").join(ttl_ms=10_000)
    return redis_server.url


def config(url: str, *args: str) -> CliRun:
    return run_cli(url, "config", *args)


def shared(url: str) -> SharedSettings:
    return SharedSettingsStore(make_client(url), JobKeys(JOB)).read()


def test_set_then_get_shows_the_values_and_version_with_the_job_left_out(url: str) -> None:
    # given the only job on the Redis, when two keys are set without naming it
    done = config(url, "set", "DOWNLOAD_DELAY", "0.25", "RETRY_HTTP_CODES", "500,503")
    # then one version holds both, and get shows them, with or without JOB
    assert done.returncode == 0, done.output
    assert "version 1" in done.stdout and "DOWNLOAD_DELAY = 0.25  (was unset)" in done.stdout
    assert shared(url) == SharedSettings(1, {"DOWNLOAD_DELAY": 0.25,
                                             "RETRY_HTTP_CODES": [500, 503]})
    assert config(url, "get", JOB, "DOWNLOAD_DELAY").stdout == "0.25\n"
    assert config(url, "get", "RETRY_HTTP_CODES").stdout == "[500,503]\n"
    got = json.loads(config(url, "get", JOB, "--json").stdout)
    assert got["version"] == 1 and got["settings"]["DOWNLOAD_DELAY"] == 0.25


@pytest.mark.parametrize(("args", "message"), [
    (("DOWNLOAD_DELAY", "-1"), "DOWNLOAD_DELAY = -1 is refused (out of range): DOWNLOAD_DELAY "
                               "accepts a number of seconds >= 0"),
    (("CONCURRENT_REQUESTS", "many"), "CONCURRENT_REQUESTS = many is refused (not a number)"),
    (("DOWNLOAD_DELY", "1"), "unknown setting 'DOWNLOAD_DELY'"),
    (("ITEM_PIPELINES", "{}"), "ITEM_PIPELINES cannot change while Scrapy runs"),
])
def test_a_bad_set_exits_2_naming_the_key_and_changes_nothing(url: str, args: tuple[str, ...],
                                                              message: str) -> None:
    config(url, "set", JOB, "USER_AGENT", "bot/1")
    refused = config(url, "set", JOB, *args)
    assert refused.returncode == 2, refused.output
    assert message in " ".join(refused.stderr.split()), refused.stderr
    assert shared(url) == SharedSettings(1, {"USER_AGENT": "bot/1"})


def test_a_multi_key_set_with_one_bad_key_changes_nothing_and_names_it(url: str) -> None:
    refused = config(url, "set", JOB, "DOWNLOAD_DELAY", "1", "RETRY_TIMES", "-3", "USER_AGENT",
                     "x")
    assert refused.returncode == 2 and "RETRY_TIMES = -3 is refused" in refused.stderr
    assert "nothing changed" in refused.stderr
    assert shared(url) == SharedSettings(0, {})


def test_a_load_with_one_bad_key_changes_nothing(url: str, tmp_path: Path) -> None:
    config(url, "set", JOB, "USER_AGENT", "bot/1")
    path = tmp_path / "live.toml"
    path.write_text('DOWNLOAD_DELAY = 0.5\nCONCURRENT_REQUESTS = 0\n')
    refused = config(url, "load", JOB, str(path))
    assert refused.returncode == 2 and "CONCURRENT_REQUESTS = 0 is refused" in refused.stderr
    assert shared(url) == SharedSettings(1, {"USER_AGENT": "bot/1"})


def test_load_makes_the_file_the_whole_set_and_merge_keeps_the_rest(url: str,
                                                                    tmp_path: Path) -> None:
    config(url, "set", JOB, "USER_AGENT", "bot/1", "RETRY_TIMES", "5")
    toml, js = tmp_path / "live.toml", tmp_path / "live.json"
    toml.write_text('DOWNLOAD_DELAY = 0.5\nDEFAULT_REQUEST_HEADERS = { Accept = "text/html" }\n')
    js.write_text('{"RETRY_TIMES": 2}')
    # when a TOML file is loaded, then it is the whole set, in one version
    assert config(url, "load", str(toml)).returncode == 0
    assert shared(url) == SharedSettings(2, {"DOWNLOAD_DELAY": 0.5,
                                             "DEFAULT_REQUEST_HEADERS": {"Accept": "text/html"}})
    # when a JSON file is merged, then the other keys stay
    assert config(url, "load", JOB, str(js), "--merge").returncode == 0
    assert shared(url).values["DOWNLOAD_DELAY"] == 0.5 and shared(url).values["RETRY_TIMES"] == 2


def test_dump_then_load_round_trips_and_keeps_a_masked_proxy_password(url: str,
                                                                      tmp_path: Path) -> None:
    config(url, "set", JOB, "CLUSTERSYNC_PROXY", "http://u:s3cret@proxy:3128",
           "CLUSTERSYNC_SITE_DELAYS", '{"a.com": 2}', "RANDOMIZE_DOWNLOAD_DELAY", "false")
    dumped = config(url, "dump", JOB)
    assert dumped.returncode == 0 and "s3cret" not in dumped.stdout, dumped.output
    assert 'CLUSTERSYNC_PROXY = "http://u:***@proxy:3128"' in dumped.stdout
    path = tmp_path / "dumped.toml"
    path.write_text(dumped.stdout)
    again = config(url, "load", JOB, str(path))
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.output
    assert shared(url).values["CLUSTERSYNC_PROXY"] == "http://u:s3cret@proxy:3128"


def test_history_shows_every_change_in_order_with_who_and_when(url: str) -> None:
    config(url, "set", JOB, "DOWNLOAD_DELAY", "0.25")
    config(url, "set", JOB, "DOWNLOAD_DELAY", "1", "CLUSTERSYNC_PROXY", "http://u:pw9@p:1")
    config(url, "unset", JOB, "DOWNLOAD_DELAY")
    shown = config(url, "history", JOB)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and len(lines) == 5 and "pw9" not in shown.stdout
    assert lines[0].startswith("v1  20") and lines[0].endswith("DOWNLOAD_DELAY: unset -> 0.25")
    assert lines[1].endswith("DOWNLOAD_DELAY: 0.25 -> 1.0")
    assert lines[2].endswith("CLUSTERSYNC_PROXY: unset -> http://u:***@p:1")
    assert lines[3].startswith("v3 ") and lines[3].endswith("DOWNLOAD_DELAY: 1.0 -> unset")
    records = json.loads(config(url, "history", JOB, "--json").stdout)
    assert [r["version"] for r in records] == [1, 2, 2, 3]
    assert all("@" in r["who"] and r["at"].startswith("20") for r in records)


def test_unset_refuses_an_unknown_key_and_a_job_that_does_not_exist_exits_3(url: str) -> None:
    refused = config(url, "unset", JOB, "DOWNLOAD_DELY")
    assert refused.returncode == 2 and "did you mean DOWNLOAD_DELAY?" in refused.stderr
    missing = config(url, "set", "nojob", "DOWNLOAD_DELAY", "1")
    assert missing.returncode == 3 and "'nojob' does not exist" in missing.stderr


def test_a_key_the_spider_declares_is_checked_against_its_type(url: str,
                                                               redis_server: RedisServer) -> None:
    redis_server.client().hset(JobKeys(JOB).live_keys, "price_selector", "str")
    redis_server.client().hset(JobKeys(JOB).live_keys, "max_price", "float")
    assert config(url, "set", JOB, "price_selector", "span.price::text").returncode == 0
    refused = config(url, "set", JOB, "max_price", "cheap")
    assert refused.returncode == 2 and "max_price = cheap is refused" in refused.stderr
    assert shared(url).values == {"price_selector": "span.price::text"}
