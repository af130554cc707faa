"""Every secret a Redis URL can carry is masked in what is logged or printed (url_secrets.py)."""

from __future__ import annotations

import pytest
import redis

from scrapy_clustersync.config import redact_url
from scrapy_clustersync.store import make_client
from scrapy_clustersync.store.errors import StoreError, client_secrets, translate_errors
from scrapy_clustersync.url_secrets import scrub_url_secrets


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cr%40t@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://bob:pw@h/0?password=pw2&db=1", "redis://bob:***@h/0?password=***&db=1"),
    ("rediss://h:6380?username=bob&password=pw", "rediss://h:6380?username=bob&password=***"),
    ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
    ("unix://:pw@/run/redis.sock", "unix://:***@/run/redis.sock"),
    ("redis://h/0?ssl_password=pw&socket_timeout=3", "redis://h/0?ssl_password=***&socket_timeout=3"),
    ("redis://h/0?PASS%77ORD=pw", "redis://h/0?PASS%77ORD=***"),
    ("redis://h:6379/0", "redis://h:6379/0"),
])
def test_redact_url_masks_every_secret_form_a_redis_url_can_carry(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_url_urllib_cannot_split_is_still_masked() -> None:
    assert redact_url("redis://[oops/0?password=pw") == "redis://[oops/0?password=***"


def test_a_message_quoting_the_url_loses_its_secrets() -> None:
    url = "redis://h/0?password=p%40ss"
    assert scrub_url_secrets(f"cannot reach {url}; password p@ss", url) == (
        "cannot reach redis://h/0?password=***; password ***")


def test_the_client_knows_the_secrets_it_connects_with() -> None:
    client = make_client("redis://u:one@h/0?ssl_password=two")
    assert set(client_secrets(client)) >= {"one"}


def test_a_redis_error_quoting_the_password_is_masked_in_the_error_and_its_cause() -> None:
    # given a client whose password a redis-py error quotes
    client = make_client("redis://h/0?password=hunter22")
    # when the store translates it, then neither the error nor its chained cause shows it
    try:
        with translate_errors(client):
            raise redis.ConnectionError("cannot connect to redis://h/0?password=hunter22")
    except StoreError as error:
        assert "hunter22" not in str(error) and "***" in str(error)
        assert error.__cause__ is not None and "hunter22" not in str(error.__cause__)
    else:
        raise AssertionError("no StoreError")
