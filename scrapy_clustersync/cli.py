"""``clustersync``: see and steer the jobs of a cluster from any machine that reaches Redis."""

from __future__ import annotations

import json
import sys
import time
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from .codec import RequestCodec, UnencodableRequest
from .config import ConfigError, redact_url, validate_job_name, validate_redis_url
from .dupefilter import cluster_fingerprint
from .store import JobStatus, JobStore, Op, Push, StoreError, make_client
from .store.job import new_call_id

SEED_BATCH = 500
console = Console(soft_wrap=True)


def _store(ctx: click.Context, job: str) -> JobStore:
    """The store of ``job`` at the Redis of ``--redis-url``; a usage error if either is bad."""
    url: str | None = ctx.obj["redis_url"]
    if not url:
        raise click.UsageError(
            "no Redis given: pass --redis-url URL or set CLUSTERSYNC_REDIS_URL, "
            "e.g. redis://:password@10.0.0.5:6379/0"
        )
    try:
        validate_redis_url(url, given_as="--redis-url")
        validate_job_name(job, given_as="JOB")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return JobStore(make_client(url), job, node_id="cli", writes_seen=None)


def _fail(exc: StoreError, ctx: click.Context) -> NoReturn:
    raise click.ClickException(
        f"Redis at {redact_url(ctx.obj['redis_url'])} answered with an error or could not be "
        f"reached: {exc}"
    )


@click.group()
@click.option(
    "--redis-url", envvar="CLUSTERSYNC_REDIS_URL", metavar="URL",
    help="Redis of the cluster (default: $CLUSTERSYNC_REDIS_URL).",
)
@click.pass_context
def main(ctx: click.Context, redis_url: str | None) -> None:
    """See and steer scrapy-clustersync jobs."""
    ctx.obj = {"redis_url": redis_url}


@main.command()
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def status(ctx: click.Context, job: str, as_json: bool) -> None:
    """State, queued, leased, seen, done, dead letters and nodes of JOB."""
    store = _store(ctx, job)
    try:
        report = store.status()
    except StoreError as exc:
        _fail(exc, ctx)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        return
    if not report.exists:
        raise click.ClickException(f"job {job!r} does not exist in this Redis")
    _print_status(report)


def _print_status(report: JobStatus) -> None:
    summary = report.to_dict()
    console.print(f"[bold]job[/bold] {report.job}  [bold]state[/bold] {report.state}")
    for name in ("queued", "leased", "seen", "done", "dead_letters"):
        console.print(f"  {name:<13}{summary[name]:>12,}")
    if report.unserializable:
        console.print(f"  kept local   {report.unserializable:>12,}  requests that cannot travel, "
                      "crawled on the node that made them (not crash-safe)")
    for name in ("pushed", "filtered", "reclaimed"):
        console.print(f"  {name:<13}{report.counters.get(name, 0):>12,}")
    dedup = report.dedup
    if dedup.get("mode") == "bloom":
        console.print(
            f"  bloom filter  {dedup['entries']:,} entries (estimated), {dedup['layers']} "
            f"layer(s), {dedup['bytes']:,} bytes, expected error rate now "
            f"{dedup['expected_error_rate']:.2e} (configured {dedup['configured_error_rate']})"
        )
        if dedup.get("prepared_bytes"):
            console.print(f"  bloom filter  next layer allocated ahead: "
                          f"{dedup['prepared_bytes']:,} bytes")
    else:
        console.print(f"  dedup         exact set of {dedup.get('entries', 0):,} fingerprints")
    table = Table("node", "alive", "state", "pages", "items", "inflight", "buffered", "rss MiB",
                  "seen ago")
    for node in report.nodes:
        age = time.time() - float(node.get("updated", 0))
        table.add_row(
            node["id"], "yes" if node["alive"] else "no", str(node.get("state", "?")),
            str(node.get("pages", 0)), str(node.get("items", 0)), str(node.get("inflight", 0)),
            str(node.get("buffered", 0)), f"{node.get('rss_bytes', 0) / 2**20:.0f}", f"{age:.0f}s",
        )
    console.print(table)


