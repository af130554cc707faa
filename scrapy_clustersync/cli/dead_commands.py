"""``clustersync dead``: a job's dead letters, and ``--requeue`` to put them back into the queue
once their cause is fixed (store/dead_requeue.py moves each exactly once)."""

from __future__ import annotations

import base64
import re
from typing import Any

import click

from ..store import DeadLetter
from ..store.dead_requeue import RequeueResult, requeue_dead_letters
from .context import CliContext, pass_cli
from .options import json_option, limit_option, settings_option
from .output import echo_json, when_iso

#: an entry id (flush.lua entry_id): kind, 16 hex digits of order, 8 characters of a call id
ENTRY_ID = re.compile(r"^[01][0-9a-f]{16}[0-9a-f]{8}$")


def dead_letter_dict(letter: DeadLetter) -> dict[str, Any]:
    """A dead letter as ``dead --json`` prints it (the entry, binary, in base64)."""
    return {"entry_id": letter.entry_id, "node": letter.node, "at_ms": letter.at_ms,
            "at": when_iso(letter.at_ms), "reason": letter.reason,
            "refused_write": letter.refused_write,
            "entry_base64": base64.b64encode(letter.entry).decode("ascii")}


@click.command()
@click.argument("args", nargs=-1, metavar="[JOB] [ID]...")
@click.option("--requeue", is_flag=True,
              help="Put the dead letters named by ID (or --all) back into the queue, each once.")
@click.option("--all", "every", is_flag=True, help="With --requeue: every dead letter.")
@limit_option("dead letters")
@json_option("the dead letters (or what --requeue did)")
@settings_option
@pass_cli
def dead(cli: CliContext, args: tuple[str, ...], requeue: bool, every: bool, limit: int,
         as_json: bool) -> None:
    """JOB's dead letters: queue entries no node could decode or crawl, with the reason.

    With --requeue ID... (or --all), once the cause is fixed: each letter named leaves the dead
    list and its request goes back into the queue, in one atomic step, so running it again
    changes nothing more.
    """
    job, ids = job_and_ids(args)
    if not requeue:
        if ids or every:
            raise click.UsageError("entry ids and --all go with --requeue")
        _list(cli, job, limit, as_json)
        return
    if every == bool(ids):
        raise click.UsageError("--requeue needs the ids of the dead letters to put back, or "
                               "--all (`clustersync dead JOB` lists them)")
    store = cli.existing_store(job)
    result = requeue_dead_letters(store, None if every else ids)
    if as_json:
        echo_json({"job": store.keys.job, **result.to_dict()})
    else:
        click.echo(requeue_summary(store.keys.job, result))


def job_and_ids(args: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """JOB and the entry ids of ``dead``'s arguments: the first is the job unless it has the
    shape of an entry id, so that JOB may be left out."""
    if args and not ENTRY_ID.match(args[0]):
        return args[0], args[1:]
    return None, args


def _list(cli: CliContext, job: str | None, limit: int, as_json: bool) -> None:
    cli.reading = True  # only reads: from CLUSTERSYNC_READ_URL's Redis if one is given
    letters = cli.existing_store(job).dead_letters(limit)
    if as_json:
        echo_json([dead_letter_dict(letter) for letter in letters])
        return
    for letter in letters:
        click.echo(f"{letter.entry_id}  node={letter.node}  reason={letter.reason}  "
                   f"entry={letter.entry[:80]!r}")
    click.echo(f"{len(letters)} dead letter(s) shown")


def requeue_summary(job: str, result: RequeueResult) -> str:
    """What ``dead --requeue`` did, in one line for people."""
    parts = [f"requeued {result.requeued} dead letter(s) of job {job!r}"]
    if result.gone or result.not_found:
        parts.append(f"{result.gone + len(result.not_found)} no longer dead (requeued before?)")
    if result.already_queued:
        parts.append(f"{result.already_queued} whose request was queued already")
    if result.refused_writes:
        parts.append(f"{result.refused_writes} refused write(s) left: they hold no request")
    if result.without_request:
        parts.append(f"{result.without_request} left: their request was gone when they died")
    return "; ".join(parts)
