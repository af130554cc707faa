"""``clustersync token add|list|revoke``: the tokens of ``clustersync serve`` (store/api_tokens.py
keeps their SHA-256 only; docs/api.md). Adding and revoking one is recorded in the API's audit
list, as ``user@host``."""

from __future__ import annotations

import click

from ..store.api_tokens import ROLES, TokenStore
from .config_commands import who
from .context import CliContext, pass_cli
from .exit_codes import JobRefused
from .options import json_option, settings_option
from .output import echo_json, when_iso

#: a token's name: what the audit and the settings history record
TOKEN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"


@click.group("token")
def token() -> None:
    """Tokens of `clustersync serve`: each has a role (read, operator, admin); Redis keeps only
    the SHA-256 of its secret. Once one exists, every request to serve needs one."""


@token.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), required=True,
              help="read: every GET; operator: also pause, resume, stop, seed, repair; "
                   "admin: also shared settings and restart.")
@json_option("the token and its secret")
@settings_option
@pass_cli
def add(cli: CliContext, name: str, role: str, as_json: bool) -> None:
    """Make token NAME with a role and print its secret, this once (it cannot be shown again:
    revoke it and add another if it is lost)."""
    import re

    if not re.match(TOKEN_NAME, name):
        raise click.BadParameter("letters, digits and _ . @ -, at most 64", param_hint="NAME")
    tokens = TokenStore(cli.client())
    secret = tokens.add(name, role, who())
    if secret is None:
        raise JobRefused(f"token {name!r} exists already; `clustersync token revoke {name}` "
                         "first to replace it")
    tokens.record(who(), "token add", None, {"name": name, "role": role})
    if as_json:
        echo_json({"name": name, "role": role, "secret": secret})
        return
    click.echo(secret)
    click.echo(f"token {name!r} ({role}) made: the line above is its secret, shown only now. "
               "Send it as `Authorization: Bearer <secret>`.", err=True)


@token.command("list")
@json_option("the tokens")
@settings_option
@pass_cli
def list_(cli: CliContext, as_json: bool) -> None:
    """Every token: name, role, when and by whom it was made (never its secret)."""
    tokens = TokenStore(cli.client()).tokens()
    if as_json:
        echo_json([t.to_dict() for t in tokens])
        return
    for t in tokens:
        click.echo(f"{t.name}  {t.role}  made {when_iso(t.created_ms)} by {t.by}")
    click.echo(f"{len(tokens)} token(s)")


@token.command("revoke")
@click.argument("name")
@json_option("what was done")
@settings_option
@pass_cli
def revoke(cli: CliContext, name: str, as_json: bool) -> None:
    """Delete token NAME: the next request with its secret is refused (401)."""
    tokens = TokenStore(cli.client())
    revoked = tokens.revoke(name)
    if revoked:
        tokens.record(who(), "token revoke", None, {"name": name})
    if as_json:
        echo_json({"name": name, "revoked": revoked})
    elif revoked:
        click.echo(f"token {name!r} revoked")
    if not revoked:
        raise JobRefused(f"there is no token {name!r}; `clustersync token list` lists them")
