"""RoundTrip: calls of one node sent to Redis together, so that they cost one round trip.

A node pays a round trip for each call it makes, and far from Redis (another region: 50 ms
each way) that is what its Redis thread spends its time on: a turn of its loop has a batch of
writes to flush, a lease to make, a heartbeat to send and the job's control state to read, each
a round trip, and a lease that waits behind the three others comes that much later. Sent in one
pipeline (not a transaction: each script is still its own atomic step), Redis runs the calls
one after the other, in the order they were added, and answers them all at once: a flush added
before a lease is applied before that lease is made.

Each call's answer (``Answer.result``) is what the call alone would have answered, or raises
what it would have raised: one call's error does not touch the others, which Redis ran all the
same. A call Redis could not run as sent (its script no longer cached after a restart, a Bloom
layer the batch needs not allocated yet) is sent again on its own when its answer is asked for,
by the store's method for it; ``Answer.late`` says so: it ran after the calls that followed it.
A round trip redis-py cannot encode (an op with a value of a type it does not send) is sent
call by call in the same way, so that the error is the call's own. A lost connection fails the
whole round trip (``send`` raises StoreUnavailable): any of its calls may have run, and each is
safe to send again (call ids).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import redis

from .errors import StoreError, translate_errors

T = TypeVar("T")

#: a pipeline's reply for a call: Redis's, or why the call must be sent again on its own
_NOT_SENT = object()
_SEND_ALONE = object()


def translated(client: redis.Redis, error: redis.RedisError) -> StoreError:
    """The store's error for a redis-py error found in a pipeline's replies."""
    try:
        with translate_errors(client):
            raise error
    except StoreError as exc:
        return exc
    raise AssertionError("translate_errors lets every RedisError through as a StoreError")


class Answer(Generic[T]):
    """One call's answer in a round trip (see the module doc)."""

    def __init__(self, client: redis.Redis, parse: Callable[[Any], T], alone: Callable[[], T],
                 again_if: Callable[[StoreError], bool] = lambda error: False,
                 failed: Callable[[StoreError], None] = lambda error: None) -> None:
        """``parse`` reads Redis's reply; ``alone`` sends the call on its own, when the round
        trip could not be encoded, its script was not cached or ``again_if`` the error it met
        says so; ``failed`` sees an error before it is raised."""
        self._client = client
        self._parse = parse
        self._alone = alone
        self._again_if = again_if
        self._failed = failed
        self._reply: Any = _NOT_SENT
        #: the call was sent again on its own after the round trip: it ran after the calls
        #: that followed it in the round trip (and after their answers were asked for)
        self.late = False

    def replied(self, reply: Any) -> None:
        self._reply = reply

    def result(self) -> T:
        """The call's answer, or its error (a StoreError) raised; ask for it once."""
        reply = self._reply
        if reply is _NOT_SENT:
            raise RuntimeError("the round trip was not sent")
        if reply is _SEND_ALONE or isinstance(reply, redis.exceptions.NoScriptError):
            return self._again()
        if isinstance(reply, redis.RedisError):
            error = translated(self._client, reply)
            if self._again_if(error):
                return self._again()
            self._failed(error)
            raise error
        return self._parse(reply)

    def _again(self) -> T:
        self.late = True
        return self._alone()


class RoundTrip:
    """Calls queued (``add``) and sent together (``send``); see the module doc."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._calls: list[tuple[Callable[[redis.client.Pipeline], object], Answer[Any],
                                Callable[[], None]]] = []

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, queue: Callable[[redis.client.Pipeline], object], answer: Answer[T],
            ran: Callable[[], None] = lambda: None) -> Answer[T]:
        """Queue a call: ``queue`` adds its command to the pipeline; ``answer`` gets its reply;
        ``ran`` is called if Redis ran it (a script's text is cached there then)."""
        self._calls.append((queue, answer, ran))
        return answer

    def send(self) -> None:
        """Send every call queued, in one round trip; their answers are then ready."""
        if not self._calls:
            return
        pipe = self.client.pipeline(transaction=False)
        for queue, _, _ in self._calls:
            queue(pipe)
        with translate_errors(self.client):
            try:
                replies = pipe.execute(raise_on_error=False)
            except (redis.DataError, UnicodeEncodeError):  # nothing was sent: each on its own
                replies = [_SEND_ALONE] * len(self._calls)
        for (_, answer, ran), reply in zip(self._calls, replies, strict=True):
            if reply is not _SEND_ALONE and not isinstance(reply, redis.exceptions.NoScriptError):
                ran()
            answer.replied(reply)
