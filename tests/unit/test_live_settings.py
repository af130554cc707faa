"""Which shared settings may change while Scrapy runs, and how a value is read and checked
(scrapy_clustersync/live_settings.py): every type and range, unknown keys with the closest
name, settings read at start-up only, spider-declared keys, and no password in a message."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scrapy_clustersync.config import ConfigError
from scrapy_clustersync.live_settings import (
    LIVE_SETTINGS,
    LiveSettingError,
    canonical_json,
    check_value,
    masked,
    parse_text,
    setting_for,
)

PROXY = "CLUSTERSYNC_PROXY"


@pytest.mark.parametrize(("key", "text", "value"), [
    ("DOWNLOAD_DELAY", "0.25", 0.25),
    ("DOWNLOAD_DELAY", "1", 1.0),
    ("DOWNLOAD_DELAY", "0", 0.0),
    ("RANDOMIZE_DOWNLOAD_DELAY", "false", False),
    ("RANDOMIZE_DOWNLOAD_DELAY", "True", True),
    ("RETRY_ENABLED", "0", False),
    ("CONCURRENT_REQUESTS", "32", 32),
    ("CONCURRENT_REQUESTS_PER_IP", "0", 0),
    ("DOWNLOAD_TIMEOUT", "7.5", 7.5),
    ("USER_AGENT", "Mozilla/5.0 (X11; Linux)", "Mozilla/5.0 (X11; Linux)"),
    ("USER_AGENT", "1234", "1234"),
    ("USER_AGENT", '"quoted"', "quoted"),
    ("DEFAULT_REQUEST_HEADERS", '{"Accept-Language": "de"}', {"Accept-Language": "de"}),
    ("RETRY_HTTP_CODES", "500, 502,503", [500, 502, 503]),
    ("RETRY_HTTP_CODES", "[429]", [429]),
    ("RETRY_HTTP_CODES", "503", [503]),
    ("AUTOTHROTTLE_TARGET_CONCURRENCY", "2", 2.0),
    ("CLOSESPIDER_PAGECOUNT", "50", 50),
    ("CLOSESPIDER_TIMEOUT_NO_ITEM", "30", 30.0),
    (PROXY, "http://user:pw@proxy:3128", "http://user:pw@proxy:3128"),
    (PROXY, "http://a:1,https://b:2", ["http://a:1", "https://b:2"]),
    (PROXY, '{"example.com": "http://a:1"}', {"example.com": "http://a:1"}),
    ("CLUSTERSYNC_SITE_DELAYS", '{"example.com": 2}', {"example.com": 2.0}),
])
def test_command_line_text_is_read_as_json_or_as_scrapy_reads_it(key: str, text: str,
                                                                   value: Any) -> None:
    parsed = parse_text(key, text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(("key", "text", "accepts"), [
    ("DOWNLOAD_DELAY", "-1", "a number of seconds >= 0"),
    ("DOWNLOAD_DELAY", "fast", "a number of seconds >= 0"),
    ("DOWNLOAD_DELAY", "NaN", "a number of seconds >= 0"),
    ("RANDOMIZE_DOWNLOAD_DELAY", "maybe", "true or false"),
    ("CONCURRENT_REQUESTS", "0", "a whole number >= 1"),
    ("CONCURRENT_REQUESTS", "2.5", "a whole number >= 1"),
    ("CONCURRENT_REQUESTS_PER_DOMAIN", "true", "a whole number >= 1"),
    ("CONCURRENT_REQUESTS_PER_IP", "-1", "a whole number >= 0"),
    ("DOWNLOAD_TIMEOUT", "0", "a number of seconds > 0"),
    ("RETRY_TIMES", "-2", "a whole number >= 0"),
    ("RETRY_HTTP_CODES", "500,abc", "HTTP status codes (100-599)"),
    ("RETRY_HTTP_CODES", "99", "HTTP status codes (100-599)"),
    ("RETRY_HTTP_CODES", "[600]", "HTTP status codes (100-599)"),
    ("DEFAULT_REQUEST_HEADERS", "Accept: text/html", "a JSON object of header names"),
    ("DEFAULT_REQUEST_HEADERS", '{"Accept": 1}', "a JSON object of header names"),
    ("AUTOTHROTTLE_TARGET_CONCURRENCY", "0", "a number > 0"),
    ("CLOSESPIDER_ITEMCOUNT", "-5", "a whole number >= 0"),
    (PROXY, "ftp://proxy:21", "one proxy URL"),
    (PROXY, "proxy:3128", "one proxy URL"),
    (PROXY, "[]", "one proxy URL"),
    ("CLUSTERSYNC_SITE_DELAYS", '{"example.com": -1}', "a JSON object of sites to seconds"),
    ("CLUSTERSYNC_SITE_DELAYS", "2.0", "a JSON object of sites to seconds"),
])
def test_a_bad_value_is_refused_naming_the_key_the_value_and_what_it_accepts(
    key: str, text: str, accepts: str,
) -> None:
    with pytest.raises(LiveSettingError) as refused:
        parse_text(key, text)
    message = str(refused.value)
    assert message.startswith(f"{key} = {text} is refused") and accepts in message
    assert refused.value.key == key and isinstance(refused.value, ConfigError)


@pytest.mark.parametrize(("key", "value", "canonical"), [
    ("DOWNLOAD_DELAY", 2, 2.0),
    ("CONCURRENT_REQUESTS", 8.0, 8),
    ("RETRY_ENABLED", 1, True),
    ("RETRY_HTTP_CODES", (500, 502), [500, 502]),
    ("CLUSTERSYNC_SITE_DELAYS", {"a.com": 1}, {"a.com": 1.0}),
])
def test_a_typed_value_is_checked_and_made_canonical(key: str, value: Any,
                                                     canonical: Any) -> None:
    checked = check_value(key, value)
    assert checked == canonical and type(checked) is type(canonical)


@pytest.mark.parametrize(("key", "value"), [
    ("DOWNLOAD_DELAY", "0.5"), ("DOWNLOAD_DELAY", True), ("CONCURRENT_REQUESTS", 1.5),
    ("RETRY_ENABLED", "yes"), ("USER_AGENT", 5), ("RETRY_HTTP_CODES", [500, "502"]),
    ("DEFAULT_REQUEST_HEADERS", ["a"]), (PROXY, {"a.com": 5}), (PROXY, 3),
])
def test_a_typed_value_of_the_wrong_type_is_refused(key: str, value: Any) -> None:
    with pytest.raises(LiveSettingError, match=f"^{key} = .* is refused .*{key} accepts "):
        check_value(key, value)


@pytest.mark.parametrize(("key", "closest"), [
    ("DOWNLOAD_DELY", "DOWNLOAD_DELAY"),
    ("download_delay", "DOWNLOAD_DELAY"),
    ("CONCURENT_REQUESTS", "CONCURRENT_REQUESTS"),
    ("USERAGENT", "USER_AGENT"),
])
def test_an_unknown_key_is_refused_with_the_closest_live_name(key: str, closest: str) -> None:
    with pytest.raises(LiveSettingError) as refused:
        parse_text(key, "1")
    assert str(refused.value).startswith(f"unknown setting {key!r}")
    assert str(refused.value).endswith(f"did you mean {closest}?")


def test_an_unknown_key_close_to_a_declared_one_gets_that_one() -> None:
    with pytest.raises(LiveSettingError, match="did you mean price_selector"):
        parse_text("price_selectr", "x", {"price_selector": "str"})


@pytest.mark.parametrize("key", ["SCHEDULER", "ITEM_PIPELINES", "DOWNLOAD_HANDLERS",
                                 "TWISTED_REACTOR", "SPIDER_MODULES", "CLUSTERSYNC_REDIS_URL",
                                 "CLUSTERSYNC_DEDUP"])
def test_a_setting_read_at_start_up_is_refused_as_one_that_cannot_change_live(key: str) -> None:
    with pytest.raises(LiveSettingError) as refused:
        parse_text(key, "1", {key: "str"})  # a spider's declaration does not make it live
    assert str(refused.value).startswith(f"{key} cannot change while Scrapy runs")
    assert "settings.py" in str(refused.value) and "restart" in str(refused.value)


@pytest.mark.parametrize(("type_name", "text", "value"), [
    ("str", "div.price::text", "div.price::text"),
    ("int", "-3", -3),
    ("float", "1", 1.0),
    ("bool", "true", True),
    ("list", "a, b", ["a", "b"]),
    ("list", '["a", 1]', ["a", 1]),
    ("dict", '{"x": [1]}', {"x": [1]}),
])
def test_a_key_the_spider_declares_takes_values_of_its_type(type_name: str, text: str,
                                                            value: Any) -> None:
    assert parse_text("rule", text, {"rule": type_name}) == value


@pytest.mark.parametrize(("type_name", "text"), [("int", "1.5"), ("float", "x"),
                                                 ("bool", "2"), ("dict", "[1]")])
def test_a_key_the_spider_declares_refuses_values_of_another_type(type_name: str,
                                                                 text: str) -> None:
    with pytest.raises(LiveSettingError, match=f"^rule = {re.escape(text)} is refused"):
        parse_text("rule", text, {"rule": type_name})


def test_a_declaration_of_an_unknown_type_is_refused_with_the_types_there_are() -> None:
    with pytest.raises(LiveSettingError, match="type 'set', which is none of str, int"):
        setting_for("rule", {"rule": "set"})


def test_no_password_of_a_proxy_url_appears_in_a_message_or_a_shown_value() -> None:
    for text in ("ftp://user:s3cret@proxy:21", "user:s3cret@proxy:21",
                 '{"a.com": "socks5://u:s3cret@p:1"}', "http://p:1/?token=s3cret,x"):
        with pytest.raises(LiveSettingError) as refused:
            parse_text(PROXY, text)
        assert "s3cret" not in str(refused.value), text
    shown = masked(PROXY, {"a.com": "http://u:s3cret@p:1", "b.com": "http://p:2"})
    assert shown == {"a.com": "http://u:***@p:1", "b.com": "http://p:2"}
    assert masked(PROXY, ["http://u:s3cret@p:1"]) == ["http://u:***@p:1"]


def test_every_live_setting_has_its_type_and_what_it_accepts() -> None:
    assert {"DOWNLOAD_DELAY", "CLOSESPIDER_TIMEOUT_NO_ITEM", PROXY,
            "CLUSTERSYNC_SITE_DELAYS"} <= set(LIVE_SETTINGS)
    assert all(setting.accepts and setting.kind for setting in LIVE_SETTINGS.values())


def test_the_canonical_json_of_equal_values_is_the_same_text() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == canonical_json({"a": "é", "b": 1}) == \
        '{"a":"é","b":1}'
