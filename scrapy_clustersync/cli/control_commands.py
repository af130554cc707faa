"""``clustersync pause``, ``resume`` and ``stop``: steer every node of a job within a second
(store/control.py changes the state; control.py on each node follows it)."""

from __future__ import annotations

import click

from ..store import JobStore, StoreError
from ..store.control_state import PAUSED, RUNNING, STOPPED, STOPPING, ControlChange
from ..store.script_results import FinishedRun
from .context import _existing_store, _fail, _not_found


def _finished(store: JobStore) -> bool:
    """The job finished and nothing was queued since (as join.lua and control.lua see it)."""
    report = store.status()
    return bool(FinishedRun.from_meta(report.meta)) and not (report.queued or report.leased)


def _change_control(ctx: click.Context, job: str | None,
                    action: str) -> tuple[str, ControlChange]:
    """Run ``action`` on JOB's control state; JobNotFound (exit 3) if there is no such job,
    a clear error (exit 1) if the job finished (nothing to pause, stop or resume)."""
    store = _existing_store(ctx, job)
    try:
        change = store.set_control(action)
        finished = change.verdict == "same" and change.after == RUNNING and _finished(store)
    except StoreError as exc:
        _fail(exc, ctx)
    name = store.keys.job
    if change.verdict == "absent":
        _not_found(ctx, name)
    if change.verdict == "finished" or finished:
        raise click.ClickException(
            f"job {name!r} has finished: there is nothing to {action}. `clustersync restart "
            f"{name}` crawls it again.")
    if change.verdict == "stopping":
        raise click.ClickException(
            f"job {name!r} is {change.before}: it cannot be paused. `clustersync resume {name}` "
            "sets it running again (a later `scrapy crawl` continues its queue).")
    return name, change


@click.command()
@click.argument("job", required=False)
@click.pass_context
def pause(ctx: click.Context, job: str | None) -> None:
    """Pause JOB on every node within a second: no new download anywhere; requests under way
    finish, leases are kept, nodes stay open. `clustersync resume` continues it."""
    name, change = _change_control(ctx, job, "pause")
    if change.verdict == "same":
        click.echo(f"job {name!r} is already paused; `clustersync resume {name}` continues it")
        return
    click.echo(f"paused job {name!r}: its nodes start no new download (within 1 s); requests "
               f"under way finish and leases are kept. `clustersync resume {name}` continues it.")


@click.command()
@click.argument("job", required=False)
@click.pass_context
def resume(ctx: click.Context, job: str | None) -> None:
    """Resume a paused JOB on every node, or let a stopped JOB be crawled again: the next
    `scrapy crawl` continues its queue."""
    name, change = _change_control(ctx, job, "resume")
    if change.verdict == "same":
        click.echo(f"job {name!r} is already running; nothing to resume")
    elif change.before == PAUSED:
        click.echo(f"resumed job {name!r}: its nodes crawl again (within 1 s)")
    else:
        click.echo(f"job {name!r} was {change.before} and runs again: the next `scrapy crawl` "
                   "continues its queue" + (" (nodes still closing finish closing)"
                                            if change.before == STOPPING else ""))


@click.command()
@click.argument("job", required=False)
@click.pass_context
def stop(ctx: click.Context, job: str | None) -> None:
    """Stop JOB on every node: each finishes its requests under way, hands back the rest and
    closes with reason clustersync_stopped (exit code 1). The queue is kept: `clustersync
    resume` and a later `scrapy crawl` continue it."""
    name, change = _change_control(ctx, job, "stop")
    if change.verdict == "same":
        click.echo(f"job {name!r} is already {change.after}")
    elif change.after == STOPPED:
        click.echo(f"stopped job {name!r} (no node was running it); its queue is kept. "
                   f"`clustersync resume {name}` lets a later `scrapy crawl` continue it.")
    else:
        click.echo(f"stopping job {name!r}: every node finishes its requests under way, hands "
                   "back the rest and closes (reason clustersync_stopped); the queue is kept. "
                   f"`clustersync resume {name}` lets a later `scrapy crawl` continue it.")
