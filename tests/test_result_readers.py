"""Reading a job's results: ``export`` (a cursor, every result once, in order), ``consume`` and
``ResultReader`` (reader groups: a consumer killed before its ack has its results delivered
again, acknowledged ones never come again), and trimming behind the slowest group."""

from __future__ import annotations

import csv
import io
import json
import signal
import threading
import time

import pytest
from results_support import add_results, cli_process, finish_job, make_job, wait_for

from scrapy_clustersync.results.reader import ResultReader
from scrapy_clustersync.store.results_store import ResultsStore
from testkit.redis_server import RedisServer

from cli_runner import run_cli


def lines_of(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line]


def test_export_writes_every_result_once_in_stream_order(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 2500)
    run = run_cli(redis_server.url, "export", "shop")
    assert run.returncode == 0, run.output
    rows = lines_of(run.stdout)
    assert [row["id"] for row in rows] == ids
    assert rows[3]["item"] == {"title": "title 3", "price": 4.5, "n": 3}
    assert rows[3]["url"] == "http://site.test/3" and rows[3]["kind"] == "item"
    # the export deleted nothing and registered no group
    assert ResultsStore(client, make_job(client, "shop")).length() == 2500
    assert client.xinfo_groups(make_job(client, "shop").results) == []


def test_export_since_starts_after_the_stream_id_given(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 50)
    first = lines_of(run_cli(redis_server.url, "export", "shop").stdout)
    run = run_cli(redis_server.url, "export", "shop", "--since", str(first[19]["stream_id"]))
    assert [row["id"] for row in lines_of(run.stdout)] == ids[20:]


def test_export_as_csv_has_a_header_and_a_row_per_result(redis_server: RedisServer,
                                                         tmp_path: object) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 30)
    add_results(client, "shop", 5, first=30, kind="error")
    run = run_cli(redis_server.url, "export", "shop", "--format", "csv", "--kinds", "item")
    assert run.returncode == 0, run.output
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert [row["id"] for row in rows] == ids
    assert json.loads(rows[2]["data"])["title"] == "title 2"


def test_export_follow_ends_once_the_job_finished(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    add_results(client, "shop", 10)
    export = cli_process(redis_server.url, "export", "shop", "--follow")
    try:
        wait_for(lambda: client.xlen(make_job(client, "shop").results) == 10)
        add_results(client, "shop", 10, first=10)
        finish_job(client, "shop")
        out, err = export.communicate(timeout=60)
    finally:
        export.kill()
    assert export.returncode == 0, err
    assert [row["id"] for row in lines_of(out.decode())] == [f"r{n:05d}" for n in range(20)]


def test_a_consumer_killed_mid_batch_leaves_its_results_to_another(
        redis_server: RedisServer) -> None:
    # Given 3000 results of ~200 bytes, read 500 at a time: a batch is larger than a pipe holds
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 3000, item=lambda n: {"n": n, "text": "x" * 180})
    first = cli_process(redis_server.url, "consume", "shop", "--group", "g",
                        "--consumer", "a", "--batch", "500", "--follow")
    # When the test reads past the first batch (so consumer a acked it and writes its second
    # into a pipe nobody reads) and then kills it
    assert first.stdout is not None
    seen = [str(json.loads(first.stdout.readline())["id"]) for _ in range(520)]
    first.send_signal(signal.SIGKILL)
    first.wait()
    finish_job(client, "shop")
    # Then another consumer gets every result consumer a did not ack, and none it did
    second = run_cli(redis_server.url, "consume", "shop", "--group", "g", "--consumer", "b",
                     "--batch", "500", "--claim-idle", "0.2")
    assert second.returncode == 0, second.output
    got = [str(row["id"]) for row in lines_of(second.stdout)]
    assert sorted(got) == ids[500:]
    assert set(seen[:500]).isdisjoint(got)


