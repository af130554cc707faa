"""``clustersync``: see and steer the jobs of a cluster from any machine that reaches Redis.

Inside a Scrapy project (or with ``--settings MODULE`` / ``-s NAME=VALUE``) the commands read
``CLUSTERSYNC_REDIS_URL``, ``CLUSTERSYNC_JOB`` and the request fingerprinter from the project's
settings, as ``scrapy`` commands do (projectsettings.py). Also ``scrapy clustersync ...``
(scrapycmd.py). Exit codes: 0 done, 1 Redis failed or refused, 2 usage error, 3 no such job.
"""

from __future__ import annotations

import json
import sys

import click

from ..config import ConfigError, redact_url
from ..store import JobStore, StoreError, make_client
from ..store.job_store import new_call_id
from .check_commands import NEEDS_A_PERSON, check, needs_a_person, nodes, show_status, top
from .context import (
    _existing_store,
    _fail,
    _not_found,
    _project,
    _redis_url,
    _store,
)
from .control_commands import pause, resume, stop
from .project import ProjectContext, parse_overrides
from .seed_commands import (
    BadSeed,
    SeedEncoder,
    SeedUrls,
    crawlable_schemes,
    open_source,
    prepared_ops,
    read_urls,
)
from .status_view import console, job_rows, print_jobs
from .task_commands import TASK_COMMANDS


@click.group()
@click.option("--redis-url", metavar="URL",
              help="Redis of the cluster; wins over -s, $CLUSTERSYNC_REDIS_URL and the "
                   "project's CLUSTERSYNC_REDIS_URL.")
@click.option("-s", "--set", "overrides", multiple=True, metavar="NAME=VALUE",
              help="Set a Scrapy setting, as `scrapy -s` does (may be repeated).")
@click.option("--settings", "settings_module", metavar="MODULE",
              help="Settings module to use instead of the project's (scrapy.cfg).")
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, overrides: tuple[str, ...],
         settings_module: str | None) -> None:
    """See and steer scrapy-clustersync jobs.

    Inside a Scrapy project the Redis URL, the job (CLUSTERSYNC_JOB) and the request
    fingerprinter come from its settings. Exit codes: 0 done, 1 Redis failed, 2 usage
    error, 3 no such job.
    """
    ctx.ensure_object(dict)
    project: ProjectContext = ctx.obj.get("project") or ProjectContext()
    try:
        project.overrides.update(parse_overrides(overrides))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    project.redis_url_flag = redis_url or project.redis_url_flag
    project.settings_module = settings_module or project.settings_module
    ctx.obj.update(project=project, redis_url=None, redis_url_given_as=None)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.pass_context
def jobs(ctx: click.Context, as_json: bool) -> None:
    """The jobs on this Redis: state, queued, leased, done, live nodes, pages/min."""
    try:
        rows = job_rows(make_client(_redis_url(ctx)))
    except StoreError as exc:
        _fail(exc, ctx)
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
    elif rows:
        print_jobs(rows, console())
    else:
        click.echo(f"no jobs on the Redis at {redact_url(ctx.obj['redis_url'])}")


@main.command()
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--check", "check_health", is_flag=True,
              help="Exit 1 when something needs a person: dead nodes holding work, nodes on "
                   "other code or settings, dead letters (for cron and monitoring).")
@click.pass_context
def status(ctx: click.Context, job: str | None, as_json: bool, check_health: bool) -> None:
    """State, queued, leased, seen, done, rate, dead letters and nodes of JOB (default: the
    project's CLUSTERSYNC_JOB)."""
    store = _store(ctx, job)
    try:
        report = store.status()
        attention = needs_a_person(store, report) if check_health else []
    except StoreError as exc:
        _fail(exc, ctx)
    if not report.exists:
        _not_found(ctx, store.keys.job)
    show_status(report, attention if check_health else None, as_json)
    if attention:
        ctx.exit(NEEDS_A_PERSON)


@main.command()
@click.argument("args", nargs=-1, metavar="[JOB] [URL]...")
@click.option("-f", "--file", "url_file", metavar="FILE",
              help="Read URLs from FILE, one per line ('-': stdin); blank lines and # comments "
                   "are skipped.")
@click.option("--create", is_flag=True,
              help="Create JOB if it does not exist (with the project's dedup settings).")