@main.command()
@click.argument("job")
@click.argument("urls", nargs=-1, required=True)
@click.option("--priority", default=0, show_default=True, help="Priority of the seeded requests.")
@click.option("--callback", default=None, help="Spider method to call (default: parse).")
@click.pass_context
def seed(ctx: click.Context, job: str, urls: tuple[str, ...], priority: int,
         callback: str | None) -> None:
    """Add URLS to JOB's queue (already-seen URLs are skipped)."""
    store = _store(ctx, job)
    ops = _seed_ops(_seed_requests(urls, priority), callback)
    pushed = filtered = 0
    try:
        epoch = store.ensure_job()
        for start in range(0, len(ops), SEED_BATCH):
            result = store.flush(epoch, ops[start:start + SEED_BATCH], new_call_id())
            pushed, filtered = pushed + result.pushed, filtered + result.filtered
    except StoreError as exc:
        _fail(exc, ctx)
    click.echo(f"seeded {pushed} request(s) into job {job!r}; {filtered} already seen")


def _seed_requests(urls: tuple[str, ...], priority: int) -> list[Request]:
    """A request per URL; a usage error naming the first that is not a URL."""
    requests: list[Request] = []
    for url in urls:
        try:
            requests.append(Request(url, priority=priority, meta={}))
        except ValueError as exc:
            raise click.BadParameter(f"{url!r}: {exc}", param_hint="URLS") from None
    return requests


def _seed_ops(requests: list[Request], callback: str | None) -> list[Op]:
    """The push op of each request, as a node would write it."""
    codec = RequestCodec(None, max_bytes=10 * 2**20)
    fingerprinter = RequestFingerprinter()
    ops: list[Op] = []
    for request in requests:
        try:
            blob = codec.encode(request)
        except UnencodableRequest as exc:  # pragma: no cover - plain URLs always encode
            raise click.ClickException(str(exc)) from None
        if callback:
            blob = codec.with_callback(blob, callback)
        ops.append(Push(cluster_fingerprint(fingerprinter.fingerprint(request)),
                        request.priority, blob))
    return ops


@main.command()
@click.argument("job")
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.pass_context
def dead(ctx: click.Context, job: str, limit: int) -> None:
    """Show JOB's dead letters: queue entries no node could decode, with the reason."""
    try:
        letters = _store(ctx, job).dead_letters(limit)
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
        deleted = _store(ctx, job).purge()
    except StoreError as exc:
        _fail(exc, ctx)
    click.echo(f"purged job {job!r} ({deleted} keys deleted)")



@main.command()
@click.argument("job")
@click.option("--forget-seen", is_flag=True,
              help="Also clear the seen record: every URL is crawled again (default: only URLs "
                   "not seen before).")
@click.option("--force", is_flag=True,
              help="Restart even with nodes alive or work queued or leased.")
@click.option("--yes", is_flag=True, help="Confirm --forget-seen without asking.")
@click.pass_context
def restart(ctx: click.Context, job: str, forget_seen: bool, force: bool, yes: bool) -> None:
    """Make finished (or stopped) JOB crawlable again: start() runs on the next node.

    The queue, stats and dead letters are kept; the seen record too unless --forget-seen.
    """
    if forget_seen and not yes:
        raise click.UsageError(f"--forget-seen clears what job {job!r} has seen, so that every "
                               "URL is crawled again; run again with --yes to confirm")
    store = _store(ctx, job)
    try:
        result = store.restart(force=force)
        if result.done and forget_seen:
            store.forget_seen()
    except StoreError as exc:
        _fail(exc, ctx)
    if not result.done and not (result.live_nodes or result.queued or result.leased):
        raise click.ClickException(f"job {job!r} does not exist in this Redis")
    if not result.done:
        raise click.ClickException(
            f"job {job!r} is not finished: {result.live_nodes} live node(s), {result.queued} "
            f"queued, {result.leased} leased. Stop its nodes and wait for their leases to run "
            "out, or pass --force to restart it anyway.")
    click.echo(f"restarted job {job!r}: start() runs again on the next node; "
               + ("the seen record was cleared: every URL is crawled again" if forget_seen
                  else "the seen record is kept: only URLs not seen before are crawled"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
