"""``clustersync seed JOB -f FILE`` of 100,000 URLs into its own redis-server: URLs/s.

    python bench/seed.py [--urls 100000]

Runs the real command (a subprocess, start-up included) with Scrapy's default fingerprinter
and the default Bloom dedup, then checks that every URL is queued. Target: >= 20,000 URLs/s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

TARGET_URLS_PER_S = 20_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=100_000)
    count = parser.parse_args().urls
    with tempfile.TemporaryDirectory() as tmp:
        urls = Path(tmp) / "urls.txt"
        urls.write_text("".join(f"https://shop{i % 50}.example.com/item/{i}?ref=seed\n"
                                for i in range(count)))
        with RedisServer(Path(tmp) / "redis") as server:
            command = [sys.executable, "-m", "scrapy_clustersync.cli.app",
                       "--redis-url", server.url, "seed", "bench", "--create", "-f", str(urls)]
            began = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
            elapsed = time.perf_counter() - began
            if done.returncode != 0:
                sys.exit(f"seed failed: {done.stderr}")
            queued = JobStore(make_client(server.url), "bench", "bench").status().queued
    rate = count / elapsed
    verdict = "ok" if rate >= TARGET_URLS_PER_S and queued == count else "BELOW TARGET"
    print(f"seed: {count:,} URLs from a file in {elapsed:.2f} s = {rate:,.0f} URLs/s "
          f"(whole command, start-up included; target >= {TARGET_URLS_PER_S:,}); "
          f"{queued:,} queued: {verdict}")


if __name__ == "__main__":
    main()
