"""read_ahead: the sink's batches read in a thread while one is written, in order, with the
reading's error raised where they are used; AckBehind: their acknowledgements sent in a thread
while the next one is written, in order, all of them sent once it is closed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from scrapy_clustersync.cli.sink_command import AckBehind, read_ahead


def test_every_batch_comes_once_in_order() -> None:
    assert list(read_ahead(iter(range(50)), depth=2)) == list(range(50))


def test_an_error_of_the_reading_is_raised_after_the_batches_read_before_it() -> None:
    def batches() -> Iterator[int]:
        yield 1
        yield 2
        raise ConnectionError("redis went away")

    got = []
    with pytest.raises(ConnectionError, match="redis went away"):
        for batch in read_ahead(batches()):
            got.append(batch)
    assert got == [1, 2]


def test_the_reading_stops_once_the_caller_stops() -> None:
    # given a reading that would go on for ever
    read: list[int] = []
    stopped = threading.Event()

    def batches() -> Iterator[int]:
        try:
            n = 0
            while True:
                read.append(n)
                yield n
                n += 1
        finally:
            stopped.set()

    # when the caller takes one batch and stops
    ahead = read_ahead(batches(), depth=2)
    assert next(ahead) == 0
    ahead.close()
    # then the reading ends, having read at most what fits ahead
    assert stopped.wait(5)
    assert len(read) <= 1 + 2 + 1


def test_every_batch_put_is_acknowledged_in_order_once_closed() -> None:
    acked: list[int] = []

    def slow_ack(batch: int) -> None:
        time.sleep(0.001)
        acked.append(batch)

    acks = AckBehind(slow_ack, depth=2)
    for batch in range(20):
        acks.put(batch)
    acks.close()
    assert acked == list(range(20))


def test_a_failed_acknowledgement_is_raised_and_none_after_it_is_sent() -> None:
    # given acknowledgements of which the third fails
    acked: list[int] = []

    def ack(batch: int) -> None:
        if batch == 2:
            raise ConnectionError("redis went away")
        acked.append(batch)

    acks = AckBehind(ack, depth=1)
    # when batches keep being put, then closed
    with pytest.raises(ConnectionError, match="redis went away"):
        for batch in range(10):
            acks.put(batch)
        acks.close()
    acks.close(raise_error=False)
    # then the error reached the caller and nothing after the failed one was acknowledged
    assert acked == [0, 1]
