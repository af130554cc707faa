"""A node forked from the zygote (testkit/forked.py) is the process ``python -m scrapy crawl``
would have started: same view of its project, environment and reactor, same exit codes, and
the signals the fault tests send reach it."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit import nodes
from testkit.forked import ForkedNode, Zygote

from support import ZYGOTE, marks, node_env, open_barrier, project_with_spiders, wait_until

FACT_SPIDERS = """
    import json, os, re, signal, sys

    import scrapy

    from example.spiders.helpers import mark, wait_for


    class FactsSpider(scrapy.Spider):
        "Marks what the process looks like from inside, then closes without a request."
        name = "facts"

        async def start(self):
            from twisted.internet import reactor
            names = ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE", "SIGHUP")
            handlers = {name: re.sub(" at 0x[0-9a-f]+", "", str(signal.getsignal(
                            getattr(signal, name)))) for name in names}
            mark(self.settings.get("FACTS_TO"), json.dumps({
                "cwd": os.getcwd(), "given": os.environ.get("GIVEN"), "argv": sys.argv,
                "path0": sys.path[0], "pythonpath": sys.path.index(os.environ["EXTRA_DIR"]),
                "reactor": type(reactor).__name__, "stdin": sys.stdin.read(),
                "stdout_tty": sys.stdout.isatty(), "flags": str(sys.flags), "signals": handlers,
                "main": sys.modules["__main__"].__name__, "hash": hash("clustersync"),
                "settings": os.environ.get("SCRAPY_SETTINGS_MODULE"),
            }))
            return
            yield


    class WaitingSpider(scrapy.Spider):
        "Waits for the barrier 'go', then closes; or fails at once with -a fail=1."
        name = "waiting"

        def __init__(self, fail="", **kwargs):
            super().__init__(**kwargs)
            if fail:
                raise ValueError("asked to fail")

        async def start(self):
            mark("started", str(os.getpid()))
            await wait_for("go")
            return
            yield
