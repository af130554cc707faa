"""``clustersync sink --to amqp://``: each result published to a durable RabbitMQ queue, with
publisher confirms (pika).

A message is the result's JSON line (results/output_formats.py), persistent, with the result
id as ``message_id`` (a consumer deduplicates on it: a batch delivered again after its sink
died between the broker's confirm and the acknowledgement is published again). A message the
broker returns (no queue to route it to) or nacks goes to the dead-letter queue
``<queue>.dead`` instead, with header ``x-clustersync-reason``; only when the broker confirmed
every message of a batch, into one queue or the other, is the batch acknowledged. The queue is
declared with ``x-dead-letter-exchange`` "" and ``x-dead-letter-routing-key`` ``<queue>.dead``,
so that the messages its consumers reject (or that expire) land there too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..results.output_formats import json_line
from ..results.record_format import Result
from .errors import DestinationFailed, DestinationUnusable


def dead_letter_queue(queue: str) -> str:
    return f"{queue}.dead"


def queue_arguments(queue: str) -> dict[str, str]:
    """The arguments the sink declares its queue with (a queue declared before with others
    is refused by the broker: the sink says so)."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letter_queue(queue)}


def _pika() -> Any:
    try:
        import pika
    except ModuleNotFoundError:
        raise DestinationUnusable(
            "amqp:// needs pika: pip install 'scrapy-clustersync[sinks]'") from None
    return pika


class AmqpSink:
    """Publishes results to ``queue`` on the broker at ``url`` (see the module); raises
    DestinationFailed when the broker cannot be reached or refuses a message even to the
    dead-letter queue."""

    def __init__(self, url: str, queue: str) -> None:
        self.pika = _pika()
        self.queue = queue
        self.dead_letters = 0
        try:
            self.connection = self.pika.BlockingConnection(self.pika.URLParameters(url))
            self.channel = self.connection.channel()
            self.channel.confirm_delivery()
            self.channel.queue_declare(dead_letter_queue(queue), durable=True)
            self.channel.queue_declare(queue, durable=True, arguments=queue_arguments(queue))
        except self.pika.exceptions.AMQPError as exc:
            raise DestinationFailed(f"RabbitMQ at {_safe(url)}: {_why(exc)}") from None

    def write(self, results: list[Result]) -> int:
        """Publish ``results``; answers how many the broker confirmed into the queue (the
        others went to the dead-letter queue). Once it returned, the broker has them all."""
        published = 0
        try:
            for result in results:
                published += self._publish(result)
        except self.pika.exceptions.AMQPError as exc:
            raise DestinationFailed(f"RabbitMQ refused a message: {_why(exc)}") from None
        return published

    def _publish(self, result: Result) -> int:
        body = json_line(result).encode()
        try:
            self.channel.basic_publish("", self.queue, body, self._properties(result),
                                       mandatory=True)
            return 1
        except (self.pika.exceptions.UnroutableError, self.pika.exceptions.NackError) as exc:
            reason = "returned" if isinstance(exc, self.pika.exceptions.UnroutableError) \
                else "nacked"
            self.channel.basic_publish("", dead_letter_queue(self.queue), body,
                                       self._properties(result, reason), mandatory=True)
            self.dead_letters += 1
            return 0

    def _properties(self, result: Result, reason: str | None = None) -> Any:
        headers = {"stream_id": result.stream_id, "kind": result.kind}
        if reason:
            headers["x-clustersync-reason"] = reason
        return self.pika.BasicProperties(
            delivery_mode=2, content_type="application/json", message_id=result.id,
            headers=headers)

    def close(self) -> None:
        with contextlib.suppress(self.pika.exceptions.AMQPError):
            self.connection.close()


def _safe(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


def _why(exc: BaseException) -> str:
    return " ".join(repr(exc).split()) if not str(exc) else " ".join(str(exc).split())
