"""WriteStream: the node's writes reach Redis in order, once, and a refused op is set aside."""

from __future__ import annotations

import time

from scrapy_clustersync.node.reactor_link import Channel
from scrapy_clustersync.node.write_stream import WriteStream
from scrapy_clustersync.store import Ack, DeadLetterWrite, Op, Push, Release
from scrapy_clustersync.store.write_ops import PushFlags


def pushes(count: int, start: int = 0) -> list[Op]:
    return [Push(bytes([i]) * 20, 0, f"request {i}".encode()) for i in range(start, start + count)]


def stream_of(ops: list[Op], batch_size: int = 4) -> tuple[WriteStream, None]:
    stream = WriteStream(batch_size)
    for op in ops:
        stream.add(op, time.monotonic())
    return stream, None


def pushes_waiting(stream: WriteStream) -> int:
    """Pushes not yet applied (queued or filtered) or set aside by Redis."""
    return stream.pushes_added - stream.pushes_settled


def send_all(stream: WriteStream) -> list[Op]:
    """What Redis receives when it confirms every batch."""
    sent: list[Op] = []
    while len(stream):
        _, batch = stream.batch()
        sent.extend(batch)
        stream.confirmed()
    return sent


def test_writes_go_out_in_the_order_they_were_made_in_batches_of_the_batch_size() -> None:
    ops = pushes(10)
    stream, _ = stream_of(ops)
    batches = []
    while len(stream):
        batches.append(stream.batch()[1])
        stream.confirmed()
    assert [len(batch) for batch in batches] == [4, 4, 2]
    assert [op for batch in batches for op in batch] == ops


def test_a_batch_whose_answer_was_lost_is_sent_again_as_it_was_under_the_same_call_id() -> None:
    # given a batch whose call failed (Redis may have applied it)
    stream, _ = stream_of(pushes(6))
    first = stream.batch()
    # when more writes come and the batch is sent again
    stream.add(pushes(1, start=9)[0], time.monotonic())
    # then it is the same batch with the same call id, so Redis applies it once
    assert stream.batch() == first
    assert len(stream) == 7


def test_the_redis_thread_is_woken_by_the_first_write_it_waits_for_and_by_a_full_batch() -> None:
    # given a Redis thread asleep with nothing to write (it said it waits for ops)
    channel = Channel()
    channel.ops_wanted.set()
    wakes = 0
    # when the reactor queues two full batches of writes
    for number, op in enumerate(pushes(8), 1):
        channel.put_batch([op], wake=number % 4 == 0)
        wakes += channel.wake.is_set()
        channel.wake.clear()
    # then the thread was woken by the first, and by each full batch: not once per write
    assert wakes == 3
    assert sum(len(batch) for batch in channel.drain()) == 8  # type: ignore[misc,arg-type]


def test_a_full_batch_or_an_urgent_one_is_due_at_once_a_small_one_after_its_linger() -> None:
    small, _ = stream_of(pushes(1))
    linger = small.linger_until(time.monotonic())
    assert linger is not None
    assert not small.due(linger - 0.04, urgent=False)
    assert small.due(linger - 0.04, urgent=True)  # closing, or the node starves
    assert small.due(linger + 0.001, urgent=False)
    full, _ = stream_of(pushes(4), batch_size=4)
    assert full.due(time.monotonic(), urgent=False)


def test_a_refused_op_is_found_by_halving_and_its_dead_letter_takes_its_place() -> None:
    # given a batch with one op Redis refuses
    good = pushes(7)
    bad = Push(b"\x07" * 8, 0, b"bad request")
    ops = [*good[:3], bad, *good[3:]]
    stream, _ = stream_of(ops, batch_size=8)
    sent: list[Op] = []
    set_aside: list[Op] = []
    # when Redis refuses every batch that holds it and applies the others
    while len(stream):
        _, batch = stream.batch()
        if bad in batch:
            op = stream.refused()
            if op is not None:
                set_aside.append(op)
                stream.set_aside(op, "fingerprint of 8 bytes")
            continue
        sent.extend(batch)
        stream.confirmed()
    # then only that op is set aside, its dead letter goes in its place, the rest in order
    assert set_aside == [bad]
    assert sent == [*good[:3], DeadLetterWrite("refused by Redis: fingerprint of 8 bytes",
                                               b"bad request"), *good[3:]]


def test_after_a_rollback_the_acks_of_requests_under_way_become_releases() -> None:
    stream, _ = stream_of([Ack("e1"), Ack("e2")])
    stream.batch()  # in doubt when Redis was found older: refused before any change
    assert stream.void(["e1"]) == 1
    assert send_all(stream) == [Release("e1"), Ack("e2")]