"""

#: no add-on: these spiders need no Redis
NO_ADDON = {"ADDONS": "{}", "LOG_LEVEL": "INFO"}
Starter = Callable[..., nodes.NodeProcess]


@pytest.fixture
def facts_project(tmp_path: Path) -> Path:
    return project_with_spiders(tmp_path, "facts", FACT_SPIDERS)


def facts_of(start: Starter, project: Path, tmp_path: Path, name: str,
             env: dict[str, str] | None = None, **settings: str) -> dict[str, object]:
    """Start the facts spider with ``start`` and return what it marked about its process."""
    (tmp_path / "extra").mkdir(exist_ok=True)
    process = start("facts", cwd=project, log_path=tmp_path / f"{name}.log",
                    settings={**NO_ADDON, "FACTS_TO": name, **settings},
                    env=node_env(tmp_path, GIVEN=name, EXTRA_DIR=str(tmp_path / "extra"),
                                 **(env or {})),
                    pythonpath=[tmp_path / "extra"])
    assert process.wait(60) == 0, (tmp_path / f"{name}.log").read_text()
    return {**json.loads(marks(tmp_path, name)[0]), "started_as": type(process).__name__}


def test_a_forked_node_sees_what_a_plain_scrapy_crawl_process_sees(
        facts_project: Path, tmp_path: Path) -> None:
    # given: the same spider started as a plain subprocess and forked from the zygote
    plain = facts_of(nodes.start_node, facts_project, tmp_path, "plain-node")
    forked = facts_of(ZYGOTE.start_node, facts_project, tmp_path, "forked-node")
    # then: cwd, argv, sys.path, stdio, flags, signal handlers and reactor are alike
    assert_alike(plain, forked, seeds_alike=False)
    assert plain["reactor"] == "AsyncioSelectorReactor" and plain["path0"] == str(facts_project)


def assert_alike(plain: dict[str, object], forked: dict[str, object], seeds_alike: bool) -> None:
    """The facts of a "plain-node" and a "forked-node" differ only where their names do."""
    assert forked.pop("given") == "forked-node" and plain.pop("given") == "plain-node"
    assert (plain.pop("started_as"), forked.pop("started_as")) == ("Popen", "ForkedNode")
    plain["argv"] = [str(arg).replace("plain-node", "forked-node")
                     for arg in plain["argv"]]  # type: ignore[attr-defined]
    if not seeds_alike:
        forked.pop("hash"), plain.pop("hash")
    assert forked == plain


def test_a_forked_node_installs_the_reactor_its_settings_name(
        facts_project: Path, tmp_path: Path) -> None:
    # when: a forked node's settings ask for Twisted's select reactor
    facts = facts_of(ZYGOTE.start_node, facts_project, tmp_path, "select",
                     TWISTED_REACTOR="twisted.internet.selectreactor.SelectReactor")
    # then: it runs on that reactor, not on one the zygote chose
    assert facts["reactor"] == "SelectReactor"


def start_waiting(project: Path, tmp_path: Path, name: str, **args: str) -> nodes.NodeProcess:
    return ZYGOTE.start_node("waiting", cwd=project, log_path=tmp_path / f"{name}.log",
                             spider_args=args, settings=NO_ADDON, env=node_env(tmp_path))


def test_a_forked_node_reports_its_exit_code_and_the_signal_that_ended_it(
        facts_project: Path, tmp_path: Path) -> None:
    # given: a node that waits for a barrier
    node = start_waiting(facts_project, tmp_path, "waiting")
    assert isinstance(node, ForkedNode) and (tmp_path / "waiting.log").is_file()  # as Popen's
    # when: waited for too short, it is still running
    with pytest.raises(subprocess.TimeoutExpired):
        node.wait(0.2)
    assert node.poll() is None and node.returncode is None
    # when: SIGKILL: -9, as Popen reports it
    node.kill()
    assert node.wait(30) == -signal.SIGKILL and node.poll() == -signal.SIGKILL
    # when: a spider that fails to start: Scrapy's exit code 1
    failing = start_waiting(facts_project, tmp_path, "failing", fail="1")
    assert failing.wait(60) == 1 and "asked to fail" in (tmp_path / "failing.log").read_text()
    # when: the barrier opens for another node: exit code 0
    closing = start_waiting(facts_project, tmp_path, "closing")
    open_barrier(tmp_path, "go")
    assert closing.wait(60) == 0


def test_sigterm_reaches_a_forked_node_and_scrapy_shuts_it_down(
        facts_project: Path, tmp_path: Path) -> None:
    # given: a node whose spider has started (it marked its own pid)
    node = start_waiting(facts_project, tmp_path, "stopped")
    wait_until(lambda: bool(marks(tmp_path, "started")), 60, "the spider to start")
    assert marks(tmp_path, "started") == [str(node.pid)]
    # when: SIGTERM
    node.terminate()
    # then: Scrapy's own handler closes the spider and the process ends
    assert node.wait(60) == 0
    assert "Received SIGTERM, shutting down gracefully" in (tmp_path / "stopped.log").read_text()


def test_a_node_whose_environment_sets_interpreter_options_is_started_plain(
        facts_project: Path, tmp_path: Path) -> None:
    # when: the environment sets PYTHONHASHSEED, which acts at interpreter start-up only
    open_barrier(tmp_path, "go")
    process = ZYGOTE.start_node("waiting", cwd=facts_project, log_path=tmp_path / "h.log",
                                settings=NO_ADDON, env=node_env(tmp_path, PYTHONHASHSEED="0"))
    # then: it is a plain subprocess, where the option takes effect
    assert isinstance(process, subprocess.Popen) and process.wait(60) == 0


def test_a_zygote_started_with_a_hash_seed_forks_nodes_that_hash_as_plain_ones_do(
        facts_project: Path, tmp_path: Path) -> None:
    # given: a zygote whose interpreter starts with PYTHONHASHSEED=0
    zygote = Zygote({"PYTHONHASHSEED": "0"})
    seeded = {"PYTHONHASHSEED": "0"}
    try:
        # when: the same spider runs plain and forked from it, both with PYTHONHASHSEED=0
        plain = facts_of(nodes.start_node, facts_project, tmp_path, "plain-node", seeded)
        forked = facts_of(zygote.start_node, facts_project, tmp_path, "forked-node", seeded)
    finally:
        zygote.stop()
    # then: the forked one is alike, down to its str hashes
    assert_alike(plain, forked, seeds_alike=True)
