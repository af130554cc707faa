"""The `clustersync` command against a real redis-server, run in-process (cli_runner.py);
its entry points as real processes at the end. Argument checks: tests/unit/test_cli.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

from cli_runner import CliRun, run_cli
from conftest import RedisFactory


def clustersync(*args: str, url: str | None = None, stdin: str | None = None) -> CliRun:
    return run_cli(url, *args, input=stdin)


def test_seed_then_status_shows_the_queue(redis_server: RedisServer) -> None:
    seeded = clustersync("seed", "shop", "--create", "http://a/1", "http://a/2", "http://a/1",
                         url=redis_server.url)
    assert seeded.returncode == 0, seeded.stderr
    assert "seeded 2 request(s)" in seeded.stdout and "1 already seen" in seeded.stdout
    status = json.loads(clustersync("status", "shop", "--json", url=redis_server.url).stdout)
    assert (status["queued"], status["seen"], status["state"]) == (2, 2, "waiting for nodes")
    # a small job keeps its fingerprints in an exact set: no Bloom filter allocated yet
    assert status["dedup"]["mode"] == "bloom" and status["dedup"]["stage"] == "exact set"
    assert (status["dedup"]["layers"], status["dedup"]["exact_entries"]) == (0, 2)
    text = clustersync("status", "shop", url=redis_server.url).stdout
    assert "exact set of 2 fingerprints, until the job is big enough for its Bloom filter" in text


def test_purge_needs_yes_and_then_deletes_only_that_job(redis_server: RedisServer) -> None:
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    clustersync("seed", "other", "--create", "http://a/1", url=redis_server.url)
    refused = clustersync("purge", "shop", url=redis_server.url)
    assert refused.returncode != 0 and "--yes" in refused.stderr
    assert clustersync("purge", "shop", "--yes", url=redis_server.url).returncode == 0
    client = make_client(redis_server.url)
    assert JobStore(client, "shop", "t").status().exists is False
    assert JobStore(client, "other", "t").status().queued == 1


def test_status_of_a_job_that_does_not_exist_is_a_clear_error(redis_server: RedisServer) -> None:
    missing = clustersync("status", "nope", url=redis_server.url)
    assert missing.returncode != 0 and "job 'nope' does not exist" in missing.stderr


def test_unreachable_redis_exits_4_with_a_message_not_a_traceback() -> None:
    result = clustersync("status", "shop", url="redis://127.0.0.1:1/0")
    assert result.returncode == 4
    assert "127.0.0.1:1/0 (from --redis-url) could not be reached" in result.stderr
    assert "Traceback" not in result.stderr


def test_jobs_lists_every_job_with_its_figures(redis_server: RedisServer) -> None:
    # given two jobs, one with two URLs queued
    clustersync("seed", "shop", "--create", "http://a/1", "http://a/2", url=redis_server.url)
    clustersync("seed", "news", "--create", "http://b/1", url=redis_server.url)
    # when the jobs are listed
    listed = clustersync("jobs", "--json", url=redis_server.url)
    # then both are there, with state, queued, done and live nodes
    assert listed.returncode == 0, listed.stderr
    rows = {row["job"]: row for row in json.loads(listed.stdout)}
    assert sorted(rows) == ["news", "shop"]
    assert (rows["shop"]["queued"], rows["shop"]["done"], rows["shop"]["nodes"]) == (2, 0, 0)
    assert rows["shop"]["state"] == "waiting for nodes"
    assert "news" in clustersync("jobs", url=redis_server.url).stdout


def test_jobs_lists_a_job_it_cannot_read_as_unknown_beside_the_others(
    redis_server: RedisServer,
) -> None:
    # given two jobs, one of them with a queue key of the wrong type (another program's)
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    clustersync("seed", "news", "--create", "http://b/1", url=redis_server.url)
    client = make_client(redis_server.url)
    queue = JobStore(client, "news", "t").keys.queue
    client.delete(queue)
    client.set(queue, "not a queue")
    # when the jobs are listed
    listed = clustersync("jobs", "--json", url=redis_server.url)
    table = clustersync("jobs", url=redis_server.url)
    # then the readable job is listed as usual and the other as unknown, with why
    assert listed.returncode == 0 and table.returncode == 0, listed.stderr + table.stderr
    rows = {row["job"]: row for row in json.loads(listed.stdout)}
    assert rows["shop"]["queued"] == 1
    assert rows["news"]["state"] == "unknown" and "WRONGTYPE" in rows["news"]["error"]
    assert "unknown" in table.stdout and "job 'news' cannot be read" in table.stdout


@pytest.mark.parametrize("command", [
    "status nope", "status nope --json", "dead nope", "purge nope --yes", "seed nope http://a/1",
])
def test_an_unknown_job_exits_3_in_every_command(redis_server: RedisServer, command: str) -> None:
    # given a Redis with one job, "shop"
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    # when a command names a job that does not exist
    result = clustersync(*command.split(), url=redis_server.url)
    # then it fails with exit code 3, says so and how to list the jobs, and creates nothing
    assert result.returncode == 3, result.stdout + result.stderr
    assert "job 'nope' does not exist" in result.stderr and "clustersync jobs" in result.stderr
    assert result.stdout == ""
    assert JobStore(make_client(redis_server.url), "nope", "t").status().exists is False


def test_piped_status_is_not_cut_at_80_columns(redis_server: RedisServer) -> None:
    # given a job with a node whose id is far wider than a terminal
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    node_id = "node-" + "x" * 120
    store = JobStore(make_client(redis_server.url), "shop", node_id)
    epoch, _ = store.join(ttl_ms=60_000)
    store.heartbeat(epoch, ttl_ms=60_000, lease_ms=60_000, idle=False, idle_after_ms=1000,
                    lease_ids=[], info={"pages": 12, "pages_per_min": 30.0})
    # when status is piped (captured)
    result = clustersync("status", "shop", url=redis_server.url)
    # then the node id is whole, on one line, and the rate and the start() holder are shown
    assert result.returncode == 0, result.stderr
    assert any(node_id in line for line in result.stdout.splitlines())
    assert "pages/min" in result.stdout and "30.0" in result.stdout
    assert f"start()      run by {node_id} (running)" in result.stdout


def test_seed_reads_a_file_and_stdin_skipping_blanks_and_comments(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a file of URLs with a comment and a blank line
    urls = tmp_path / "urls.txt"
    urls.write_text("# the shop\nhttp://a/1\n\nhttp://a/2\n")
    # when it is seeded from the file, then more from stdin
    from_file = clustersync("seed", "shop", "--create", "-f", str(urls), url=redis_server.url)
    from_stdin = clustersync("seed", "shop", "-f", "-", url=redis_server.url,
                             stdin="http://a/2\nhttp://a/3\n")
    # then each URL is queued once
    assert from_file.returncode == 0 and "seeded 2 request(s)" in from_file.stdout
    assert "seeded 1 request(s)" in from_stdin.stdout and "1 already seen" in from_stdin.stdout
    assert JobStore(make_client(redis_server.url), "shop", "t").status().queued == 3


def test_seed_refuses_a_url_without_a_host_before_writing(redis_server: RedisServer) -> None:
    result = clustersync("seed", "shop", "--create", "http://a/1", "http://",
                         url=redis_server.url)
    assert result.returncode == 2 and "'http://' has no host" in result.stderr
    assert JobStore(make_client(redis_server.url), "shop", "t").status().exists is False


def test_a_large_seed_is_refused_whole_for_one_bad_line_near_its_end(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given 12,000 URLs (enough for the worker processes) whose line 11,990 has no scheme
    lines = [f"https://shop.example/item/{i}" for i in range(12_000)]
    lines[11_989] = "shop.example/item/oops"
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(lines) + "\n")
    # when it is seeded
    result = clustersync("seed", "shop", "--create", "-f", str(urls), url=redis_server.url)
    # then the error names the line and nothing was written
    assert result.returncode == 2, result.stderr
    assert f"line 11990 of {urls}" in result.stderr and "nothing was seeded" in result.stderr
    assert JobStore(make_client(redis_server.url), "shop", "t").status().exists is False


def test_a_large_seed_queues_every_url_once_and_a_second_seed_finds_them_seen(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given 12,000 distinct URLs, each written twice in a form Scrapy treats as the same URL
    # (query arguments in another order), so the workers' fingerprints must agree
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"https://shop.example/item?id={i}&page=2\n" for i in range(12_000))
                    + "".join(f"https://shop.example/item?page=2&id={i}\n"
                              for i in range(12_000)))
    # when the file is seeded, then seeded again
    first = clustersync("seed", "shop", "--create", "-f", str(urls), url=redis_server.url)
    again = clustersync("seed", "shop", "-f", str(urls), url=redis_server.url)
    # then each URL is queued once
    assert first.returncode == 0, first.stderr
    assert "seeded 12000 request(s)" in first.stdout and "12000 already seen" in first.stdout
    assert "seeded 0 request(s)" in again.stdout and "24000 already seen" in again.stdout
    assert JobStore(make_client(redis_server.url), "shop", "t").status().queued == 12_000


def test_a_wrong_password_exits_4_saying_redis_refused_the_client(
    redis_factory: RedisFactory,
) -> None:
    # given a Redis that needs a password, and a URL with the wrong one
    server = redis_factory(password="right")
    url = server.url.replace(":right@", ":wrong@")
    # when a command runs
    result = clustersync("jobs", url=url)
    # then it says Redis refused this client, without printing the password
    assert result.returncode == 4, result.output
    assert "refused this client" in result.stderr and "wrong" not in result.stderr


def test_job_left_out_is_the_only_job_on_the_redis(redis_server: RedisServer) -> None:
    # given one job on the Redis
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    # when status, nodes and tasks run without JOB (and without a project)
    status = clustersync("status", "--json", url=redis_server.url)
    tasks = clustersync("tasks", "--json", url=redis_server.url)
    # then they are about that job
    assert status.returncode == 0, status.output
    assert (json.loads(status.stdout)["job"], json.loads(status.stdout)["queued"]) == ("shop", 1)
    assert tasks.returncode == 0 and json.loads(tasks.stdout) == []


def test_job_left_out_with_several_jobs_is_a_usage_error_naming_them(
    redis_server: RedisServer,
) -> None:
    # given two jobs on the Redis
    for job in ("shop", "news"):
        clustersync("seed", job, "--create", "http://a/1", url=redis_server.url)
    # when a command runs without JOB
    result = clustersync("pause", url=redis_server.url)
    # then it refuses with a usage error naming both, and pauses nothing
    assert result.returncode == 2, result.output
    assert "no JOB given and 2 jobs on the Redis at" in result.stderr
    assert "(news, shop)" in result.stderr and "Usage: clustersync pause" in result.stderr
    assert json.loads(clustersync("status", "shop", "--json", url=redis_server.url).stdout)[
        "control"] == "running"


def test_job_left_out_with_no_job_on_the_redis_is_a_usage_error(
    redis_server: RedisServer,
) -> None:
    result = clustersync("seed", "--create", "http://a/1", url=redis_server.url)
    assert result.returncode == 2, result.output
    assert "no JOB given and there is no job on the Redis at" in result.stderr
    assert "CLUSTERSYNC_JOB" in result.stderr


def test_settings_given_after_the_command_apply_as_before_it(redis_server: RedisServer) -> None:
    # given two jobs, and no --redis-url
    for job in ("shop", "news"):
        clustersync("seed", job, "--create", "http://a/1", url=redis_server.url)
    # when the Redis URL and the job are given with -s after the command, or before it
    after = run_cli(None, "status", "--json", "-s", f"CLUSTERSYNC_REDIS_URL={redis_server.url}",
                    "-s", "CLUSTERSYNC_JOB=news")
    before = run_cli(None, "-s", f"CLUSTERSYNC_REDIS_URL={redis_server.url}", "status",
                     "-s", "CLUSTERSYNC_JOB=shop", "--json")
    # then both are read as the project's settings would be
    assert after.returncode == 0 and before.returncode == 0, after.output + before.output
    assert json.loads(after.stdout)["job"] == "news"
    assert json.loads(before.stdout)["job"] == "shop"


@pytest.mark.parametrize("command", [
    "jobs", "status shop", "status shop --check", "nodes shop", "check shop", "dead shop",
    "failed shop", "tasks shop", "top shop -n 1", "seed shop http://a/2", "pause shop",
    "resume shop", "stop shop", "restart shop --force", "purge shop --yes",
])
def test_every_command_that_prints_data_prints_json_with_json(redis_server: RedisServer,
                                                               command: str) -> None:
    # given a job with one URL queued
    clustersync("seed", "shop", "--create", "http://a/1", url=redis_server.url)
    # when the command runs with --json
    result = clustersync(*command.split(), "--json", url=redis_server.url)
    # then its output is JSON (top: a document per refresh, a line each)
    assert result.returncode == 0, result.output
    documents = [json.loads(line) for line in result.stdout.splitlines()] \
        if command.startswith("top") else [json.loads(result.stdout)]
    assert documents and all(isinstance(d, (dict, list)) for d in documents)
    if isinstance(documents[0], dict) and "job" in documents[0]:
        assert documents[0]["job"] == "shop"


def test_seed_and_purge_json_say_what_they_did(redis_server: RedisServer) -> None:
    seeded = clustersync("seed", "shop", "--create", "http://a/1", "http://a/1", "--json",
                         url=redis_server.url)
    assert json.loads(seeded.stdout) == {"job": "shop", "seeded": 1, "already_seen": 1}
    purged = json.loads(clustersync("purge", "shop", "--yes", "--json",
                                    url=redis_server.url).stdout)
    assert purged["job"] == "shop" and purged["deleted_keys"] > 0


# The entry points, as real processes: the console script, `python -m`, and (in
# test_cli_project.py) `scrapy clustersync`; each with an exit code a script relies on.


def test_the_clustersync_script_exits_3_for_a_job_that_does_not_exist(
    redis_server: RedisServer,
) -> None:
    script = shutil.which("clustersync", path=str(Path(sys.executable).parent))
    assert script is not None, "the clustersync entry point is not installed"
    result = subprocess.run([script, "--redis-url", redis_server.url, "status", "nope"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "job 'nope' does not exist" in result.stderr and result.stdout == ""


def test_python_m_exits_4_when_redis_cannot_be_reached_and_0_for_help() -> None:
    command = [sys.executable, "-m", "scrapy_clustersync.cli"]
    failed = subprocess.run([*command, "--redis-url", "redis://127.0.0.1:1/0", "jobs"],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 4, failed.stderr
    assert "could not be reached" in failed.stderr and "Traceback" not in failed.stderr
    helped = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "Exit codes:" in helped.stdout
