"""The values in force on a node (shared over its own, -s keys winning, bad values refused),
and the proxy rule a node follows."""

from __future__ import annotations

from scrapy import Request
from scrapy.settings import Settings

from scrapy_clustersync.plugin.proxy_rule import ProxyRule, site_proxy
from scrapy_clustersync.plugin.settings_in_force import (
    InForce,
    declared_live_keys,
    local_values,
    overridden_keys,
)
from scrapy_clustersync.store.shared_settings import SharedSettings


def node_settings() -> Settings:
    settings = Settings({"USER_AGENT": "own/1", "DOWNLOAD_DELAY": 0.25}, priority="project")
    settings.set("DOWNLOAD_TIMEOUT", 7, priority="cmdline")
    return settings


def shared(version: int, fields: dict[str, str]) -> SharedSettings:
    return SharedSettings.parse(str(version), fields)


def test_shared_values_win_over_the_project_but_not_over_the_command_line() -> None:
    # given a node with a -s DOWNLOAD_TIMEOUT
    settings = node_settings()
    local = local_values(settings, {})
    overridden = overridden_keys(settings, {})
    # when the job shares a timeout and a user agent
    now = InForce.of(shared(1, {"DOWNLOAD_TIMEOUT": "3", "USER_AGENT": '"team/2"'}), local,
                     local, {}, overridden)
    # then the agent is the job's and the timeout the node's own
    assert now.values["USER_AGENT"] == "team/2"
    assert now.values["DOWNLOAD_TIMEOUT"] == 7.0
    assert now.shared == {"USER_AGENT"}
    assert now.changes_from(None) == {"USER_AGENT": "team/2"}


def test_a_bad_shared_value_is_refused_and_the_last_good_one_stays() -> None:
    settings = node_settings()
    local = local_values(settings, {})
    good = InForce.of(shared(1, {"USER_AGENT": '"team/2"'}), local, local, {}, frozenset())
    bad = InForce.of(shared(2, {"USER_AGENT": "5", "DOWNLOAD_DELAY": "not json"}), local,
                     good.values, {}, frozenset())
    assert bad.values["USER_AGENT"] == "team/2"
    assert bad.values["DOWNLOAD_DELAY"] == 0.25
    assert set(bad.refused) == {"USER_AGENT", "DOWNLOAD_DELAY"}
    assert "USER_AGENT" in bad.refused["USER_AGENT"]


def test_an_unset_key_goes_back_to_the_node_value_and_is_signalled_as_none() -> None:
    local = local_values(node_settings(), {})
    before = InForce.of(shared(1, {"USER_AGENT": '"team/2"'}), local, local, {}, frozenset())
    after = InForce.of(shared(2, {}), local, before.values, {}, frozenset())
    assert after.values["USER_AGENT"] == "own/1"
    assert after.changes_from(before) == {"USER_AGENT": None}


def test_a_spider_declares_its_own_keys_and_a_bad_declaration_is_left_out() -> None:
    class Spider:
        clustersync_live_settings = {"TITLE_PREFIX": "str", "LIMIT": "complex",
                                     "USER_AGENT": "str"}

    assert declared_live_keys(Spider) == {"TITLE_PREFIX": "str"}
    local = local_values(Settings({"TITLE_PREFIX": "v1:"}), {"TITLE_PREFIX": "str"})
    now = InForce.of(shared(1, {"TITLE_PREFIX": '"v2:"'}), local, local,
                     {"TITLE_PREFIX": "str"}, frozenset())
    assert now.values["TITLE_PREFIX"] == "v2:"


def test_the_proxy_rule_takes_one_url_a_rotation_or_a_table_of_sites() -> None:
    request = Request("http://shop.example.com/a")
    assert ProxyRule("http://p:1").proxy_for(request) == "http://p:1"
    rotation = ProxyRule(["http://a:1", "http://b:1"])
    assert [rotation.proxy_for(request) for _ in range(3)] == ["http://a:1", "http://b:1",
                                                               "http://a:1"]
    table = {"example.com": "http://e:1", "*": "http://any:1"}
    assert site_proxy(table, "shop.example.com") == "http://e:1"
    assert site_proxy(table, "other.org") == "http://any:1"
    assert ProxyRule(None).proxy_for(request) is None


def test_a_request_with_a_proxy_of_its_own_keeps_it_and_no_password_is_shown() -> None:
    rule = ProxyRule("http://user:s3cret@p:1")
    own = Request("http://a.com", meta={"proxy": None})
    rule.process_request(own)
    assert own.meta["proxy"] is None
    plain = Request("http://a.com")
    rule.process_request(plain)
    assert plain.meta["proxy"] == "http://user:s3cret@p:1"
    assert "s3cret" not in repr(rule)


def test_a_bad_proxy_in_the_project_settings_is_refused_naming_it() -> None:
    import pytest

    from scrapy_clustersync.config import ConfigError
    from scrapy_clustersync.plugin.proxy_rule import check_proxy_setting

    check_proxy_setting(Settings({"CLUSTERSYNC_PROXY": "http://p:1,http://q:2"}))
    with pytest.raises(ConfigError, match="CLUSTERSYNC_PROXY"):
        check_proxy_setting(Settings({"CLUSTERSYNC_PROXY": "ftp://p:1"}))
