"""What differs between live nodes is named from their records' digests: which setting or file,
which nodes have what; per-node settings are never digested, secrets never in clear."""

from __future__ import annotations

import json

from scrapy.settings import Settings

from scrapy_clustersync.node.project_digest import MAX_ITEMS, REST, bounded, setting_digests
from scrapy_clustersync.store.node_differences import MAX_NAMED, node_differences


def record(settings: dict[str, str], files: dict[str, str] | None = None) -> dict[str, object]:
    return {"digest": json.dumps(settings), "setting_digests": settings,
            "file_digests": files or {}, "versions": {"scrapy": "2.19"}}


def test_a_setting_on_one_node_is_named_with_the_nodes_that_have_each_value() -> None:
    # given three nodes, c with another USER_AGENT
    live = {"a": record({"USER_AGENT": "11111111"}), "b": record({"USER_AGENT": "11111111"}),
            "c": record({"USER_AGENT": "22222222"})}
    # when they are compared, then one line says what differs, where, and why it matters
    assert [d.line() for d in node_differences(live)] == [
        "USER_AGENT differs: nodes a, b 11111111; node c 22222222: it changes what the sites see"]


def test_records_without_digests_per_setting_are_compared_by_their_one_digest() -> None:
    # given records of an older version: one digest each
    live = {"a": {"digest": "aaa"}, "b": {"digest": "aaa"}, "c": {"digest": "bbb"}}
    # then the node that differs is named all the same
    assert [d.line() for d in node_differences(live)] == [
        "digest differs: nodes a, b 'aaa'; node c 'bbb': the code or settings differ"]


def test_many_differing_settings_are_named_up_to_a_bound_then_counted() -> None:
    # given two nodes whose 30 settings all differ
    live = {"a": record({f"S{i:02}": "1" for i in range(30)}),
            "b": record({f"S{i:02}": "2" for i in range(30)})}
    # then MAX_NAMED lines: the first ones by name, then how many more
    lines = [d.line() for d in node_differences(live)]
    assert len(lines) == MAX_NAMED and lines[0].startswith("S00 differs: node a 1; node b 2")
    assert lines[-1].startswith(f"and {30 - MAX_NAMED + 1} more settings differ too")


def test_per_node_settings_are_not_digested_and_secrets_not_kept_in_clear() -> None:
    # given a node's settings: per-node outputs, a crawl setting and a password
    settings = Settings({"FEEDS": {"a.jsonl": {"format": "jsonlines"}}, "LOG_FILE": "x.log",
                         "JOBDIR": "/tmp/j", "STATS_DUMP": False, "DOWNLOAD_DELAY": 2,
                         "CLUSTERSYNC_REDIS_URL": "redis://:pw@h/0", "DB_PASSWORD": "hunter2"})
    # when they are digested
    digests = setting_digests(settings)
    # then only the crawl setting and the secret are, neither in clear
    assert set(digests) == {"DOWNLOAD_DELAY", "DB_PASSWORD"}
    assert "hunter2" not in json.dumps(digests)


def test_a_record_holds_a_bounded_number_of_digests() -> None:
    # given more files than a record holds, in two directories
    files = {f"{d}/f{i:04}.py": f"{i:064x}" for d in ("a", "b") for i in range(MAX_ITEMS)}
    # then they are digested by directory; and too many names end in one digest of the rest
    assert set(bounded(files, group=lambda p: p.split("/")[0] + "/")) == {"a/", "b/"}
    many = bounded({f"S{i:04}": "0" * 64 for i in range(MAX_ITEMS * 2)}, group=None)
    assert len(many) == MAX_ITEMS and REST in many


def test_a_number_given_as_text_with_s_is_the_same_setting() -> None:
    # given one node with CONCURRENT_REQUESTS=16 from -s (text) and one with Scrapy's default
    given = setting_digests(Settings({"CONCURRENT_REQUESTS": "16", "DOWNLOAD_DELAY": "0.5"}))
    other = setting_digests(Settings({"DOWNLOAD_DELAY": 0.5}))
    # then neither differs: 16 is the default, and 0.5 is 0.5
    assert given == other and "CONCURRENT_REQUESTS" not in given


def test_a_setting_the_job_shares_is_no_difference_whatever_each_node_has() -> None:
    # given two nodes with their own USER_AGENT (one given with -s), the job sharing it
    live = {"a": record({"USER_AGENT": "11111111", "ROBOTSTXT_OBEY": "1"}),
            "b": record({"USER_AGENT": "22222222", "ROBOTSTXT_OBEY": "1"})}
    # then nothing differs (their whole digests differ, but only by the shared key)
    assert node_differences(live, shared={"USER_AGENT"}) == []
    # and without the job sharing it, it does
    assert [d.name for d in node_differences(live)] == ["USER_AGENT"]