@click.option("--priority", default=0, show_default=True, help="Priority of the seeded requests.")
@click.option("--callback", default=None, help="Spider method to call (default: parse).")
@click.pass_context
def seed(ctx: click.Context, args: tuple[str, ...], url_file: str | None, create: bool,
         priority: int, callback: str | None) -> None:
    """Add URLs to JOB's queue (already-seen URLs are skipped). JOB defaults to the project's
    CLUSTERSYNC_JOB; every URL is checked before anything is written."""
    job, urls = _job_and_urls(args)
    seeds = _read_seeds(urls, url_file)
    try:
        encoder = SeedEncoder(_project(ctx).fingerprinter(), priority, callback)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    pushed = filtered = 0
    with prepared_ops(encoder, seeds.urls()) as batches:
        try:
            seeds.check(crawlable_schemes(_project(ctx).settings))
        except BadSeed as exc:
            raise click.BadParameter(str(exc), param_hint="URL") from None
        store = _seed_store(ctx, job, create)
        try:
            epoch = store.ensure_job()
            for ops in batches:
                result = store.flush(epoch, ops, new_call_id())
                pushed, filtered = pushed + result.pushed, filtered + result.filtered
        except StoreError as exc:
            _fail(exc, ctx)
    click.echo(f"seeded {pushed} request(s) into job {store.keys.job!r}; "
               f"{filtered} already seen")


def _job_and_urls(args: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """JOB and the URLs of ``seed``'s arguments: the first is the job unless it is a URL (a
    job name holds no '/'), so that JOB can default to the project's CLUSTERSYNC_JOB."""
    if args and "/" not in args[0] and not args[0].startswith("data:"):
        return args[0], args[1:]
    return None, args


def _read_seeds(urls: tuple[str, ...], url_file: str | None) -> SeedUrls:
    if not urls and not url_file:
        raise click.UsageError("no URLs to seed: give them as arguments or with -f FILE "
                               "('-f -' reads stdin)")
    sources = [("arguments", list(read_urls(urls)))]
    if url_file:
        try:
            source, name = open_source(url_file)
            with source:
                sources.append((name, list(read_urls(source))))
        except OSError as exc:
            raise click.BadParameter(str(exc), param_hint="-f") from None
    return SeedUrls(sources)


def _seed_store(ctx: click.Context, job: str | None, create: bool) -> JobStore:
    """The store of the seeded job; JobNotFound unless it exists or ``create`` is given."""
    if not create:
        return _existing_store(ctx, job)
    try:
        dedup = _project(ctx).dedup()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return _store(ctx, job, dedup)


@main.command()
@click.argument("job", required=False)
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.pass_context
def dead(ctx: click.Context, job: str | None, limit: int) -> None:
    """Show JOB's dead letters: queue entries no node could decode, with the reason."""
    try:
        letters = _existing_store(ctx, job).dead_letters(limit)
    except StoreError as exc:
        _fail(exc, ctx)
    for letter in letters:
        click.echo(f"{letter.entry_id}  node={letter.node}  reason={letter.reason}  "
                   f"entry={letter.entry[:80]!r}")
    click.echo(f"{len(letters)} dead letter(s) shown")


@main.command()
@click.argument("job")
@click.option("--yes", is_flag=True, help="Confirm: delete every key of JOB.")
@click.pass_context
def purge(ctx: click.Context, job: str, yes: bool) -> None:
    """Delete JOB from Redis: queue, leases, seen record, stats, nodes, dead letters."""
    if not yes:
        raise click.UsageError(
            f"purge deletes job {job!r} for every node; run again with --yes to confirm"
        )
    try:
        deleted = _existing_store(ctx, job).purge()
    except StoreError as exc:
        _fail(exc, ctx)
    click.echo(f"purged job {job!r} ({deleted} keys deleted)")


@main.command()
@click.argument("job", required=False)
@click.option("--forget-seen", is_flag=True,
              help="Also clear the seen record: every URL is crawled again (default: only URLs "
                   "not seen before).")
@click.option("--force", is_flag=True,
              help="Restart even with nodes alive or work queued or leased.")
@click.option("--yes", is_flag=True, help="Confirm --forget-seen without asking.")
@click.pass_context
def restart(ctx: click.Context, job: str | None, forget_seen: bool, force: bool,
            yes: bool) -> None:
    """Make finished (or stopped) JOB crawlable again: start() runs on the next node.

    The queue, stats and dead letters are kept; the seen record too unless --forget-seen.
    """
    if forget_seen and not yes:
        raise click.UsageError("--forget-seen clears what the job has seen, so that every URL is "
                               "crawled again; run again with --yes to confirm")
    store = _existing_store(ctx, job)
    job = store.keys.job
    try:
        result = store.restart(force=force, forget_seen=forget_seen)
    except StoreError as exc:
        _fail(exc, ctx)
    if not result.done:
        raise click.ClickException(
            f"job {job!r} is not finished: {result.live_nodes} live node(s), {result.queued} "
            f"queued, {result.leased} leased. Stop its nodes and wait for their leases to run "
            "out, or pass --force to restart it anyway.")
    click.echo(f"restarted job {job!r}: start() runs again on the next node; "
               + ("the seen record was cleared: every URL is crawled again" if forget_seen
                  else "the seen record is kept: only URLs not seen before are crawled"))


main.add_command(check)
main.add_command(nodes)
main.add_command(top)
main.add_command(pause)
main.add_command(resume)
main.add_command(stop)
for _command in TASK_COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
