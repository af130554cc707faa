"""The job's shared settings in Redis (store/shared_settings.py, lua/settings.lua) against a real
redis-server: versions, the bounded history in order, all or nothing, retried calls, the nudge
on the control channel."""

from __future__ import annotations

import pytest

from scrapy_clustersync.store import JobStore, StoreError, make_client
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.round_trip import RoundTrip
from scrapy_clustersync.store.shared_settings import UNSET, SharedSettings, SharedSettingsStore
from testkit.redis_server import LOCALHOST, RedisServer

JOB = "shop"


def settings_of(redis_server: RedisServer, history_keep: int = 1000,
                url: str | None = None) -> SharedSettingsStore:
    """The shared settings of a job that exists (a node joined it)."""
    JobStore(make_client(redis_server.url), JOB, "n1").join(ttl_ms=10_000)
    return SharedSettingsStore(make_client(url or redis_server.url), JobKeys(JOB), history_keep)


def test_each_change_is_one_new_version_and_reads_back_as_set(
    redis_server: RedisServer,
) -> None:
    # given a job without shared settings
    store = settings_of(redis_server)
    assert store.read() == SharedSettings(0, {})
    # when two keys are set in one change, then one of them in another
    first = store.change({"DOWNLOAD_DELAY": 0.5, "USER_AGENT": "bot/1"}, "ann@a")
    second = store.change({"DOWNLOAD_DELAY": 1.0}, "bob@b")
    # then each change made one version, and the values read back as they were set
    assert (first.verdict, first.version, set(first.changed)) == (
        "changed", 1, {"DOWNLOAD_DELAY", "USER_AGENT"})
    assert (second.verdict, second.version, second.changed) == ("changed", 2, ("DOWNLOAD_DELAY",))
    assert store.read() == SharedSettings(2, {"DOWNLOAD_DELAY": 1.0, "USER_AGENT": "bot/1"})
    assert store.version() == 2
    # when a key is unset, then it is gone in a new version
    assert store.change({"USER_AGENT": UNSET}, "ann@a").version == 3
    assert store.read() == SharedSettings(3, {"DOWNLOAD_DELAY": 1.0})


def test_setting_a_key_to_the_value_it_holds_changes_nothing_and_records_nothing(
    redis_server: RedisServer,
) -> None:
    store = settings_of(redis_server)
    store.change({"RETRY_HTTP_CODES": [500, 502], "DEFAULT_REQUEST_HEADERS": {"b": "1", "a": "2"}},
                 "ann@a")
    # when the same values are set again (a dict in another order), and an absent key unset
    same = store.change({"RETRY_HTTP_CODES": [500, 502],
                         "DEFAULT_REQUEST_HEADERS": {"a": "2", "b": "1"}, "USER_AGENT": UNSET},
                        "bob@b")
    # then nothing changed: no version, no record
    assert (same.verdict, same.version) == ("same", 1)
    assert len(store.history(10)) == 2


def test_the_history_lists_every_changed_key_in_order_with_who_and_server_time(
    redis_server: RedisServer,
) -> None:
    store = settings_of(redis_server)
    before_ms = int(redis_server.client().time()[0]) * 1000
    store.change({"DOWNLOAD_DELAY": 0.25}, "ann@a")
    store.change({"DOWNLOAD_DELAY": 2, "CLOSESPIDER_PAGECOUNT": 50}, "bob@b")
    store.change({"DOWNLOAD_DELAY": UNSET}, "ann@a")
    history = store.history(10)
    # then one record per changed key, oldest first, with its version, who, old and new value
    assert [(r["version"], r["who"], r["key"], r["old"], r["new"]) for r in history] == [
        (1, "ann@a", "DOWNLOAD_DELAY", None, 0.25),
        (2, "bob@b", "DOWNLOAD_DELAY", 0.25, 2),
        (2, "bob@b", "CLOSESPIDER_PAGECOUNT", None, 50),
        (3, "ann@a", "DOWNLOAD_DELAY", 2, None),
    ]
    # and the time is Redis's, in ms, the same for every record of one change
    assert all(r["ms"] >= before_ms for r in history) and history[1]["ms"] == history[2]["ms"]


