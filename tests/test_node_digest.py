"""Two nodes started from the same project with the same settings report the same digest, in
separate processes (hash seeds differ), so ``clustersync status`` can tell when they do not."""

from __future__ import annotations

import os
import subprocess
import sys

from support import EXAMPLE_PROJECT

DIGEST_OF_PROJECT = """
import sys
from scrapy.settings import Settings
from scrapy.spiderloader import SpiderLoader
from scrapy.utils.project import get_project_settings
from scrapy_clustersync.node.project_digest import project_digest

settings = get_project_settings()
for pair in sys.argv[1:]:
    name, value = pair.split("=", 1)
    settings.set(name, value, priority="cmdline")
spider = SpiderLoader.from_settings(settings).load("site")
print(project_digest(settings, spider))
"""


def digest_in_a_process(hash_seed: str, *settings: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run([sys.executable, "-c", DIGEST_OF_PROJECT, *settings],
                            cwd=EXAMPLE_PROJECT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_same_project_gives_the_same_digest_in_every_process_and_a_setting_changes_it() -> None:
    # given the example project, in processes with different hash seeds
    first = digest_in_a_process("1", "LOG_FILE=/tmp/one.log")
    # when only a per-node setting differs, then the digest is the same
    assert digest_in_a_process("2", "LOG_FILE=/tmp/two.log") == first
    # when a setting that changes the crawl differs, then it differs
    assert digest_in_a_process("1", "DOWNLOAD_DELAY=1") != first
