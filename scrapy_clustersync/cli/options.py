"""Options and arguments several ``clustersync`` commands take, spelled once so that they
read the same everywhere: ``[JOB]``, ``--json``, ``--limit``, ``--all`` and ``-s NAME=VALUE``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..config import ConfigError
from .context import CliContext

F = TypeVar("F", bound=Callable[..., Any])

#: how many records ``--limit`` shows unless told, in every command that has it
DEFAULT_LIMIT = 50


def job_argument(function: F) -> F:
    """``[JOB]``: the job; left out, the project's CLUSTERSYNC_JOB or the only job there."""
    return click.argument("job", required=False)(function)


def json_option(what: str) -> Callable[[F], F]:
    """``--json``: print ``what`` as JSON, for scripts, instead of text for people."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON.")


def limit_option(what: str) -> Callable[[F], F]:
    """``--limit N``: how many of ``what`` to show, newest first (DEFAULT_LIMIT unless told)."""
    return click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT,
                        show_default=True, help=f"How many {what} to show, newest first.")


def _apply_overrides(ctx: click.Context, _param: click.Parameter,
                     pairs: tuple[str, ...]) -> None:
    if not pairs:
        return
    try:
        ctx.ensure_object(CliContext).project.add_overrides(pairs)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def settings_option(function: F) -> F:
    """``-s NAME=VALUE``, before the subcommand (on the group) or after it (on each command):
    both add to the same settings, later ones winning."""
    return click.option(
        "-s", "--set", "overrides", multiple=True, metavar="NAME=VALUE", expose_value=False,
        callback=_apply_overrides,
        help="Set a Scrapy setting, as `scrapy -s` does (may be repeated).")(function)


def all_option(function: F) -> F:
    """``--all``: list every node, those of earlier runs and those dead for long too."""
    return click.option("--all", "every", is_flag=True,
                        help="List every node: those of earlier runs and those dead for more "
                             "than 10 minutes too (summed up in one line otherwise).")(function)