def test_a_confirmed_batch_says_which_leases_it_settled() -> None:
    stream, _ = stream_of([Push(b"\x01" * 20, 0, b""), Ack("e1"), Release("e2")])
    stream.batch()
    assert stream.confirmed() == ["e1", "e2"]


def test_what_was_not_sent_is_handed_over_whole_for_the_spool() -> None:
    stream, _ = stream_of(pushes(6))
    call_id, in_doubt = stream.batch()
    stream.release(["e9"])
    undelivered = stream.undelivered(writes_seen=12)
    assert undelivered.pending == (call_id, tuple(in_doubt))
    assert list(undelivered.ops) == [*pushes(2, start=4), Release("e9")]
    assert undelivered.writes_seen == 12 and len(undelivered) == 7


def test_pushes_wait_until_redis_applied_their_batch() -> None:
    # given three pushes and an ack, in batches of two
    stream, _ = stream_of([*pushes(3), Ack("e1")], batch_size=2)
    assert pushes_waiting(stream) == 3
    # when Redis applies the first batch
    stream.batch()
    stream.confirmed()
    # then only the pushes of the next batch still wait
    assert pushes_waiting(stream) == 1


def test_a_push_redis_refused_no_longer_waits_once_set_aside() -> None:
    # given one push, alone in its batch, that Redis refuses
    stream, _ = stream_of(pushes(1))
    stream.batch()
    # when it is found to be the refused op (its dead letter takes its place)
    refused = stream.refused()
    # then it no longer counts as a push on its way to the queue
    assert refused is not None and pushes_waiting(stream) == 0


def test_a_batch_for_a_starving_engine_ends_at_its_pushes_and_takes_the_releases_along() -> None:
    # given a node that pushed two requests, acked a third entry, pushed another, then handed
    # back two prefetched entries (releases, queued behind the later push)
    first, second, later = pushes(3)
    ops: list[Op] = [first, second, Ack("e-acked"), later, Release("e-back-1"),
                     Release("e-back-2")]
    stream, _ = stream_of(ops, batch_size=10)
    # when the engine starves for the first two pushes (the lease that answers it goes next)
    _, batch = stream.batch(pushes_until=2)
    stream.confirmed()
    # then that batch holds them, what came before the later push, and the releases, so the
    # lease sees the handed-back entries queued again and not the later push
    assert batch == [first, second, Ack("e-acked"), Release("e-back-1"), Release("e-back-2")]
    assert stream.pushes_settled == 2
    # and the later push follows, nothing lost or sent twice
    assert send_all(stream) == [later]


def test_a_batch_for_pushes_already_in_redis_is_cut_before_the_next_push() -> None:
    stream, _ = stream_of(pushes(3), batch_size=10)
    stream.batch()
    stream.confirmed()
    stream.add(pushes(1, start=7)[0], time.monotonic())
    # the engine starved for pushes Redis has: a batch that starts with a later push waits
    # for the lease (it holds only releases, here none: nothing is sent)
    assert stream.batch(pushes_until=3) == ("", [])
    assert len(stream) == 1
    # once the lease went, the later push goes out
    assert stream.batch()[1] == pushes(1, start=7)


def test_hand_backs_count_as_settled_once_redis_applied_their_releases_only() -> None:
    # given a node that pushed four requests, then handed back two prefetched entries, and
    # released a third entry for another reason
    stream, _ = stream_of(pushes(4), batch_size=4)
    stream.hand_back("e-back-1")
    stream.hand_back("e-back-2")
    stream.release(["e-other"])
    # when Redis confirmed the first batch (the pushes), then the next
    _, batch = stream.batch()
    assert stream.returns_in(batch) == 0
    stream.confirmed()
    assert stream.returns_settled == 0
    _, batch = stream.batch()
    assert stream.returns_in(batch) == 2
    stream.confirmed()
    # then both hand-backs, and only they, are counted
    assert stream.returns_settled == 2


def test_a_replacement_push_and_the_ack_after_it_go_in_one_batch_unless_a_refusal_is_sought(
) -> None:
    # given a batch size of 4 and a retry's push (flagged as a replacement) as its 4th op,
    # followed by the ack of the lease it replaces
    retry = Push(b"", 0, b"retry", PushFlags.DONT_FILTER | PushFlags.REPLACES)
    stream, _ = stream_of([*pushes(3), retry, Ack("e1"), *pushes(2, 3)])
    # when the batches are taken, then the ack goes with its replacement (Redis queues the
    # replacement only if that ack takes effect)
    _, first = stream.batch()
    assert first[-2:] == [retry, Ack("e1")]
    stream.confirmed()
    assert stream.batch()[1] == pushes(2, 3)
    # and while a refused op is looked for (smaller batches), the push may go alone
    stream, _ = stream_of([retry, Ack("e1")])
    stream.batch()
    stream.refused()
    assert stream.batch()[1] == [retry]
