"""``clustersync regions``: the sites of a job pinned to regions, pinned and unpinned.

A node of region R (``CLUSTERSYNC_REGION``) is leased the requests of the sites pinned to R and
of the sites pinned to none first, those of other regions only when it has nothing else to do.
A pin takes effect at once, for the requests a site has queued too (store/region_pins.py).
"""

from __future__ import annotations

import click

from ..config import ConfigError
from ..regions import validate_region
from ..store.region_pins import pin_sites, read_pins
from .context import CliContext, pass_cli
from .options import job_argument, json_option, settings_option
from .output import echo_json


def parse_pins(pins: tuple[str, ...], unpins: tuple[str, ...]) -> dict[str, str]:
    """``--pin SITE=REGION`` and ``--unpin SITE`` as site -> region ("" for none)."""
    wanted = dict(_pinned(pin) for pin in pins)
    for site in unpins:
        if site in wanted:
            raise click.BadParameter(f"{site!r} is both pinned and unpinned", param_hint="--unpin")
        wanted[site] = ""
    for site in wanted:
        if not site or "\t" in site or "\n" in site:
            raise click.BadParameter(f"{site!r} cannot be a site (Scrapy's download slot key: "
                                     "no tab, no newline)")
    return wanted


def _pinned(pin: str) -> tuple[str, str]:
    """``SITE=REGION`` as (site, region); BadParameter saying what is wrong, else."""
    site, equals, region = pin.rpartition("=")
    if not equals or not site or not region:
        raise click.BadParameter(f"{pin!r} is not SITE=REGION (e.g. example.com=eu-west-1; "
                                 "--unpin SITE pins a site to no region)", param_hint="--pin")
    try:
        return site, validate_region(region, given_as=f"the region of --pin {pin}")
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--pin") from None


@click.command()
@job_argument
@click.option("--pin", "pins", multiple=True, metavar="SITE=REGION",
              help="Pin SITE (Scrapy's download slot key: its host) to REGION; repeatable.")
@click.option("--unpin", "unpins", multiple=True, metavar="SITE",
              help="Pin SITE to no region again; repeatable.")
@json_option("the pins (or what changed)")
@settings_option
@pass_cli
def regions(cli: CliContext, job: str | None, pins: tuple[str, ...], unpins: tuple[str, ...],
            as_json: bool) -> None:
    """The sites of JOB pinned to regions; --pin and --unpin change them.

    A node with CLUSTERSYNC_REGION = R crawls the sites pinned to R and those pinned to none
    first, and those of other regions only when it has nothing else to do. A change applies at
    once, to the requests a site has queued too.
    """
    wanted = parse_pins(pins, unpins)
    cli.reading = not wanted  # a list only reads: from CLUSTERSYNC_READ_URL's Redis if given
    store = cli.existing_store(job)
    if wanted:
        changed, moved = pin_sites(store, wanted)
        if as_json:
            echo_json({"job": store.keys.job, "changed": changed, "moved": moved})
        else:
            click.echo(f"{changed} site(s) of job {store.keys.job!r} changed region; "
                       f"{moved} queued request(s) moved with them")
        return
    current = read_pins(store)
    if as_json:
        echo_json(current)
        return
    for site, region in sorted(current.items()):
        click.echo(f"{site}\t{region}")
    click.echo(f"{len(current)} site(s) pinned")
