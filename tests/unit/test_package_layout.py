"""The package's shape: no import cycle, and only the store layer talks to redis-py."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scrapy_clustersync"


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
