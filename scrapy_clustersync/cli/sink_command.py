"""``clustersync sink JOB --to URL``: a job's results into a SQL table (PostgreSQL,
MySQL/MariaDB, SQLite) or a RabbitMQ queue, as a reader group: each batch is written for good
(committed, or confirmed by the broker) before it is acknowledged, so a sink killed at any
point and started again leaves every result in the destination exactly once (a table) or at
least once (a queue: the result id is each message's ``message_id``). Several sinks of one
group share the work. docs/results-readers.md.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol, TypeVar

import click

from ..config import redact_url
from ..results.record_format import Result
from ..sinks.destination_errors import DestinationFailed, DestinationUnusable
from .context import CliContext, pass_cli
from .exit_codes import DestinationError
from .options import job_argument, json_option, settings_option
from .output import echo_json
from .result_commands import batch_option, follow_option, group_options, group_reader, kinds_option

T = TypeVar("T")
SQL_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb", "sqlite")
AMQP_SCHEMES = ("amqp", "amqps")


class Sink(Protocol):
    """A destination: ``write`` has the results for good once it returns (committed,
    confirmed), or raises DestinationFailed."""

    def write(self, results: list[Result]) -> int: ...

    def close(self) -> None: ...


def scheme_of(url: str) -> str:
    """The URL's scheme without its driver (``postgresql+psycopg`` -> ``postgresql``); a
    usage error if it is none a sink writes to."""
    scheme = url.partition("://")[0].partition("+")[0].lower()
    if "://" not in url or scheme not in SQL_SCHEMES + AMQP_SCHEMES:
        raise click.BadParameter(
            f"unsupported destination {redact_url(url)!r}: use postgresql://, mysql:// (or "
            "mariadb://), sqlite:///FILE or amqp://", param_hint="'--to'")
    return scheme


def open_sink(url: str, job: str, table: str | None, queue: str | None,
              item_columns: bool) -> Sink:
    """The sink ``url`` names (the import of its driver only then: the extra is optional)."""
    if scheme_of(url) in AMQP_SCHEMES:
        from ..sinks.amqp_sink import AmqpSink
        return AmqpSink(url, queue or f"clustersync.{job}")
    from ..sinks.sql_sink import SqlSink, table_name
    return SqlSink(url, table or table_name(job), item_columns)


def default_group(url: str, table: str | None, queue: str | None, job: str) -> str:
    """``sink <destination without password> <table or queue>``: one group per destination,
    so that two sinks to different places each get every result."""
    return f"sink {redact_url(url)} {table or queue or job}"


@click.command()
@job_argument
@click.option("--to", "url", required=True, metavar="URL",
              help="postgresql://..., mysql://... (or mariadb://...), sqlite:///FILE, or "
                   "amqp://user:password@host:5672/vhost.")
@click.option("--table", metavar="NAME",
              help="SQL: the table (default: the job's name, letters, digits and _ only).")
@click.option("--queue", metavar="NAME", help="AMQP: the queue (default: clustersync.JOB).")
@click.option("--columns", "item_columns", is_flag=True,
              help="SQL: a column per top-level item field as well, added as new fields come.")
@click.option("--group", metavar="NAME",
              help="The reader group (default: one per destination and table or queue).")
@group_options
@batch_option(500)
@follow_option
@kinds_option("item")
@json_option("what was written")
@settings_option
@pass_cli
def sink(cli: CliContext, job: str | None, url: str, table: str | None, queue: str | None,
         item_columns: bool, group: str | None, consumer: str | None, claim_idle_s: float,
         batch_size: int, follow: bool, kinds: tuple[str, ...], as_json: bool) -> None:
    """Write the results of JOB into a SQL table or a RabbitMQ queue, acknowledging each batch
    once the destination has it; stops once the job has ended and every result is written
    (--follow: never)."""
    scheme_of(url)
    name = cli.existing_store(job).keys.job
    group = group or default_group(url, table, queue, name)
    # the destination first: a group registered for a sink that cannot run would hold back
    # the trimming (and, once the stream is full, the crawl) for nothing
    try:
        destination = open_sink(url, name, table, queue, item_columns)
    except DestinationUnusable as exc:
        raise click.BadParameter(str(exc), param_hint="'--to'") from None
    except DestinationFailed as exc:
        raise DestinationError(str(exc)) from None
    try:
        reader = group_reader(cli, name, group, consumer, claim_idle_s, kinds)
    except BaseException:
        destination.close()
        raise
    summary = run_sink(reader, destination, batch_size, follow)
    if as_json:
        echo_json({"job": name, "group": group, **summary})
    else:
        click.echo(f"{summary['written']:,} results written ({summary['batches']} batches) "
                   f"to {redact_url(url)}", err=True)


def run_sink(reader: Any, destination: Sink, batch_size: int, follow: bool) -> dict[str, int]:
    """Write batch after batch, each acknowledged once written (in a thread of its own while
    the next one is written: see AckBehind); DestinationError (exit 5) if the destination
    fails (that batch stays unacknowledged: it comes again). Returns once every batch written
    is acknowledged, or raises the error of an acknowledgement."""
    written = batches = 0
    acks = AckBehind(reader.ack)
    try:
        for batch in read_ahead(reader.batches(count=batch_size, follow=follow)):
            written += destination.write(batch)
            acks.put(batch)
            batches += 1
        acks.close()
    except DestinationFailed as exc:
        raise DestinationError(str(exc)) from None
    finally:
        acks.close(raise_error=False)  # what was written is acknowledged even so
        destination.close()
    return {"written": written, "batches": batches}


#: batches read ahead of the one being written, at most
READ_AHEAD = 2
_DONE = object()


def read_ahead(batches: Iterator[T], depth: int = READ_AHEAD) -> Generator[T, None, None]:
    """``batches``, read in a thread of their own up to ``depth`` ahead: the next batch is
    read from Redis and decoded while the one before is written (the acknowledgements stay in
    the caller's thread, each after its write). An exception of the reading is raised here,
    after the batches read before it. Once the caller stops, the reading stops at its next
    batch (what it read ahead is not acknowledged: it comes again)."""
    ahead = _ReadAhead(depth)
    threading.Thread(target=ahead.read, args=(batches,), name="clustersync-sink-read",
                     daemon=True).start()
    try:
        while True:
            batch, error = ahead.box.get()
            if batch is _DONE:
                if error is not None:
                    raise error
                return
            yield batch
    finally:
        ahead.stop.set()


class _ReadAhead:
    """The reading thread's side of ``read_ahead``: a bounded box, and a stop flag."""

    def __init__(self, depth: int) -> None:
        self.box: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()

    def read(self, batches: Iterator[Any]) -> None:
        try:
            for batch in batches:
                if not self._put((batch, None)):
                    return
        except BaseException as exc:  # handed to the caller's thread, raised there
            self._put((_DONE, exc))
            return
        self._put((_DONE, None))

    def _put(self, entry: tuple[Any, BaseException | None]) -> bool:
        """Put ``entry`` in the box once there is room; False if the caller stopped first."""
        while not self.stop.is_set():
            try:
                self.box.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


class AckBehind:
    """Acknowledgements sent in a thread of their own, in the order put, so that the next
    batch is written meanwhile: a batch is put once it is written for good, and acknowledged
    only then (a sink killed before its acknowledgement has the batch again, and rewrites the
    same rows). At most ``depth`` wait. The error of an acknowledgement is raised by the next
    ``put`` or by ``close``; the acknowledgements after it are not sent."""

    def __init__(self, ack: Callable[[Any], Any], depth: int = READ_AHEAD) -> None:
        self._box: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._send, args=(ack,),
                                        name="clustersync-sink-ack", daemon=True)
        self._thread.start()

    def put(self, batch: Any) -> None:
        self._raise()
        self._box.put(batch)

    def close(self, raise_error: bool = True) -> None:
        """Wait until every batch put is acknowledged (or an acknowledgement failed); then
        raise its error, with ``raise_error``."""
        if not self._closed:
            self._closed = True
            self._box.put(_DONE)
            self._thread.join()
        if raise_error:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _send(self, ack: Callable[[Any], Any]) -> None:
        while (batch := self._box.get()) is not _DONE:
            if self._error is not None:
                continue  # after a failed one, none: the sink stops with its error
            try:
                ack(batch)
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._error = exc