def test_trimming_follows_the_slowest_group_and_only_after_every_group_acked(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    keys = make_job(client, "shop")
    add_results(client, "shop", 100)
    fast = ResultReader(None, "shop", "fast", "f", client=client)
    slow = ResultReader(None, "shop", "slow", "s", client=client)
    finish_job(client, "shop")
    for batch in fast.batches(count=25):
        fast.ack(batch)
    assert client.xlen(keys.results) == 100  # the slow group has acknowledged nothing
    slow_batches = slow.batches(count=30)
    first = next(slow_batches)
    assert client.xlen(keys.results) == 100  # delivered is not acknowledged
    slow.ack(first)
    assert client.xlen(keys.results) == 70
    # a reader that dies before its ack gets its batch again under the same name
    next(slow_batches)
    again = ResultReader(None, "shop", "slow", "s", client=client)
    redelivered = next(again.batches(count=30))
    assert [r.id for r in redelivered] == [f"r{n:05d}" for n in range(30, 60)]
    again.ack(redelivered)
    for batch in again.batches(count=30):
        again.ack(batch)
    assert client.xlen(keys.results) == 0


def test_the_status_lists_each_reader_group_with_its_lag(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    add_results(client, "shop", 40)
    reader = ResultReader(None, "shop", "db", "host-1", client=client)
    reader.ack(next(reader.batches(count=10)))
    next(reader.batches(count=5))  # 5 more pending
    status = run_cli(redis_server.url, "status", "shop", "--json")
    assert status.returncode == 0, status.output
    readers = json.loads(status.stdout)["readers"]
    assert readers["groups"] == [{"group": "db", "consumers": 1, "pending": 5,
                                  "undelivered": 25, "lag": 30,
                                  "last_delivered_id": readers["groups"][0][
                                      "last_delivered_id"]}]
    text = run_cli(redis_server.url, "status", "shop")
    assert "readers" in text.stdout and "db" in text.stdout


@pytest.mark.parametrize("args", [("export", "nope"), ("consume", "nope", "--group", "g")])
def test_an_unknown_job_is_one_clear_error(redis_server: RedisServer,
                                          args: tuple[str, ...]) -> None:
    run = run_cli(redis_server.url, *args)
    assert run.returncode == 3
    assert "job 'nope' does not exist" in run.stderr
    assert "Traceback" not in run.stderr


def test_reader_threads_of_one_group_share_the_results(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 600)
    finish_job(client, "shop")
    got: list[list[str]] = [[], []]

    def read(n: int) -> None:
        reader = ResultReader(redis_server.url, "shop", "g", f"c{n}")
        for batch in reader.batches(count=50, block_ms=100):
            got[n].extend(r.id for r in batch)
            reader.ack(batch)

    threads = [threading.Thread(target=read, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(got[0] + got[1]) == ids


def test_a_reader_of_an_ended_job_stops_without_waiting_out_its_block(
        redis_server: RedisServer) -> None:
    # Given a finished job whose results fill whole batches, and a reader that would block 5 s
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 200)
    finish_job(client, "shop")
    reader = ResultReader(redis_server.url, "shop", "g", "c1")
    # When it reads and acknowledges every batch
    got: list[str] = []
    began = time.monotonic()
    for batch in reader.batches(count=50, block_ms=5000):
        got.extend(r.id for r in batch)
        reader.ack(batch)
    # Then it has every result and stopped once the stream was drained, not a block later
    assert got == ids
    assert time.monotonic() - began < 2.5


def test_a_group_registered_ahead_keeps_results_and_deleting_it_lets_them_go(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    keys = make_job(client, "shop")
    added = run_cli(redis_server.url, "readers", "shop", "--add", "later", "--json")
    assert added.returncode == 0 and json.loads(added.stdout)["added"] == ["later"]
    add_results(client, "shop", 20)
    finish_job(client, "shop")
    assert run_cli(redis_server.url, "consume", "shop", "--group", "now").returncode == 0
    assert client.xlen(keys.results) == 20  # kept for "later", which read nothing yet
    deleted = run_cli(redis_server.url, "readers", "shop", "--delete", "later", "--json")
    assert deleted.returncode == 0, deleted.output
    view = json.loads(deleted.stdout)
    assert (view["deleted"], view["trimmed"], view["held"]) == (["later"], 20, 0)
    assert [group["group"] for group in view["groups"]] == ["now"]


def test_a_since_that_is_no_stream_id_is_a_usage_error(redis_server: RedisServer) -> None:
    make_job(redis_server.client(), "shop")
    run = run_cli(redis_server.url, "export", "shop", "--since", "r00001")
    assert run.returncode == 2
    assert "'r00001' is no stream id" in run.stderr


def test_status_check_names_the_groups_that_hold_back_a_full_stream(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    keys = make_job(client, "shop")
    add_results(client, "shop", 30)
    ResultReader(None, "shop", "slow", client=client)
    client.hset(keys.results_meta, mapping={"cap": 30, "full_since_ms": 1})  # as the nodes do
    run = run_cli(redis_server.url, "status", "shop", "--check")
    assert run.returncode == 1, run.output
    assert "the results stream is full: reader group 'slow' has 30 results" in run.stdout
