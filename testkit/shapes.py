"""Pages of other shapes than the page graph, served by `testkit.site.TestSite` too.

They give the crawls that are compared with plain Scrapy (tests/test_scrapy_parity.py) known
structures whose outcome does not depend on timing:

- ``/tree/0.html``: the root of a tree of ``TREE_DEPTH`` levels below it, each page with
  ``TREE_FANOUT`` children, named by their path from the root: ``/tree/0.2.html`` is the third
  child of the root, ``/tree/0.2.1.html`` the second child of that (links have class ``child``).
- ``/listing/K.html`` (K < ``LISTING_PAGES``): ``LISTING_ITEMS`` items (``li.item``: a name, a
  price and a link to a page of the graph, many pages linked several times) and, but on the
  last listing, a ``a.next`` link to listing K+1.
- ``/redirect/N.html``: 302 to ``/page/N.html``.
- ``/flaky/N.html``: 500 the first time a User-Agent asks for it, then the body of page N.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = ["LISTING_ITEMS", "LISTING_PAGES", "TREE_DEPTH", "TREE_FANOUT", "Answer", "answer",
           "tree_children", "tree_depth", "tree_paths"]

TREE_FANOUT = 3
TREE_DEPTH = 3
LISTING_PAGES = 3
LISTING_ITEMS = 200

_TREE_RE = re.compile(r"^/tree/(0(?:\.[0-9]+)*)\.html$")
_LISTING_RE = re.compile(r"^/listing/([0-9]+)\.html$")
_REDIRECT_RE = re.compile(r"^/redirect/([0-9]+)\.html$")
_FLAKY_RE = re.compile(r"^/flaky/([0-9]+)\.html$")


class Site(Protocol):
    """What the shapes need of the site serving them."""

    pages: int

    def page_body(self, i: int) -> bytes: ...

    def times_requested(self, agent: str, target: str) -> int: ...


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, HTML body and, for a redirect, where to."""

    status: int
    body: bytes = b""
    location: str | None = None


def tree_depth(node: str) -> int:
    """Depth of a tree node such as ``0.2.1`` (the root ``0`` is at depth 0)."""
    return node.count(".")


def tree_children(node: str) -> list[str]:
    """The children of tree node ``node``, in document order (none at ``TREE_DEPTH``)."""
    if tree_depth(node) >= TREE_DEPTH:
        return []
    return [f"{node}.{k}" for k in range(TREE_FANOUT)]


def tree_paths() -> list[str]:
    """Every node of the tree, breadth-first."""
    nodes, level = [], ["0"]
    while level:
        nodes.extend(level)
        level = [child for node in level for child in tree_children(node)]
    return nodes


def answer(site: Site, path: str, agent: str) -> Answer | None:
    """The answer to a GET of ``path`` by ``agent`` if it is one of these shapes, else None."""
    if match := _TREE_RE.match(path):
        return _tree_page(match.group(1))
    if (match := _LISTING_RE.match(path)) and int(match.group(1)) < LISTING_PAGES:
        return _listing_page(site, int(match.group(1)))
    if (match := _REDIRECT_RE.match(path)) and int(match.group(1)) < site.pages:
        return Answer(302, location=f"/page/{match.group(1)}.html")
    if (match := _FLAKY_RE.match(path)) and int(match.group(1)) < site.pages:
        if site.times_requested(agent, path) <= 1:
            return Answer(500, b"<html><body>try again</body></html>")
        return Answer(200, site.page_body(int(match.group(1))))
    return None


def _tree_page(node: str) -> Answer | None:
    if tree_depth(node) > TREE_DEPTH or any(int(k) >= TREE_FANOUT for k in node.split(".")[1:]):
        return None
    links = "".join(f'<li><a class="child" href="/tree/{child}.html">{child}</a></li>'
                    for child in tree_children(node))
    return Answer(200, _html(f"Tree {node}", f"<ul>{links}</ul>"))


def _listing_page(site: Site, k: int) -> Answer:
    items = "".join(
        f'<li class="item"><span class="name">item {k}-{i}</span>'
        f'<span class="price">{(k * LISTING_ITEMS + i) % 97}.{i % 100:02d}</span>'
        f'<a href="/page/{(k * LISTING_ITEMS + i) % site.pages}.html">details</a></li>'
        for i in range(LISTING_ITEMS)
    )
    more = f'<a class="next" href="/listing/{k + 1}.html">next</a>' if k + 1 < LISTING_PAGES else ""
    return Answer(200, _html(f"Listing {k}", f"<ul>{items}</ul>{more}"))


def _html(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{title}</title></head>"
            f"<body><h1>{title}</h1>{body}</body></html>").encode()
