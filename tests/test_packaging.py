"""The wheel users install holds the runtime package, whole, and none of the dev and test kit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "scrapy_clustersync"
#: what is not source: left by builds, installs and tools (a stale build/ would leak into a wheel)
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".demo",
    ".clustersync-spool", "results",
)


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every path in the wheel ``pip wheel`` builds from a clean copy of this checkout."""
    workdir = tmp_path_factory.mktemp("wheel")
    source, dist = workdir / "source", workdir / "dist"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCE)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--quiet", "--wheel-dir", str(dist), str(source)]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_wheel_holds_no_test_helpers(wheel_files: set[str]) -> None:
    # Given the wheel built from this checkout
    # When listing its top-level entries
    top_level = {name.split("/", 1)[0] for name in wheel_files}

    # Then there is the runtime package and its metadata, nothing of the kit, tests or bench
    assert {entry for entry in top_level if not entry.endswith(".dist-info")} == {
        "scrapy_clustersync"
    }
    assert not [name for name in wheel_files if "testkit" in name or "/testing/" in name]


def test_the_wheel_ships_every_module_lua_script_and_py_typed(wheel_files: set[str]) -> None:
    # Given the runtime files of the source package
    runtime = {
        path.relative_to(REPO_ROOT).as_posix()
        for pattern in ("**/*.py", "store/lua/*.lua", "py.typed")
        for path in PACKAGE.glob(pattern)
        if "__pycache__" not in path.parts
    }

    # Then the wheel holds every one of them
    assert "scrapy_clustersync/store/lua/lease.lua" in runtime
    assert "scrapy_clustersync/py.typed" in runtime
    assert runtime - wheel_files == set()
