"""A short digest of what makes nodes crawl alike: the project's code and its settings.

Every node puts it in its record (node_record.py), so that ``clustersync status`` can show nodes
that run different code or settings. Two nodes started from the same project files with the
same settings get the same digest, on any machine and whatever ``PYTHONHASHSEED``.

- Code: every ``*.py`` file of the top-level package the spider's module belongs to (the
  Scrapy project package: spiders, items, pipelines, middlewares, settings), by path relative
  to that package and content; a spider module outside any package counts alone. At most
  ``MAX_FILES`` files and ``MAX_BYTES`` bytes are read (a larger tree is cut there, in path
  order, the same on every node).
- Settings: every Scrapy setting (defaults included: the Scrapy version is in the record
  anyway) but those that may rightly differ per node, ``PER_NODE`` and those starting with
  ``PER_NODE_PREFIXES``: where a node logs, keeps its JOBDIR, writes its feeds, how it reaches
  Redis (URL, TLS files, socket timeout, spool), its telnet console and stats dump.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

DIGEST_CHARS = 12
MAX_FILES = 2000
MAX_BYTES = 50 * 2**20
PER_NODE = frozenset({
    "JOBDIR", "FEEDS", "FEED_URI", "FEED_FORMAT", "STATS_DUMP", "CLUSTERSYNC_REDIS_URL",
    "CLUSTERSYNC_SOCKET_TIMEOUT", "CLUSTERSYNC_SPOOL_DIR",
})
PER_NODE_PREFIXES = ("LOG_", "TELNETCONSOLE_", "CLUSTERSYNC_TLS_", "MEMUSAGE_NOTIFY")
#: memory addresses in a repr ("<object at 0x7f...>") differ from process to process
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def project_digest(settings: BaseSettings | None, spider_cls: type | None) -> str:
    """DIGEST_CHARS hex characters of a SHA-256 over the project's code and its settings."""
    sha = hashlib.sha256()
    for name, content in code_files(spider_cls):
        sha.update(f"{name}\0{len(content)}\0".encode())
        sha.update(content)
    sha.update(b"\0settings\0")
    sha.update(settings_text(settings).encode())
    return sha.hexdigest()[:DIGEST_CHARS]


def code_files(spider_cls: type | None) -> list[tuple[str, bytes]]:
    """(relative path, content) of the project's Python files, in path order."""
    if spider_cls is None:
        return []
    module = sys.modules.get(spider_cls.__module__)
    top = sys.modules.get(spider_cls.__module__.split(".")[0])
    top_file = getattr(top, "__file__", None)
    if top_file and Path(top_file).name == "__init__.py":
        root = Path(top_file).parent
        paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    else:
        own_file = getattr(module, "__file__", None)
        if not own_file:
            return []
        root, paths = Path(own_file).parent, [Path(own_file)]
    files, total = [], 0
    for path in paths[:MAX_FILES]:
        try:
            content = path.read_bytes()
        except OSError:
            continue
        total += len(content)
        if total > MAX_BYTES:
            break
        files.append((path.relative_to(root).as_posix(), content))
    return files


def settings_text(settings: BaseSettings | None) -> str:
    """The settings that matter as canonical JSON text (sorted, no memory addresses)."""
    if settings is None:
        return ""
    values = settings.copy_to_dict()
    kept = {name: canonical(value) for name, value in values.items() if not per_node(name)}
    return json.dumps(kept, sort_keys=True)


def per_node(name: str) -> bool:
    return name in PER_NODE or name.startswith(PER_NODE_PREFIXES)


def canonical(value: Any) -> Any:
    """``value`` as JSON-ready data that is the same in every process: dicts and sets sorted,
    classes and functions by their dotted name, other objects by their repr sans address."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        pairs = [[canonical(k), canonical(v)] for k, v in value.items()]
        return sorted(pairs, key=lambda pair: json.dumps(pair, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(item) for item in value), key=json.dumps)
    if isinstance(value, type) or callable(value):
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
        return _ADDRESS.sub("", name)
    return _ADDRESS.sub("", repr(value))
