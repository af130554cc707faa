"""Every ``CLUSTERSYNC_*`` name is checked: a misspelled one is refused with the closest known
name, and every setting the package reads is in the one registry (``config.DEFAULTS``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_clustersync import Addon
from scrapy_clustersync.config import DEFAULTS, ConfigError
from scrapy_clustersync.plugin.addon import REFUSED_SCHEDULER_PATH
from scrapy_clustersync.setting_names import KNOWN_SETTINGS, check_settings_object

PACKAGE = Path(__file__).resolve().parents[2] / "scrapy_clustersync"
NAME = re.compile(r"\bCLUSTERSYNC_[A-Z0-9_]+\b")


@pytest.mark.parametrize(("given", "closest"), [
    ("CLUSTERSYNC_DEDUPE", "CLUSTERSYNC_DEDUP"),
    ("CLUSTERSYNC_IDLE_CLOSE_AFTR", "CLUSTERSYNC_IDLE_CLOSE_AFTER"),
    ("CLUSTERSYNC_REDIS_ULR", "CLUSTERSYNC_REDIS_URL"),
])
def test_a_misspelled_setting_is_refused_with_the_closest_known_name(given: str,
                                                                      closest: str) -> None:
    # given settings holding a misspelled clustersync name, set with -s
    settings = Settings({given: "5"}, priority="cmdline")
    # when their names are checked, then the error names it, where it was given and the fix
    with pytest.raises(ConfigError) as refused:
        check_settings_object(settings)
    assert f"{given} (set with -s) is not a clustersync setting; did you mean {closest}?" in str(
        refused.value)


def test_a_name_close_to_nothing_is_refused_without_a_guess() -> None:
    with pytest.raises(ConfigError, match="CLUSTERSYNC_XYZZY .*no known setting has a close"):
        check_settings_object(Settings({"CLUSTERSYNC_XYZZY": 1}))


def test_known_names_and_other_projects_settings_pass() -> None:
    # given every known setting and a project's own ones
    settings = Settings({**DEFAULTS, "MY_CLUSTERSYNC_FLAG": 1, "DOWNLOAD_DELAY": 1})
    # when checked, then nothing is refused
    check_settings_object(settings)


def test_the_addon_refuses_a_misspelled_setting_with_the_refusing_scheduler() -> None:
    # given a project whose settings.py misspells CLUSTERSYNC_DEDUP
    settings = Settings({"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0",
                         "CLUSTERSYNC_DEDUPE": "exact"}, priority="project")
    # when the add-on updates the settings, then the node is set to stop (bad setting)
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == REFUSED_SCHEDULER_PATH


def test_every_clustersync_name_the_package_mentions_is_a_known_setting() -> None:
    # given every CLUSTERSYNC_* name in the package's Python source (reads, messages, docs),
    # but prefixes ("CLUSTERSYNC_TLS_") and the error codes its Lua scripts reply with
    mentioned = {name for path in PACKAGE.rglob("*.py")
                 for name in NAME.findall(path.read_text()) if not name.endswith("_")}
    lua_errors = {name for path in PACKAGE.rglob("*.lua")
                  for name in re.findall(r"error_reply\('(CLUSTERSYNC_[A-Z_]+)",
                                         path.read_text())}
    # then each is in the registry: a new setting read anywhere needs its DEFAULTS entry, or
    # nodes that set it would be refused
    assert mentioned - lua_errors - KNOWN_SETTINGS == set()
