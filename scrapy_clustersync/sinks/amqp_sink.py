"""``clustersync sink --to amqp://``: each result published to a durable RabbitMQ queue, with
publisher confirms (aio-pika, on an event loop of the sink's own).

A message is the result's JSON line (results/output_formats.py), persistent, with the result
id as ``message_id`` (a consumer deduplicates on it: a batch delivered again after its sink
died between the broker's confirm and the acknowledgement is published again). A batch's
messages are published together and their confirms awaited together (one by one, a
persistent message waits for the broker's disk: about 160 a second). A message the broker
returns (no queue to route it to) or nacks goes to the dead-letter queue ``<queue>.dead``
instead, with header ``x-clustersync-reason``; only when the broker confirmed every message
of a batch, into one queue or the other, is the batch acknowledged. The queue is declared with
``x-dead-letter-exchange`` "" and ``x-dead-letter-routing-key`` ``<queue>.dead``, so that the
messages its consumers reject (or that expire) land there too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..results.output_formats import json_line
from ..results.record_format import Result
from .destination_errors import DestinationFailed, DestinationUnusable

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10.0


def dead_letter_queue(queue: str) -> str:
    return f"{queue}.dead"


def queue_arguments(queue: str) -> dict[str, Any]:
    """The arguments the sink declares its queue with (a queue declared before with others
    is refused by the broker: the sink says so)."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letter_queue(queue)}


def _aio_pika() -> Any:
    try:
        import aio_pika
    except ModuleNotFoundError:
        raise DestinationUnusable(
            "amqp:// needs aio-pika: pip install 'scrapy-clustersync[sinks]'") from None
    return aio_pika


class AmqpSink:
    """Publishes results to ``queue`` on the broker at ``url`` (see the module); raises
    DestinationFailed when the broker cannot be reached or refuses a message even to the
    dead-letter queue."""

    def __init__(self, url: str, queue: str) -> None:
        self.aio_pika = _aio_pika()
        self.queue = queue
        self.dead_letters = 0
        self._loop = asyncio.new_event_loop()
        self._where = _safe(url)
        self.connection: Any = None
        try:
            self._run(self._open(url), f"RabbitMQ at {self._where}")
        except DestinationFailed:
            self.close()
            raise

    def write(self, results: list[Result]) -> int:
        """Publish ``results``; answers how many the broker confirmed into the queue (the
        others went to the dead-letter queue). Once it returned, the broker has them all."""
        return self._run(self._publish_all(results), f"RabbitMQ at {self._where} refused")

    def close(self) -> None:
        """Close the connection and the sink's event loop, whatever state they are in."""
        if self._loop.is_closed():
            return
        self._loop.run_until_complete(self._shutdown())
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _shutdown(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.connection.close(), CONNECT_TIMEOUT_S)
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _run(self, work: Coroutine[Any, Any, T], what: str) -> T:
        errors = (self.aio_pika.exceptions.AMQPException, OSError, asyncio.TimeoutError)
        try:
            return self._loop.run_until_complete(work)
        except errors as exc:
            raise DestinationFailed(f"{what}: {_why(exc)}") from None

    async def _open(self, url: str) -> None:
        self.connection = await self.aio_pika.connect(url, timeout=CONNECT_TIMEOUT_S)
        self.channel = await self.connection.channel(publisher_confirms=True,
                                                     on_return_raises=True)
        await self.channel.declare_queue(dead_letter_queue(self.queue), durable=True)
        await self.channel.declare_queue(self.queue, durable=True,
                                         arguments=queue_arguments(self.queue))

    async def _publish_all(self, results: list[Result]) -> int:
        return sum(await asyncio.gather(*(self._publish(result) for result in results)))

    async def _publish(self, result: Result) -> int:
        body = json_line(result).encode()
        exchange = self.channel.default_exchange
        try:
            await exchange.publish(self._message(result, body), routing_key=self.queue,
                                   mandatory=True)
            return 1
        except self.aio_pika.exceptions.DeliveryError as exc:
            reason = ("returned" if isinstance(exc, self.aio_pika.exceptions.PublishError)
                      else "nacked")
        await exchange.publish(self._message(result, body, reason),
                               routing_key=dead_letter_queue(self.queue), mandatory=True)
        self.dead_letters += 1
        return 0

    def _message(self, result: Result, body: bytes, reason: str | None = None) -> Any:
        headers = {"stream_id": result.stream_id, "kind": result.kind}
        if reason:
            headers["x-clustersync-reason"] = reason
        return self.aio_pika.Message(
            body, delivery_mode=self.aio_pika.DeliveryMode.PERSISTENT,
            content_type="application/json", message_id=result.id, headers=headers)


def _safe(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
