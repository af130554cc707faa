"""How ``clustersync`` prints: rich tables for people, never cut when piped, and JSON for
scripts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click
from rich.console import Console


def console() -> Console:
    """A console for stdout; piped, it never wraps or cuts a line at 80 columns."""
    out = Console(soft_wrap=True)
    if not out.is_terminal:
        out = Console(soft_wrap=True, width=10_000)
    return out


def echo_json(data: Any, *, one_line: bool = False) -> None:
    """Print ``data`` as JSON, keys sorted (``one_line``: compact, one document per line, as
    ``top --json`` prints a document per refresh)."""
    click.echo(json.dumps(data, sort_keys=True, indent=None if one_line else 2))


def when_iso(ms: int | None) -> str:
    """Server time in ms as ISO 8601 UTC to the second; "" for None."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")
