"""What a sink raises: the destination cannot be used as given (a usage error), or it
failed (unreachable, refused a write)."""

from __future__ import annotations


class DestinationUnusable(ValueError):
    """The destination URL cannot be used: an unsupported scheme, a bad URL, a driver that is
    not installed."""


class DestinationFailed(Exception):
    """The destination could not be reached or refused what was sent; nothing of the batch
    under way was acknowledged."""
