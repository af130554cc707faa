"""``clustersync sink``: every result in the table exactly once, even when the sink is killed
mid-batch and started again (PostgreSQL, MariaDB, SQLite); ``--columns`` widens the table;
AMQP: every result in the queue once the broker confirmed; bad input is one clear error."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pytest
from results_support import add_results, cli_process, finish_job, make_job, wait_for
from sink_support import (
    database_url,
    delete_queues,
    drain_queue,
    rabbitmq_vhost,
    rabbitmqctl,
    rows_of,
)

from scrapy_clustersync.results.reader import ResultReader
from testkit.redis_server import RedisServer

from cli_runner import run_cli

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url(request.param, tmp_path)


def test_a_sink_killed_mid_batch_and_started_again_leaves_every_result_once(
        redis_server: RedisServer, db_url: str) -> None:
    # Given a job with 4000 results and a sink writing them 100 at a time
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 4000, item=lambda n: {"n": n, "text": "x" * 300})
    first = cli_process(redis_server.url, "sink", "shop", "--to", db_url, "--batch", "100",
                        "--consumer", "a", "--follow")
    # When it is killed (SIGKILL) once some batches are in the table
    try:
        wait_for(lambda: len(rows_of(db_url, "shop")) >= 300, what="the first batches")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert len(rows_of(db_url, "shop")) < 4000
    # and another sink of the group runs once the job has finished
    finish_job(client, "shop")
    second = run_cli(redis_server.url, "sink", "shop", "--to", db_url, "--batch", "100",
                     "--consumer", "b", "--claim-idle", "0.2", "--json")
    # Then it ends with every result in the table, each once
    assert second.returncode == 0, second.output
    assert [row[0] for row in rows_of(db_url, "shop")] == ids
    # and the group acknowledged them all: the stream is trimmed empty
    assert client.xlen(make_job(client, "shop").results) == 0


def test_columns_adds_a_column_for_each_new_item_field(redis_server: RedisServer,
                                                       db_url: str) -> None:
    client = redis_server.client()
    make_job(client, "Shop-2")
    add_results(client, "Shop-2", 3, item=lambda n: {"title": f"t{n}", "price": n})
    add_results(client, "Shop-2", 2, first=3,
                item=lambda n: {"title": f"t{n}", "price": "free", "Stock Count": n})
    finish_job(client, "Shop-2")
    run = run_cli(redis_server.url, "sink", "Shop-2", "--to", db_url, "--columns",
                  "--batch", "3")
    assert run.returncode == 0, run.output
    # the table is named after the job (sanitized); a price that is no number is NULL there
    rows = rows_of(db_url, "shop_2", "id, title, price, stock_count, item")
    assert [row[:4] for row in rows] == [
        ("r00000", "t0", 0, None), ("r00001", "t1", 1, None), ("r00002", "t2", 2, None),
        ("r00003", "t3", None, 3), ("r00004", "t4", None, 4)]
    item = rows[3][4]
    assert (json.loads(item) if isinstance(item, str) else item)["price"] == "free"  # type: ignore[index]


def test_only_items_go_into_the_table_unless_kinds_says_so(redis_server: RedisServer,
                                                           tmp_path: Path) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    items = add_results(client, "shop", 5)
    errors = add_results(client, "shop", 2, first=5, kind="error")
    finish_job(client, "shop")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ResultReader(redis_server.url, "shop", "every kind")  # registered before any trimming
    assert run_cli(redis_server.url, "sink", "shop", "--to", url).returncode == 0
    assert [row[0] for row in rows_of(url, "shop")] == items
    run = run_cli(redis_server.url, "sink", "shop", "--to", url, "--table", "everything",
                  "--kinds", "item,error", "--group", "every kind")
    assert run.returncode == 0, run.output
    assert [row for row in rows_of(url, "everything", "id, kind")][-2:] == [
        (errors[0], "error"), (errors[1], "error")]


@pytest.mark.parametrize(("url", "code", "message"), [
    ("ftp://host/x", 2, "unsupported destination 'ftp://host/x'"),
    ("postgresql://postgres@127.0.0.1:1/nothing", 5, "cannot reach postgresql"),
    ("mysql://root@127.0.0.1:1/nothing", 5, "cannot reach mysql"),
    ("amqp://guest:guest@127.0.0.1:1/", 5, "RabbitMQ at amqp://127.0.0.1:1/"),
])
def test_a_bad_destination_is_one_clear_error(redis_server: RedisServer, url: str, code: int,
                                              message: str) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    add_results(client, "shop", 3)
    run = run_cli(redis_server.url, "sink", "shop", "--to", url)
    assert run.returncode == code, run.output
    assert message in run.stderr and "Traceback" not in run.stderr
    # nothing acknowledged, and no group left behind to hold back the trimming
    assert client.xlen(make_job(client, "shop").results) == 3
    assert client.xinfo_groups(make_job(client, "shop").results) == []


def test_a_sink_of_an_unknown_job_is_one_clear_error(redis_server: RedisServer,
                                                     tmp_path: Path) -> None:
    run = run_cli(redis_server.url, "sink", "nope", "--to", f"sqlite:///{tmp_path}/x.db")
    assert run.returncode == 3
    assert "job 'nope' does not exist" in run.stderr


def test_amqp_has_every_result_in_the_queue_once_confirmed(redis_server: RedisServer) -> None:
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 300)
    finish_job(client, "shop")
    queue = f"clustersync.test-{uuid.uuid4().hex[:8]}"
    try:
        run = run_cli(redis_server.url, "sink", "shop", "--to", AMQP_URL, "--queue", queue,
                      "--batch", "64", "--json")
        assert run.returncode == 0, run.output
        assert json.loads(run.stdout)["written"] == 300
        got = drain_queue(AMQP_URL, queue)
        assert [message["id"] for message in got] == ids
        assert got[0]["item"] == {"title": "title 0", "price": 0.0, "n": 0}
        assert drain_queue(AMQP_URL, f"{queue}.dead") == []
    finally:
        delete_queues(AMQP_URL, queue, f"{queue}.dead")


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    """One vhost for this module's tests (rabbitmqctl takes seconds a call); each test uses
    queues of its own in it."""
    yield from rabbitmq_vhost()


def test_messages_the_broker_nacks_go_to_the_dead_letter_queue(redis_server: RedisServer,
                                                               vhost: str) -> None:
    # Given a queue the broker caps at 5 messages, refusing (nacking) publishes beyond
    rabbitmqctl("set_policy", "-p", vhost, "cap", "^capped$",
                '{"max-length": 5, "overflow": "reject-publish"}', "--apply-to", "queues")
    client = redis_server.client()
    make_job(client, "shop")
    ids = add_results(client, "shop", 20)
    finish_job(client, "shop")
    url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    # When the sink publishes 20 results to it
    run = run_cli(redis_server.url, "sink", "shop", "--to", url, "--queue", "capped", "--json")
    # Then 5 are in the queue, the 15 the broker nacked in its dead-letter queue, each once,
    # and every one was acknowledged (the broker confirmed it into one or the other)
    assert run.returncode == 0, run.output
    assert json.loads(run.stdout)["written"] == 5
    queued, dead = drain_queue(url, "capped"), drain_queue(url, "capped.dead")
    assert len(queued) == 5
    assert sorted(str(m["id"]) for m in queued + dead) == ids
    assert client.xlen(make_job(client, "shop").results) == 0


def test_a_queue_declared_with_other_arguments_is_one_clear_error(redis_server: RedisServer,
                                                                  vhost: str) -> None:
    url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    asyncio.run(declare_plain_queue(url, "plain"))
    client = redis_server.client()
    make_job(client, "shop")
    add_results(client, "shop", 3)
    run = run_cli(redis_server.url, "sink", "shop", "--to", url, "--queue", "plain")
    assert run.returncode == 5, run.output
    assert "PRECONDITION_FAILED" in run.stderr and "Traceback" not in run.stderr


async def declare_plain_queue(url: str, queue: str) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)


def test_two_sinks_of_one_group_share_the_results(redis_server: RedisServer,
                                                  tmp_path: Path) -> None:
    # Given a job whose results keep coming, and two sink processes on one group
    urls = database_url("postgresql", tmp_path)
    url = next(urls)
    try:
        client = redis_server.client()
        make_job(client, "shop")
        add_results(client, "shop", 1000)
        sinks = [cli_process(redis_server.url, "sink", "shop", "--to", url, "--batch", "50",
                             "--consumer", name, "--json") for name in ("a", "b")]
        wait_for(lambda: len(rows_of(url, "shop")) >= 1000, what="the first results")
        group = f"sink {url} shop"
        wait_for(lambda: len(client.xinfo_consumers(make_job(client, "shop").results, group))
                 == 2, what="both sinks to read")
        ids = [f"r{n:05d}" for n in range(3000)]
        add_results(client, "shop", 2000, first=1000)
        finish_job(client, "shop")
        outputs = [sink.communicate(timeout=120) for sink in sinks]
        # Then both end once the job ended, and the table has every result once
        assert [sink.returncode for sink in sinks] == [0, 0], outputs
        written = [json.loads(out)["written"] for out, _ in outputs]
        assert sum(written) == 3000 and min(written) > 0
        assert [row[0] for row in rows_of(url, "shop")] == ids
    finally:
        for sink in locals().get("sinks", []):
            sink.kill()
        urls.close()


def test_text_a_database_is_picky_about_goes_in_all_the_same(redis_server: RedisServer,
                                                             db_url: str) -> None:
    # NUL (PostgreSQL refuses it), 4-byte characters (MySQL's old utf8), 100 KiB (MySQL TEXT),
    # NaN and infinity (no JSON, no MySQL double)
    client = redis_server.client()
    make_job(client, "shop")
    add_results(client, "shop", 3, item=lambda n: {
        "title": ["a\x00b", "emoji \U0001f600", "x" * 100_000][n], "n": n,
        "price": [float("nan"), 1.5, float("inf")][n]})
    finish_job(client, "shop")
    run = run_cli(redis_server.url, "sink", "shop", "--to", db_url, "--columns")
    assert run.returncode == 0, run.output
    titles = [row[0] for row in rows_of(db_url, "shop", "title")]
    assert [row[0] for row in rows_of(db_url, "shop", "price")] == [None, 1.5, None]
    assert titles[1:] == ["emoji \U0001f600", "x" * 100_000]
    assert titles[0] in ("a\x00b", "a\ufffdb")  # PostgreSQL: NUL made U+FFFD
