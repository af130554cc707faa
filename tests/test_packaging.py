"""The wheel users install holds the runtime package, whole, and none of the dev and test kit."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "scrapy_clustersync"
#: what is not source: left by builds, installs and tools (a stale build/ would leak into a wheel)
_NOT_SOURCE_NAMES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".demo",
    ".clustersync-spool",
)


def NOT_SOURCE(folder: str, names: list[str]) -> set[str]:  # noqa: N802 (a copytree ignore)
    """What copytree leaves out: the names above anywhere, and bench/results (the benchmarks'
    output; the package's own ``results`` sub-package is source)."""
    ignored = set(_NOT_SOURCE_NAMES(folder, names))
    if Path(folder).name == "bench" and "results" in names:
        ignored.add("results")
    return ignored


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel`` builds from a clean copy of this checkout."""
    workdir = tmp_path_factory.mktemp("wheel")
    source, dist = workdir / "source", workdir / "dist"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCE)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--quiet", "--wheel-dir", str(dist), str(source)]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (built_wheel,) = dist.glob("*.whl")
    return built_wheel


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> set[str]:
    """Every path in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _dist_info(wheel: Path, name: str) -> str:
    """The text of ``name`` (``METADATA``, ``entry_points.txt``) in the wheel's dist-info."""
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [p for p in archive.namelist() if p.endswith(f".dist-info/{name}")]
        return archive.read(path).decode()


def test_the_wheel_holds_no_test_helpers(wheel_files: set[str]) -> None:
    # Given the wheel built from this checkout
    # When listing its top-level entries
    top_level = {name.split("/", 1)[0] for name in wheel_files}

    # Then there is the runtime package and its metadata, nothing of the kit, tests or bench
    assert {entry for entry in top_level if not entry.endswith(".dist-info")} == {
        "scrapy_clustersync"
    }
    assert not [name for name in wheel_files if "testkit" in name or "/testing/" in name]
    # and no folder of the checkout's kit inside the package either
    kit = ("tests", "testkit", "bench", "compat", "example_project", "scripts")
    assert not [name for name in wheel_files if set(name.split("/")[:-1]) & set(kit)]


def test_the_wheel_ships_every_module_lua_script_and_py_typed(wheel_files: set[str]) -> None:
    # Given the runtime files of the source package
    runtime = {
        path.relative_to(REPO_ROOT).as_posix()
        for pattern in ("**/*.py", "store/lua/*.lua", "api/*.html", "py.typed")
        for path in PACKAGE.glob(pattern)
        if "__pycache__" not in path.parts
    }

    # Then the wheel holds every one of them
    assert "scrapy_clustersync/store/lua/lease.lua" in runtime
    assert "scrapy_clustersync/py.typed" in runtime
    assert "scrapy_clustersync/api/dashboard.html" in runtime  # serve's dashboard
    assert runtime - wheel_files == set()


def test_the_commands_the_wheel_installs_point_into_modules_it_holds(
    wheel: Path, wheel_files: set[str]
) -> None:
    # Given the entry points of the wheel: the `clustersync` script and `scrapy clustersync`
    entry_points = configparser.ConfigParser()
    entry_points.read_string(_dist_info(wheel, "entry_points.txt"))
    targets = {section: dict(entry_points[section]) for section in entry_points.sections()}
    assert set(targets["console_scripts"]) == {"clustersync"}
    assert set(targets["scrapy.commands"]) == {"clustersync"}

    # Then each names a module of the wheel (a package's __init__ or a module file)
    for target in [*targets["console_scripts"].values(), *targets["scrapy.commands"].values()]:
        module = target.split(":")[0].replace(".", "/")
        assert {f"{module}.py", f"{module}/__init__.py"} & wheel_files, target


def test_a_node_installs_no_dependency_it_needs_only_for_type_checking(wheel: Path) -> None:
    # Given the wheel's declared dependencies, without the optional extras
    metadata = _dist_info(wheel, "METADATA")
    required = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]

    # Then Scrapy and Redis are among them, typing_extensions (mypy's) is not
    names = {line.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip().lower()
             for line in required}
    assert {"scrapy", "redis", "msgpack"} <= names
    assert "typing-extensions" not in names and "typing_extensions" not in names
