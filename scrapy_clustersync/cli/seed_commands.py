"""``clustersync seed``: add URLs to a job's queue, as its nodes would push them (see
seed_urls.py for how they are checked, fingerprinted and encoded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import click

from ..store import JobStore, Op
from ..store.job_store import new_call_id
from ..store.write_ops import PackedPushes
from .context import CliContext, pass_cli
from .options import json_option, settings_option
from .output import echo_json
from .seed_callbacks import check_callback
from .seed_urls import (
    BadSeed,
    SeedEncoder,
    SeedUrls,
    crawlable_schemes,
    open_source,
    prepared_batches,
    read_urls,
)


@click.command()
@click.argument("args", nargs=-1, metavar="[JOB] [URL]...")
@click.option("-f", "--file", "url_file", metavar="FILE",
              help="Read URLs from FILE, one per line ('-': stdin); blank lines and # comments "
                   "are skipped.")
@click.option("--create", is_flag=True,
              help="Create JOB if it does not exist (with the project's dedup settings).")
@click.option("--priority", default=0, show_default=True, help="Priority of the seeded requests.")
@click.option("--callback", default=None,
              help="Spider method to call (default: parse); inside a project, checked against "
                   "the job's spider.")
@json_option("the counts")
@settings_option
@pass_cli
def seed(cli: CliContext, args: tuple[str, ...], url_file: str | None, create: bool,
         priority: int, callback: str | None, as_json: bool) -> None:
    """Add URLs to JOB's queue (already-seen URLs are skipped). Every URL is checked before
    anything is written, and inside a project --callback too (a method of the job's spider)."""
    job, urls = job_and_urls(args)
    seeds = read_seeds(urls, url_file)
    encoder = SeedEncoder(cli.project.fingerprinter(), priority, callback)
    with prepared_batches(encoder, seeds, crawlable_schemes(cli.project.settings)) as batches:
        try:
            checked = batches()
        except BadSeed as exc:
            raise click.BadParameter(str(exc), param_hint="URL") from None
        if callback and cli.project.in_project():
            unchecked = check_callback(cli.project.settings, cli.job_name(job), callback)
            if unchecked:
                click.echo(f"clustersync: {unchecked}", err=True)
        store = _seed_store(cli, job, create)
        pushed, filtered = write_seeds(store, checked)
    if as_json:
        echo_json({"job": store.keys.job, "seeded": pushed, "already_seen": filtered})
    else:
        click.echo(f"seeded {pushed} request(s) into job {store.keys.job!r}; "
                   f"{filtered} already seen")


def write_seeds(store: JobStore, batches: Iterable[Sequence[Op] | PackedPushes]
                ) -> tuple[int, int]:
    """Push the seeds' ``batches`` into the job (created if new), one script call each, as
    ``seed`` and the HTTP API do; (requests pushed, already seen)."""
    pushed = filtered = 0
    epoch = store.ensure_job()
    for ops in batches:
        result = store.flush(epoch, ops, new_call_id())
        pushed, filtered = pushed + result.pushed, filtered + result.filtered
    return pushed, filtered


def job_and_urls(args: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """JOB and the URLs of ``seed``'s arguments: the first is the job unless it is a URL (a
    job name holds no '/'), so that JOB may be left out."""
    if args and "/" not in args[0] and not args[0].startswith("data:"):
        return args[0], args[1:]
    return None, args


def read_seeds(urls: tuple[str, ...], url_file: str | None) -> SeedUrls:
    """The URLs given as arguments and in ``url_file``; a usage error if there are none or
    the file cannot be read."""
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


def _seed_store(cli: CliContext, job: str | None, create: bool) -> JobStore:
    """The store of the seeded job; JobNotFound unless it exists or ``create`` is given."""
    if not create:
        return cli.existing_store(job)
    return cli.store(job, cli.project.dedup())