def test_the_history_keeps_the_newest_records_only(redis_server: RedisServer) -> None:
    # given a job whose history keeps 3 records
    store = settings_of(redis_server, history_keep=3)
    # when 5 changes are made
    for delay in range(5):
        store.change({"DOWNLOAD_DELAY": float(delay)}, "ann@a")
    # then the 3 newest are kept, in order; a smaller limit gives the newest of them
    assert [r["version"] for r in store.history(10)] == [3, 4, 5]
    assert [r["new"] for r in store.history(2)] == [3.0, 4.0]
    assert redis_server.client().llen(JobKeys(JOB).settings_log) == 3


def test_a_change_on_a_version_that_is_not_current_changes_nothing(
    redis_server: RedisServer,
) -> None:
    store = settings_of(redis_server)
    store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a")
    # when a change expects version 0 while 1 is current
    stale = store.change({"DOWNLOAD_DELAY": 1.0, "USER_AGENT": "x"}, "bob@b", expect_version=0)
    # then it is refused and nothing changed; expecting 1 works
    assert (stale.verdict, stale.version) == ("stale", 1)
    assert store.read() == SharedSettings(1, {"DOWNLOAD_DELAY": 0.5})
    assert store.change({"USER_AGENT": "x"}, "bob@b", expect_version=1).version == 2


def test_a_change_that_fails_half_way_changes_nothing(redis_server: RedisServer) -> None:
    # given a job whose history key another program overwrote with a string
    store = settings_of(redis_server)
    store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a")
    redis_server.client().set(JobKeys(JOB).settings_log, "not a list")
    # when a change of two keys is made, then it fails and neither key nor version changed
    with pytest.raises(StoreError, match="settings_log"):
        store.change({"DOWNLOAD_DELAY": 1.0, "USER_AGENT": "x"}, "bob@b")
    assert store.read() == SharedSettings(1, {"DOWNLOAD_DELAY": 0.5})


def test_a_retried_call_makes_no_second_version(redis_server: RedisServer) -> None:
    store = settings_of(redis_server)
    first = store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a", call_id="call-1")
    # when redis-py sends the same call again (its reply was lost), even with a stale version
    again = store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a", call_id="call-1")
    again_expecting = store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a", expect_version=0,
                                   call_id="call-1")
    # then it answers what the first call did, and there is one version and one record
    assert again == again_expecting == first
    assert store.version() == 1 and len(store.history(10)) == 1


def test_a_change_is_announced_on_the_control_channel(redis_server: RedisServer) -> None:
    store = settings_of(redis_server)
    pubsub = redis_server.client().pubsub(  # type: ignore[no-untyped-call, unused-ignore]
        ignore_subscribe_messages=True)
    pubsub.subscribe(JobKeys(JOB).control_channel)
    pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a")
    message = pubsub.get_message(timeout=2.0)
    assert message is not None and message["data"] == b"settings 1"
    pubsub.close()


def test_a_user_without_pubsub_permission_still_changes_the_settings(
    redis_server: RedisServer,
) -> None:
    redis_server.client().acl_setuser("cli", enabled=True, passwords=["+pw"], keys=["*"],
                                      commands=["+@all"], reset_channels=True)
    url = f"redis://cli:pw@{LOCALHOST}:{redis_server.port}/0"
    store = settings_of(redis_server, url=url)
    assert store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a").version == 1
    assert store.read().values == {"DOWNLOAD_DELAY": 0.5}


def test_a_job_that_does_not_exist_is_not_created(redis_server: RedisServer) -> None:
    store = SharedSettingsStore(make_client(redis_server.url), JobKeys("nojob"))
    assert store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a").verdict == "absent"
    assert redis_server.client().keys("*") == []


def test_read_in_a_round_trip_and_values_another_program_wrote(
    redis_server: RedisServer,
) -> None:
    store = settings_of(redis_server)
    store.change({"DOWNLOAD_DELAY": 0.5}, "ann@a")
    redis_server.client().hset(JobKeys(JOB).settings, "USER_AGENT", "{not json")
    redis_server.client().hset(JobKeys(JOB).live_keys, "price_selector", "str")
    trip = RoundTrip(store.client)
    answer = store.read_in(trip)
    trip.send()
    read = answer.result()
    # then the round trip reads what read() reads; a value that is no JSON is set apart
    assert read == store.read()
    assert (read.version, dict(read.values), dict(read.unreadable)) == (
        1, {"DOWNLOAD_DELAY": 0.5}, {"USER_AGENT": "{not json"})
    assert store.declared_keys() == {"price_selector": "str"}
