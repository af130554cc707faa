"""Digests of what makes nodes crawl alike: the project's code and its settings, one per file and
one per setting, so that ``clustersync check`` and ``status --check`` can say *what* differs
between two nodes, not only that something does (store/node_differences.py).

Every node puts them in its record (node_record.py): ``digest`` (DIGEST_CHARS hex over all of
it), ``setting_digests`` and ``file_digests`` (name -> ITEM_DIGEST_CHARS hex). Two nodes started
from the same project files with the same settings get the same digests, on any machine and
whatever ``PYTHONHASHSEED``. No value is ever in the record, only digests; the value of a
setting whose name looks secret (a password, token, key, credential, proxy, URL) is digested
with a slow key derivation, so that its short digest cannot be searched for a guessed value.

- Code: every ``*.py`` file of the top-level package the spider's module belongs to (the
  Scrapy project package: spiders, items, pipelines, middlewares, settings), by path relative
  to that package; a spider module outside any package counts alone. At most ``MAX_FILES``
  files and ``MAX_BYTES`` bytes are read (a larger tree is cut there, in path order, the same on
  every node).
- Settings: those whose value is not Scrapy's default, and the package's own (``CLUSTERSYNC_*``),
  but those that may rightly differ per node, ``PER_NODE`` and those starting with
  ``PER_NODE_PREFIXES``: where a node logs, keeps its JOBDIR, writes its feeds (``-o``/``-O``),
  dumps its stats, how it reaches Redis (URL, TLS files, socket timeout, spool), its telnet
  console. A setting missing from a record has Scrapy's default there.
- Bounded: at most ``MAX_ITEMS`` digests of each kind; past that, files are digested by
  directory, and what is left over is one digest under ``REST``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

DIGEST_CHARS = 12
#: the digest of one setting or file: enough to tell two values apart, small in the record
ITEM_DIGEST_CHARS = 8
#: most digests of each kind a record holds (a few KiB at most)
MAX_ITEMS = 200
#: the key of the digest of whatever did not fit in MAX_ITEMS
REST = "..."
MAX_FILES = 2000
MAX_BYTES = 50 * 2**20
PER_NODE = frozenset({
    "JOBDIR", "FEEDS", "STATS_DUMP", "CLUSTERSYNC_REDIS_URL", "CLUSTERSYNC_SOCKET_TIMEOUT",
    "CLUSTERSYNC_SPOOL_DIR", "CLUSTERSYNC_URL", "CLUSTERSYNC_TOKEN",
})
PER_NODE_PREFIXES = ("LOG_", "FEED_", "TELNETCONSOLE_", "CLUSTERSYNC_TLS_", "MEMUSAGE_NOTIFY",
                     "STATSMAILER_")
#: a setting whose name matches holds (or may hold) a secret: its digest is slow to compute
SECRET_NAME = re.compile(r"PASS|PWD|TOKEN|SECRET|KEY|CREDENTIAL|AUTH|PROXY|URL|URI|DSN",
                         re.IGNORECASE)
#: PBKDF2 rounds for a secret-looking setting: a few ms per setting at start-up, and as long per
#: guessed value for anyone who reads the record
SECRET_ROUNDS = 100_000
#: memory addresses in a repr ("<object at 0x7f...>") differ from process to process
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass(frozen=True)
class ProjectDigests:
    """What a node's record says about its code and settings (see the module doc)."""

    digest: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def project_digests(settings: BaseSettings | None, spider_cls: type | None) -> ProjectDigests:
    """The digests of the project's code and of its settings that matter."""
    files = {name: hashlib.sha256(content).hexdigest() for name, content in code_files(spider_cls)}
    values = setting_digests(settings)
    whole = hashlib.sha256(json.dumps([sorted(files.items()), sorted(values.items())]).encode())
    return ProjectDigests(
        digest=whole.hexdigest()[:DIGEST_CHARS],
        settings=bounded(values, group=None),
        files=bounded(files, group=_directory),
    )


def project_digest(settings: BaseSettings | None, spider_cls: type | None) -> str:
    """DIGEST_CHARS hex characters over the project's code and its settings."""
    return project_digests(settings, spider_cls).digest


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


def setting_digests(settings: BaseSettings | None) -> dict[str, str]:
    """Full hex digests of the settings that matter (see the module doc), by name."""
    if settings is None:
        return {}
    from scrapy.settings import Settings

    defaults = Settings().copy_to_dict()
    digests = {}
    for name, value in settings.copy_to_dict().items():
        if per_node(name):
            continue
        text = setting_text(value)
        if name in defaults and not name.startswith("CLUSTERSYNC_") \
                and text == setting_text(defaults[name]):
            continue
        digests[name] = value_digest(name, text)
    return digests


def setting_text(value: Any) -> str:
    """A setting's value as canonical text. A number or flag reads as its text, as the typed
    getters read it: ``-s CONCURRENT_REQUESTS=16`` is the default 16, not a difference."""
    if isinstance(value, (bool, int, float)):
        value = str(value)
    return json.dumps(canonical(value), sort_keys=True)


def value_digest(name: str, text: str) -> str:
    """The hex digest of a setting's canonical text; slow for a secret-looking ``name``."""
    if SECRET_NAME.search(name):
        salt = f"clustersync setting {name}".encode()
        return hashlib.pbkdf2_hmac("sha256", text.encode(), salt, SECRET_ROUNDS).hex()
    return hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()


def bounded(digests: dict[str, str], group: Callable[[str], str] | None) -> dict[str, str]:
    """``digests`` cut to ITEM_DIGEST_CHARS each and at most MAX_ITEMS of them: past that, by
    ``group(name)`` (if given) and then what is left over under REST."""
    if len(digests) > MAX_ITEMS and group is not None:
        grouped: dict[str, list[str]] = {}
        for name in sorted(digests):
            grouped.setdefault(group(name), []).append(f"{name}\0{digests[name]}")
        digests = {key: _combined(parts) for key, parts in grouped.items()}
    names = sorted(digests)
    if len(names) <= MAX_ITEMS:
        return {name: digests[name][:ITEM_DIGEST_CHARS] for name in names}
    kept = {name: digests[name][:ITEM_DIGEST_CHARS] for name in names[:MAX_ITEMS - 1]}
    rest = names[MAX_ITEMS - 1:]
    kept[REST] = _combined(f"{n}\0{digests[n]}" for n in rest)[:ITEM_DIGEST_CHARS]
    return kept


def _combined(parts: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _directory(path: str) -> str:
    parent = path.rpartition("/")[0]
    return f"{parent}/" if parent else "./"


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
