"""``clustersync export`` and ``clustersync consume``: a job's results as JSON lines or CSV.

``export`` reads with a cursor and no group: every result the stream holds, once, in stream
order, deleting nothing. ``consume`` is a reader group: it acknowledges each batch once it is
written, a consumer that dies gets its unacknowledged results again (or another consumer of the
group does, after ``--claim-idle``), and what every group acknowledged is trimmed
(docs/results-readers.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import click

from ..results.output_formats import FORMATS, ResultWriter
from ..results.reader import DEFAULT_CLAIM_IDLE_S, ResultReader, export_batches
from ..results.record_format import KINDS
from ..store.results_store import ResultsStore
from .context import CliContext, pass_cli
from .options import job_argument, json_option, settings_option
from .output import console, echo_json
from .reader_view import print_readers, readers_dict

F = TypeVar("F", bound=Callable[..., Any])


def parse_kinds(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    """``--kinds item,error``: the kinds named, each known; a usage error otherwise."""
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise click.BadParameter(f"{', '.join(unknown) or 'none given'}: the kinds are "
                                 f"{', '.join(KINDS)} (comma-separated)")
    return kinds


def check_stream_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A stream id as Redis writes them (``<ms>-<seq>``, or ``<ms>``); a usage error else."""
    if not re.fullmatch(r"\d+(-\d+)?", value):
        raise click.BadParameter(f"{value!r} is no stream id (MS-SEQ, as `stream_id` shows)")
    return value


def kinds_option(default: str) -> Callable[[F], F]:
    """``--kinds K,K``: which kinds of result to write (the others are skipped)."""
    return click.option("--kinds", default=default, show_default=True, callback=parse_kinds,
                        help=f"Kinds of result to write, comma-separated ({', '.join(KINDS)});"
                             " the others are skipped.")


def batch_option(default: int) -> Callable[[F], F]:
    return click.option("--batch", "batch_size", type=click.IntRange(1, 10_000),
                        default=default, show_default=True,
                        help="Results read (and acknowledged) at a time.")


def follow_option(function: F) -> F:
    return click.option("--follow", is_flag=True,
                        help="Keep waiting for new results (otherwise: stop once the job has "
                             "ended and every result is written).")(function)


@contextlib.contextmanager
def output_closed_ends_quietly() -> Iterator[None]:
    """A reader of the output that went away (``| head``) ends the command with exit 1 and one
    line, not a traceback; the batch being written is not acknowledged."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail too
        raise click.ClickException("the output was closed; what was not written is not "
                                   "acknowledged") from None


def group_reader(cli: CliContext, job: str | None, group: str, consumer: str | None,
                 claim_idle_s: float, kinds: tuple[str, ...]) -> ResultReader:
    """The reader group ``group`` of the job JOB names (JobNotFound if there is none)."""
    store = cli.existing_store(job)
    return ResultReader(None, store.keys.job, group, consumer, client=cli.client(),
                        claim_idle_s=claim_idle_s, kinds=kinds)


def group_options(function: F) -> F:
    """``--consumer`` and ``--claim-idle``, the options of every reader of a group."""
    function = click.option(
        "--claim-idle", "claim_idle_s", type=click.FloatRange(min=0),
        default=DEFAULT_CLAIM_IDLE_S, show_default=True, metavar="SECONDS",
        help="Take over results another consumer of the group has held unacknowledged for "
             "this long (it died).")(function)
    return click.option(
        "--consumer", metavar="NAME",
        help="This consumer's name in the group (default: <host>-<pid>); a consumer started "
             "again under its name gets its unacknowledged results back at once.")(function)


@click.command()
@job_argument
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl",
              show_default=True, help="JSON lines, or CSV with a header.")
@click.option("--output", "-o", type=click.File("w", encoding="utf-8", lazy=True),
              default="-", help="File to write (default: stdout).")
@follow_option
@click.option("--since", metavar="STREAM_ID", default="0", callback=check_stream_id,
              help="Only results after this stream id (the `stream_id` of the last result "
                   "written before).")
@kinds_option(",".join(KINDS))
@settings_option
@pass_cli
def export(cli: CliContext, job: str | None, fmt: str, output: IO[str], follow: bool,
           since: str, kinds: tuple[str, ...]) -> None:
    """Write every result of JOB once, in stream order, as JSON lines or CSV; reads without a
    reader group and deletes nothing (--follow: until the job has ended)."""
    store = cli.existing_store(job)
    results = ResultsStore(cli.client(), store.keys)
    output.write("")  # the file exists once the command ran, results or not
    writer = ResultWriter(output, fmt)
    with output_closed_ends_quietly():
        for batch in export_batches(results, since=since, follow=follow, kinds=kinds):
            writer.write(batch)


@click.command()
@job_argument
@click.option("--group", required=True, metavar="NAME",
              help="The reader group: each group gets every result once acknowledged.")
@group_options
@batch_option(100)
@follow_option
@kinds_option(",".join(KINDS))
@settings_option
@pass_cli
def consume(cli: CliContext, job: str | None, group: str, consumer: str | None,
            claim_idle_s: float, batch_size: int, follow: bool,
            kinds: tuple[str, ...]) -> None:
    """Print the results of JOB as JSON lines as reader group NAME, acknowledging each batch
    once written; stops once the job has ended and the group has acknowledged every result
    (--follow: never)."""
    reader = group_reader(cli, job, group, consumer, claim_idle_s, kinds)
    writer = ResultWriter(sys.stdout, "jsonl")
    with output_closed_ends_quietly():
        for batch in reader.batches(count=batch_size, follow=follow):
            writer.write(batch)
            reader.ack(batch)


@click.command()
@job_argument
@click.option("--add", "to_add", metavar="NAME", multiple=True,
              help="Register reader group NAME now, at the stream's start: results are kept "
                   "for it from now on, before it first reads (may be repeated).")
@click.option("--delete", "to_delete", metavar="NAME", multiple=True,
              help="Delete reader group NAME (a reader given up: it holds back trimming, and "
                   "a full stream holds back the crawl); may be repeated.")
@json_option("the reader groups")
@settings_option
@pass_cli
def readers(cli: CliContext, job: str | None, to_add: tuple[str, ...],
            to_delete: tuple[str, ...], as_json: bool) -> None:
    """List the reader groups of JOB's results with how far behind each is; --add registers a
    group ahead of its first read, --delete removes one for good."""
    store = ResultsStore(cli.client(), cli.existing_store(job).keys)
    done = {"added": [name for name in to_add if store.register(name)],
            "deleted": [name for name in to_delete if store.unregister(name)]}
    trimmed = store.trim() if to_delete else 0
    view = readers_dict(store.groups(), store.length())
    if as_json:
        echo_json({**view, **done, "trimmed": trimmed})
        return
    for name in done["added"]:
        click.echo(f"registered reader group {name!r}")
    for name in done["deleted"]:
        click.echo(f"deleted reader group {name!r}")
    if to_delete:
        click.echo(f"trimmed {trimmed:,} results every remaining group has acknowledged")
    if not view["groups"]:
        click.echo(f"no reader groups; the stream holds {view['held']:,} results")
    print_readers(view, console())
