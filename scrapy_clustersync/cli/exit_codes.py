"""The exit codes of ``clustersync``, and the errors that carry them.

One code per kind of outcome, so that a script or a cron job can tell "look at the job" from
"fix the command" from "Redis is away": 0 done; 1 needs a person; 2 usage or bad input
(click's own code); 3 no such job; 4 Redis failed; 5 a sink's destination failed.
"""

from __future__ import annotations

from typing import NoReturn

import click

#: done; nothing needs a person
OK = 0
#: the job needs a person: ``check`` or ``status --check`` found something, or what was asked
#: cannot be done as things are (pausing a finished job, restarting one still crawling, a task
#: the job does not have)
NEEDS_A_PERSON = 1
#: a bad option, argument, URL, job name or setting, or no Redis URL or JOB found (click's
#: own code for usage errors)
USAGE = 2
#: the job named does not exist on that Redis
NO_SUCH_JOB = 3
#: Redis could not be reached, refused this client (password, ACL) or answered with an error
REDIS_FAILED = 4
#: ``clustersync sink``: the database or broker could not be reached or refused a write
DESTINATION_FAILED = 5

#: the group's ``--help`` epilog (``\b`` keeps click from rewrapping the lines)
EXIT_CODES_HELP = f"""\b
Exit codes:
  {OK}  done
  {NEEDS_A_PERSON}  needs a person: check or status --check found something, or what was asked
     cannot be done as things are (pausing a finished job, a task the job lacks)
  {USAGE}  usage error: a bad option, argument, URL or job name; no Redis URL or JOB found
  {NO_SUCH_JOB}  the job named does not exist on that Redis (`clustersync jobs` lists them)
  {REDIS_FAILED}  Redis could not be reached, refused this client, or answered with an error
  {DESTINATION_FAILED}  sink: the database or broker could not be reached or refused a write
"""


class JobRefused(click.ClickException):
    """What was asked cannot be done as the job is; a person must decide (exit 1)."""

    exit_code = NEEDS_A_PERSON


class JobNotFound(click.ClickException):
    """The job named does not exist on this Redis (exit 3)."""

    exit_code = NO_SUCH_JOB


class DestinationError(click.ClickException):
    """``sink``: the database or broker could not be reached or refused a write (exit 5)."""

    exit_code = DESTINATION_FAILED


class RedisFailed(click.ClickException):
    """Redis could not be reached, refused this client or answered with an error (exit 4)."""

    exit_code = REDIS_FAILED


def exit_needing_a_person() -> NoReturn:
    """End the command with exit code 1 once it has printed what needs a person."""
    click.get_current_context().exit(NEEDS_A_PERSON)
