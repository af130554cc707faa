"""The package's shape: no import cycle, only the store layer talks to redis-py, no two modules
share a name, and what it imports to run is what it declares."""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from importlib.metadata import packages_distributions, requires
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import pytest

    tomllib = pytest.importorskip("tomli")

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "scrapy_clustersync"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, typing_too: bool = False) -> set[str]:
    """Modules ``path`` imports at its top level (``typing_too``: and under TYPE_CHECKING)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    body = ast.parse(path.read_text()).body
    if typing_too:
        body += [inner for node in body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "TYPE_CHECKING" for inner in node.body]
    for node in body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path, typing_too=True) if m in paths and m != name}
            for name, path in paths.items()}


def test_no_module_of_the_package_imports_itself_back_through_others_even_for_types() -> None:
    graph = _graph()
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                raise AssertionError("import cycle: " + " -> ".join([*trail, name, target]))
            if target not in state:
                visit(target, [*trail, name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_only_the_store_layer_imports_redis() -> None:
    outside = [name for name, path in ((_module_name(p), p) for p in PACKAGE.rglob("*.py"))
               if not name.startswith("scrapy_clustersync.store")
               and any(m == "redis" or m.startswith("redis.") for m in _imports(path))]
    assert outside == []


def test_no_two_modules_or_folders_of_the_package_share_a_name() -> None:
    # Given every module and sub-package of the package (a package's __init__ is its folder)
    names = Counter(
        path.parent.name if path.name == "__init__.py" else path.stem
        for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts
    )
    # Then each name says which file it is: none appears twice
    assert sorted(name for name, count in names.items() if count > 1) == []


def _runtime_imports(path: Path) -> set[str]:
    """Top-level names ``path`` imports anywhere (functions too), except under TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "TYPE_CHECKING"
                   for statement in node.body for inner in ast.walk(statement)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _distribution(requirement: str) -> str:
    """The normalized distribution name of a requirement (``redis[hiredis]>=5.0`` -> redis)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


#: optional extras, and the sub-package whose modules alone may import what each declares
#: (``pip install 'scrapy-clustersync[sinks]'`` for ``clustersync sink``, ``[api]`` for
#: ``clustersync serve``)
EXTRA_PACKAGES = {"sinks": "sinks", "api": "api"}


def test_every_module_the_package_imports_to_run_comes_with_what_it_declares() -> None:
    # Given the runtime dependencies pyproject.toml declares, and Scrapy's own (Twisted, w3lib:
    # Scrapy's API hands their objects to an add-on, so they come with any Scrapy), and the
    # optional extras that the modules of one sub-package may use
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = {_distribution(dep) for dep in project["dependencies"]}
    scrapy_own = {_distribution(dep) for dep in requires("scrapy") or [] if "extra ==" not in dep}
    extras = {folder: {_distribution(dep) for dep in project["optional-dependencies"][extra]}
              for extra, folder in EXTRA_PACKAGES.items()}
    provided_by = packages_distributions()

    # When listing the third-party modules each module imports outside TYPE_CHECKING
    undeclared = set()
    for path in PACKAGE.rglob("*.py"):
        allowed = declared | scrapy_own | extras.get(path.relative_to(PACKAGE).parts[0], set())
        third_party = _runtime_imports(path) - set(sys.stdlib_module_names) - {
            "scrapy_clustersync"}
        # Then each is installed by a declared dependency (or its sub-package's extra) or Scrapy
        undeclared |= {name for name in third_party
                       if not {_distribution(d) for d in provided_by.get(name, [name])}
                       & allowed}
    assert undeclared == set()
    # and what is needed for type checking only is no dependency of a node
    assert "typing-extensions" not in declared
