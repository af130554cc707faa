"""Settings are checked at start-up and a bad one is named with what is accepted."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig, ConfigError, redact_url


def config(**settings: object) -> ClusterConfig:
    base = {"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"}
    return ClusterConfig.from_settings(Settings({**base, **settings}), "spider")


def test_defaults_need_no_tuning() -> None:
    cfg = config()
    assert cfg.job == "spider" and cfg.idle_close_after_s == 0.5 and cfg.prefetch == 32
    assert cfg.failed_keep == 1000
    assert config(CLUSTERSYNC_FAILED_KEEP="0").failed_keep == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CLUSTERSYNC_REDIS_URL": ""}, "CLUSTERSYNC_REDIS_URL is not set"),
        ({"CLUSTERSYNC_REDIS_URL": "http://h:6379"}, "accepted: redis://"),
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
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("(", r"\(")):
        config(**settings)


def test_urls_in_logs_hide_the_password() -> None:
    assert redact_url("redis://user:s3cret@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("rediss://h:1/0") == "rediss://h:1/0"
