"""``clustersync pause``, ``resume`` and ``stop``: steer every node of a job within a second
(store/control_state.py changes the state; node/control_follower.py on each node follows
it)."""

from __future__ import annotations

from collections.abc import Callable

import click

from ..store import JobStore
from ..store.control_state import PAUSED, RUNNING, STOPPED, STOPPING, ControlChange
from ..store.script_results import FinishedRun
from .context import CliContext, pass_cli
from .exit_codes import JobRefused
from .options import job_argument, json_option, settings_option
from .output import echo_json


def _finished(store: JobStore) -> bool:
    """The job finished and nothing was queued since (as join.lua and control.lua see it)."""
    report = store.status()
    return bool(FinishedRun.from_meta(report.meta)) and not (report.queued or report.leased)


class ControlRefused(Exception):
    """A pause, resume or stop that cannot be done as the job is; the message says why and
    what to do. ``absent``: the job does not exist (any more)."""

    def __init__(self, message: str, absent: bool = False) -> None:
        super().__init__(message)
        self.absent = absent


def change_job_control(store: JobStore, action: str) -> ControlChange:
    """Run ``action`` on the job's control state (the CLI's commands and the HTTP API's);
    ControlRefused if the job is gone, finished (nothing to pause, stop or resume) or
    stopping (it cannot be paused)."""
    change = store.set_control(action)
    finished = change.verdict == "same" and change.after == RUNNING and _finished(store)
    name = store.keys.job
    if change.verdict == "absent":
        raise ControlRefused(f"job {name!r} does not exist", absent=True)
    if change.verdict == "finished" or finished:
        raise ControlRefused(
            f"job {name!r} has finished: there is nothing to {action}. `clustersync restart "
            f"{name}` crawls it again.")
    if change.verdict == "stopping":
        raise ControlRefused(
            f"job {name!r} is {change.before}: it cannot be paused. `clustersync resume {name}` "
            "sets it running again (a later `scrapy crawl` continues its queue).")
    return change


def _change_control(cli: CliContext, job: str | None,
                    action: str) -> tuple[str, ControlChange]:
    """Run ``action`` on JOB's control state; JobNotFound (exit 3) if there is no such job,
    JobRefused (exit 1) if ``change_job_control`` refuses."""
    store = cli.existing_store(job)
    try:
        change = change_job_control(store, action)
    except ControlRefused as exc:
        if exc.absent:
            cli.not_found(store.keys.job)
        raise JobRefused(str(exc)) from None
    return store.keys.job, change


def control_command(action: str) -> Callable[[Callable[[str, ControlChange], None]],
                                            click.Command]:
    """A command that runs ``action`` on JOB's control state, then prints what happened with
    the function it decorates (or, with ``--json``, the change itself)."""
    def decorate(describe: Callable[[str, ControlChange], None]) -> click.Command:
        @job_argument
        @json_option("the change")
        @settings_option
        @pass_cli
        def run(cli: CliContext, job: str | None, as_json: bool) -> None:
            name, change = _change_control(cli, job, action)
            if as_json:
                echo_json({"job": name, "action": action, "verdict": change.verdict,
                           "before": change.before, "after": change.after})
            else:
                describe(name, change)

        return click.command(action, help=describe.__doc__)(run)

    return decorate


@control_command("pause")
def pause(name: str, change: ControlChange) -> None:
    """Pause JOB on every node within a second: no new download anywhere; requests under way
    finish, leases are kept, nodes stay open. `clustersync resume` continues it."""
    if change.verdict == "same":
        click.echo(f"job {name!r} is already paused; `clustersync resume {name}` continues it")
        return
    click.echo(f"paused job {name!r}: its nodes start no new download (within 1 s); requests "
               f"under way finish and leases are kept. `clustersync resume {name}` continues it.")


@control_command("resume")
def resume(name: str, change: ControlChange) -> None:
    """Resume a paused JOB on every node, or let a stopped JOB be crawled again: the next
    `scrapy crawl` continues its queue."""
    if change.verdict == "same":
        click.echo(f"job {name!r} is already running; nothing to resume")
    elif change.before == PAUSED:
        click.echo(f"resumed job {name!r}: its nodes crawl again (within 1 s)")
    else:
        click.echo(f"job {name!r} was {change.before} and runs again: the next `scrapy crawl` "
                   "continues its queue" + (" (nodes still closing finish closing)"
                                            if change.before == STOPPING else ""))


@control_command("stop")
def stop(name: str, change: ControlChange) -> None:
    """Stop JOB on every node: each finishes its requests under way, hands back the rest and
    closes with reason clustersync_stopped (exit code 1). The queue is kept: `clustersync
    resume` and a later `scrapy crawl` continue it."""
    if change.verdict == "same":
        click.echo(f"job {name!r} is already {change.after}")
    elif change.after == STOPPED:
        click.echo(f"stopped job {name!r} (no node was running it); its queue is kept. "
                   f"`clustersync resume {name}` lets a later `scrapy crawl` continue it.")
    else:
        click.echo(f"stopping job {name!r}: every node finishes its requests under way, hands "
                   "back the rest and closes (reason clustersync_stopped); the queue is kept. "
                   f"`clustersync resume {name}` lets a later `scrapy crawl` continue it.")
