"""`clustersync serve`'s access control and errors, against a real redis-server and serve as a
subprocess: no token needed on loopback until one exists, then 401 without one and 403 for a
role too low; a bad body is 422 with a message and changes nothing in Redis; an unknown job is
404; Redis away is 503."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import redis
from api_serve import ServeProcess, bearer

from testkit.redis_server import RedisServer

from conftest import RedisFactory
from support import EXAMPLE_PROJECT, clustersync

JOB = "shop"


def seeded(server: RedisServer) -> None:
    seed = clustersync(server.url, "seed", JOB, "https://example.com/a",
                       "https://example.com/b", "--create")
    assert seed.returncode == 0, seed.output


def token(server: RedisServer, name: str, role: str) -> str:
    made = clustersync(server.url, "token", "add", name, "--role", role, "--json")
    assert made.returncode == 0, made.output
    secret: str = json.loads(made.stdout)["secret"]
    return secret


def snapshot(client: redis.Redis) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key of the Redis with its serialized value and TTL."""
    return {key: (client.dump(key), client.pttl(key)) for key in client.scan_iter(count=1000)}


def test_without_a_token_loopback_is_open_and_once_one_exists_every_request_needs_one(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a job and serve on loopback, while no token exists
    seeded(redis_server)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        # then a request needs no token, and is made as "local"
        assert serve.http.get("/api/whoami").json() == {
            "name": "local", "role": "admin", "tokens_needed": False}
        assert "requests need no token" in serve.log()
        # when tokens exist
        viewer, operator = token(redis_server, "viewer", "read"), token(
            redis_server, "oncall", "operator")
        # then a request without one, or with one not known, is 401
        for headers in ({}, bearer("csk_not-a-token"), {"Authorization": "Basic abc"}):
            refused = serve.http.get(f"/api/jobs/{JOB}", headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]
        # and a read token reads but may not pause (403), an operator token may
        assert serve.http.get(f"/api/jobs/{JOB}", headers=bearer(viewer)).status_code == 200
        denied = serve.http.post(f"/api/jobs/{JOB}/pause", headers=bearer(viewer))
        assert denied.status_code == 403
        assert "needs role 'operator'" in denied.json()["error"]
        assert redis_server.client().hget(f"clustersync:{{{JOB}}}:meta", "control") is None
        paused = serve.http.post(f"/api/jobs/{JOB}/pause", headers=bearer(operator))
        assert paused.status_code == 200 and paused.json()["after"] == "paused"
        # and the pause is recorded as the operator's
        audit = serve.http.get("/api/audit", headers=bearer(viewer)).json()
        assert [a["action"] for a in audit] == ["pause", "token add", "token add"]
        assert audit[0]["who"] == "oncall" and audit[1]["detail"] == {
            "name": "oncall", "role": "operator"}
        # when the operator's token is revoked, its next request is 401
        assert clustersync(redis_server.url, "token", "revoke", "oncall").returncode == 0
        gone = serve.http.post(f"/api/jobs/{JOB}/resume", headers=bearer(operator))
        assert gone.status_code == 401


def test_a_bad_body_is_422_with_what_was_wrong_and_changes_nothing_in_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a job, an admin token and serve
    seeded(redis_server)
    admin = bearer(token(redis_server, "root", "admin"))
    client = redis_server.client()
    with ServeProcess(redis_server.url, tmp_path) as serve:
        before = snapshot(client)
        # when bodies that do not fit are sent
        bad = [
            ("POST", f"/api/jobs/{JOB}/seed", '{"urls": "https://example.com/c"}',
             "body.urls: Input should be a valid list"),
            ("POST", f"/api/jobs/{JOB}/seed", '{"urls": ["https://example.com/c", "nope"]}',
             "'nope' has no scheme"),
            ("POST", f"/api/jobs/{JOB}/seed", '{"urls": ["https://example.com/c"], "prio": 1}',
             "body.prio: Extra inputs are not permitted"),
            ("POST", f"/api/jobs/{JOB}/seed", '{"urls": [', "JSON decode error"),
            ("PUT", f"/api/jobs/{JOB}/settings", '{"set": {"DOWNLOAD_DELAY": "slow"}}',
             "DOWNLOAD_DELAY = slow is refused"),
            ("PUT", f"/api/jobs/{JOB}/settings", '{"set": {"DOWNLOAD_DELAY": 1, "NOPE": 2}}',
             "unknown setting 'NOPE'"),
            ("PUT", f"/api/jobs/{JOB}/settings", "{}", "give `set`"),
            ("POST", f"/api/jobs/{JOB}/dead/requeue", '{"ids": []}', "or `all: true`"),
            ("POST", f"/api/jobs/{JOB}/check", '{"repair": "maybe"}',
             "body.repair: Input should be a valid boolean"),
        ]
        for method, path, body, expected in bad:
            answer = serve.http.request(method, path, content=body, headers={
                **admin, "Content-Type": "application/json"})
            # then each is 422, saying what was wrong
            assert answer.status_code == 422, (path, body, answer.text)
            assert expected in answer.json()["error"], (body, answer.json())
        # and Redis holds exactly what it held
        assert snapshot(client) == before
        # and an unknown job is 404, a name no job can have 422
        assert serve.http.get("/api/jobs/nothere", headers=admin).status_code == 404
        assert serve.http.post("/api/jobs/nothere/pause", headers=admin).status_code == 404
        assert serve.http.get("/api/jobs/bad%20name", headers=admin).status_code == 422
        assert snapshot(client) == before
        # when a good change is sent, it is made, and the history says by whom
        changed = serve.http.put(f"/api/jobs/{JOB}/settings", headers=admin,
                                 json={"set": {"DOWNLOAD_DELAY": 0.25}})
        assert changed.status_code == 200 and changed.json()["version"] == 1, changed.text
        history = serve.http.get(f"/api/jobs/{JOB}/settings/history", headers=admin).json()
        assert [(h["who"], h["key"], h["new"]) for h in history] == [
            ("api:root", "DOWNLOAD_DELAY", 0.25)]


def test_redis_away_is_503(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    # given serve of a Redis that then stops
    server = redis_factory()
    seeded(server)
    with ServeProcess(server.url, tmp_path) as serve:
        server.stop()
        # then a read is 503, saying Redis could not be reached
        answer = serve.http.get(f"/api/jobs/{JOB}")
        assert answer.status_code == 503
        assert "could not be reached" in answer.json()["error"]
        # and so are the metrics: the tokens cannot be checked (Prometheus's `up` is 0)
        assert serve.http.get("/metrics").status_code == 503


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key, and that key (PEM files)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_serve_speaks_https_with_the_certificate_it_is_given(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given serve with a certificate and its key
    seeded(redis_server)
    cert, key = self_signed(tmp_path)
    with ServeProcess(redis_server.url, tmp_path, "--ssl-certfile", str(cert),
                      "--ssl-keyfile", str(key),
                      verify=ssl.create_default_context(cafile=str(cert))) as serve:
        # then a client that trusts the certificate reads the jobs over HTTPS
        answer = serve.http.get("/api/jobs")
        assert answer.status_code == 200 and [j["job"] for j in answer.json()] == [JOB]
        assert serve.base_url.startswith("https://")


def test_a_seed_inside_a_project_is_checked_against_the_jobs_spider_then_queued(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given serve run inside the example project, whose spider "site" runs job "site"
    with ServeProcess(redis_server.url, tmp_path, cwd=EXAMPLE_PROJECT) as serve:
        # when URLs are seeded with a callback the spider lacks
        refused = serve.http.post("/api/jobs/site/seed", json={
            "urls": ["https://example.com/a"], "callback": "parse_nothing", "create": True})
        # then nothing is written, and the error names the spider's methods
        assert refused.status_code == 422 and "parse_nothing" in refused.json()["error"]
        assert not redis_server.client().exists("clustersync:{site}:meta")
        # when they are seeded into the new job with a method it has
        seeded = serve.http.post("/api/jobs/site/seed", json={
            "urls": ["https://example.com/a", "https://example.com/b", "https://example.com/a"],
            "callback": "parse", "create": True, "priority": 5})
        # then each URL is queued once, as `clustersync seed` queues them
        assert seeded.status_code == 200, seeded.text
        assert seeded.json() == {"job": "site", "seeded": 2, "already_seen": 1}
        status = cli_status(redis_server, "site")
        assert status["queued"] == 2 and status["counters"]["pushed"] == 2
        # and a job not there without create is 404
        missing = serve.http.post("/api/jobs/other/seed", json={"urls": ["https://x.org/"]})
        assert missing.status_code == 404


def cli_status(server: RedisServer, job: str) -> dict[str, Any]:
    answer = clustersync(server.url, "status", job, "--json")
    assert answer.returncode == 0, answer.output
    status: dict[str, Any] = json.loads(answer.stdout)
    return status


def test_serve_with_two_workers_answers_alike_from_either(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given serve with two worker processes and a token (each worker reads it from Redis)
    seeded(redis_server)
    viewer = bearer(token(redis_server, "viewer", "read"))
    with ServeProcess(redis_server.url, tmp_path, "--workers", "2") as serve:
        # then every request is answered, whichever worker takes it, with the same rules
        close = {"Connection": "close"}  # a new connection each: either worker may take it
        for _ in range(10):
            answer = serve.http.get(f"/api/jobs/{JOB}", headers={**viewer, **close})
            assert answer.json()["queued"] == 2
            assert serve.http.get(f"/api/jobs/{JOB}", headers=close).status_code == 401
        assert serve.http.post(f"/api/jobs/{JOB}/pause", headers=viewer).status_code == 403
