"""Settings are checked at start-up and a bad one is named with what is accepted."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import DEFAULTS, ClusterConfig, ConfigError, redact_url

REPO_ROOT = Path(__file__).resolve().parents[2]


def config(**settings: object) -> ClusterConfig:
    base = {"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"}
    return ClusterConfig.from_settings(Settings({**base, **settings}), "spider")


def test_defaults_need_no_tuning() -> None:
    cfg = config()
    assert cfg.job == "spider" and cfg.idle_close_after_s == 0.5 and cfg.prefetch_sized
    assert cfg.prefetch == 128 and cfg.prefetch_start == 8  # sized, up to 8 x 16
    assert cfg.failed_keep == 1000
    assert config(CLUSTERSYNC_FAILED_KEEP="0").failed_keep == 0
    assert cfg.node_retention_s == 86_400 and config(
        CLUSTERSYNC_NODE_RETENTION="0").node_retention_s == 0


def test_a_node_with_clustersync_url_and_no_redis_url_goes_through_serve() -> None:
    cfg = config(CLUSTERSYNC_REDIS_URL="", CLUSTERSYNC_URL="https://h:8500/",
                 CLUSTERSYNC_TOKEN="csk_x")
    assert (cfg.over_http, cfg.redis_url, cfg.http_token) == (True, "https://h:8500", "csk_x")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CLUSTERSYNC_REDIS_URL": ""}, "neither CLUSTERSYNC_REDIS_URL nor CLUSTERSYNC_URL is set"),
        ({"CLUSTERSYNC_REDIS_URL": "http://h:6379"}, "accepted: redis://"),
        ({"CLUSTERSYNC_URL": "https://h:8500"}, "URL and CLUSTERSYNC_URL are both"),
        ({"CLUSTERSYNC_REDIS_URL": "", "CLUSTERSYNC_URL": "redis://h"}, "is no http"),
        ({"CLUSTERSYNC_JOB": "bad{tag}"}, "CLUSTERSYNC_JOB 'bad{tag}' is not a valid job name"),
        ({"CLUSTERSYNC_IDLE_CLOSE_AFTER": "soon"}, "CLUSTERSYNC_IDLE_CLOSE_AFTER = 'soon' is not"),
        ({"CLUSTERSYNC_LEASE_TIMEOUT": 0}, "CLUSTERSYNC_LEASE_TIMEOUT = 0 is too small"),
        ({"CLUSTERSYNC_HEARTBEAT_INTERVAL": 30}, "at most a third of CLUSTERSYNC_LEASE_TIMEOUT"),
        ({"CLUSTERSYNC_BATCH_SIZE": 10**6}, "CLUSTERSYNC_BATCH_SIZE = 1000000 is too large"),
        ({"CLUSTERSYNC_FAILED_KEEP": -1}, "CLUSTERSYNC_FAILED_KEEP = -1 is not a number of "
                                          "failed requests to keep: give a whole number from 0"),
        ({"CLUSTERSYNC_FAILED_KEEP": "many"}, "CLUSTERSYNC_FAILED_KEEP = 'many' is not"),
        ({"CLUSTERSYNC_FAILED_KEEP": 2.5}, "CLUSTERSYNC_FAILED_KEEP = 2.5 is not"),
        ({"CLUSTERSYNC_FAILED_KEEP": 10**7}, "to 1,000,000; the default is 1000"),
        ({"CLUSTERSYNC_NODE_RETENTION": 30}, r"CLUSTERSYNC_NODE_RETENTION (30s\) must be 0"),
        ({"CLUSTERSYNC_NODE_RETENTION": 30}, "or at least 60s"),
        ({"CLUSTERSYNC_NODE_RETENTION": 100, "CLUSTERSYNC_NODE_DEAD_AFTER": 20},
         "or at least 200s"),
        ({"CLUSTERSYNC_NODE_RETENTION": "a day"}, "CLUSTERSYNC_NODE_RETENTION = 'a day' is not"),
        ({"CLUSTERSYNC_NODE_RETENTION": -1}, "CLUSTERSYNC_NODE_RETENTION = -1 is too small"),
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("(", r"\(")):
        config(**settings)


def test_urls_in_logs_hide_the_password() -> None:
    assert redact_url("redis://user:s3cret@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("rediss://h:1/0") == "rediss://h:1/0"


def _readme_settings_table() -> dict[str, str]:
    """Each setting the README's settings table lists -> the text of its default cell."""
    section = (REPO_ROOT / "README.md").read_text().split("\n## Settings\n", 1)[1]
    rows: dict[str, str] = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`CLUSTERSYNC_"):
            rows.update(dict.fromkeys(re.findall(r"`(CLUSTERSYNC_[A-Z_]+)`", cells[0]), cells[1]))
    return rows


def test_the_readme_lists_every_setting_and_only_those_of_config() -> None:
    assert sorted(_readme_settings_table()) == sorted(DEFAULTS)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_the_readme_gives_each_setting_the_default_config_has(name: str) -> None:
    # Given the default the README shows: a literal in backticks, or words for one derived at
    # start-up (the spider's name, three heartbeat intervals, required)
    shown = _readme_settings_table()[name]
    literal = re.fullmatch(r"`([^`]*)`", shown)
    if literal:
        # Then it is the value of config.DEFAULTS, of the same type
        value = ast.literal_eval(literal.group(1))
        assert (value, type(value) is bool) == (DEFAULTS[name], type(DEFAULTS[name]) is bool)
    else:
        # Then config.DEFAULTS holds no value of its own: it is derived, or required
        assert not DEFAULTS[name], f"README shows {shown!r} for {name}"


def test_every_setting_the_package_reads_has_its_default_in_config() -> None:
    # Given every CLUSTERSYNC_* setting read anywhere in the package
    read = {
        name
        for path in (REPO_ROOT / "scrapy_clustersync").rglob("*.py")
        for name in re.findall(r"(?:\.get\w*\(|_number\(settings, )\"(CLUSTERSYNC_[A-Z_]+)\"",
                               path.read_text())
    }
    # Then config.DEFAULTS has each (so the README's table, checked above, lists it)
    assert "CLUSTERSYNC_SPOOL_DIR" in read and "CLUSTERSYNC_LEASE_TIMEOUT" in read
    assert sorted(read - set(DEFAULTS)) == []
