"""What every ``clustersync`` command shares: the project, the Redis URL, the job's store, and
errors that say what was wrong (exit codes: 1 Redis failed, 2 usage error, 3 no such job)."""

from __future__ import annotations

from typing import NoReturn

import click

from ..config import ConfigError, DedupSettings, redact_url
from ..store import JobStore, StoreError, make_client
from .project import ProjectContext


class JobNotFound(click.ClickException):
    """The job named does not exist on this Redis (exit code 3)."""

    exit_code = 3


def _project(ctx: click.Context) -> ProjectContext:
    project: ProjectContext = ctx.obj["project"]
    return project


def _redis_url(ctx: click.Context) -> str:
    """The Redis URL (flag, environment or project; see projectsettings.py); a usage error
    naming where it came from if it is missing or bad."""
    try:
        url, given_as = _project(ctx).redis_url()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    ctx.obj["redis_url"], ctx.obj["redis_url_given_as"] = url, given_as
    return url


def _store(ctx: click.Context, job: str | None, dedup: DedupSettings | None = None) -> JobStore:
    """The store of ``job`` (default: the project's CLUSTERSYNC_JOB) at the Redis given; a
    usage error if either is bad."""
    url = _redis_url(ctx)
    try:
        name = _project(ctx).job(job)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return JobStore(make_client(url), name, node_id="cli", dedup=dedup, writes_seen=None)


def _existing_store(ctx: click.Context, job: str | None) -> JobStore:
    """As ``_store``, for a job that must exist: JobNotFound (exit 3) if it does not."""
    store = _store(ctx, job)
    try:
        exists = store.status().exists
    except StoreError as exc:
        _fail(exc, ctx)
    if not exists:
        _not_found(ctx, store.keys.job)
    return store


def _not_found(ctx: click.Context, job: str) -> NoReturn:
    raise JobNotFound(
        f"job {job!r} does not exist on the Redis at {redact_url(ctx.obj['redis_url'])} "
        f"(from {ctx.obj['redis_url_given_as']}); `clustersync jobs` lists the jobs there"
    )


def _fail(exc: StoreError, ctx: click.Context) -> NoReturn:
    raise click.ClickException(
        f"Redis at {redact_url(ctx.obj['redis_url'])} answered with an error or could not be "
        f"reached: {exc}"
    )
