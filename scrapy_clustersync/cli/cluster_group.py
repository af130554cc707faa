"""``ClusterGroup``: the ``clustersync`` group, which turns the package's errors into one
clear message and their exit code, in one place, so that no command catches them."""

from __future__ import annotations

from typing import Any

import click

from ..config import ConfigError
from ..store import StoreError, StoreUnavailable
from ..store.errors import AccessRefused
from .context import CliContext
from .exit_codes import RedisFailed


class ClusterGroup(click.Group):
    """A click group whose commands may raise ConfigError (a usage error, exit 2) and
    StoreError (Redis failed, exit 4) and leave the message to it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise click.UsageError(str(exc), ctx=self._command_context(ctx)) from None
        except StoreError as exc:
            raise RedisFailed(redis_failure(exc, ctx.ensure_object(CliContext))) from None

    def _command_context(self, ctx: click.Context) -> click.Context:
        """A context of the subcommand that ran, so that the usage error shows its usage."""
        name = ctx.invoked_subcommand
        command = self.get_command(ctx, name) if name else None
        if command is None:
            return ctx
        return click.Context(command, info_name=name, parent=ctx)


def redis_failure(exc: StoreError, cli: CliContext) -> str:
    """What went wrong with the Redis, in words that point at the fix."""
    where = cli.where()
    if isinstance(exc, StoreUnavailable):
        return f"{where} could not be reached or cannot serve now: {exc}"
    if isinstance(exc, AccessRefused):
        return (f"{where} refused this client (check the user and password in the URL, and "
                f"the ACL user's permissions): {exc}")
    return f"{where} answered with an error: {exc}"
