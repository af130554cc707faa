"""CLUSTERSYNC_REDIS_URL forms users run: ACL user and password, unix socket, TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scrapy_clustersync.config import TlsOptions
from scrapy_clustersync.store import JobStore, StoreUnavailable, make_client
from scrapy_clustersync.store.errors import AccessRefused
from testkit.redis_server import free_port

from conftest import RedisFactory, SiteFactory
from support import missing_pages, start_node, wait_all

ACL_USER = ["--user", "crawler", "on", ">s3cret", "~*", "&*", "+@all"]


def joins(url: str, tls: TlsOptions | None = None) -> bool:
    store = JobStore(make_client(url, tls), "job", "n1")
    return store.join(ttl_ms=1000)[1]


def test_acl_user_and_password_in_the_url(redis_factory: RedisFactory) -> None:
    redis = redis_factory(extra_args=ACL_USER)
    assert joins(f"redis://crawler:s3cret@127.0.0.1:{redis.port}/0") is True
    # a refusal, not an outage: retrying never helps, the URL must change
    with pytest.raises(AccessRefused, match="(?i)invalid username-password|WRONGPASS"):
        joins(f"redis://crawler:wrong@127.0.0.1:{redis.port}/0")


def test_unix_socket_url(redis_factory: RedisFactory, tmp_path: Path) -> None:
    socket = tmp_path / "redis.sock"
    redis_factory(extra_args=["--unixsocket", str(socket), "--unixsocketperm", "700"])
    assert joins(f"unix://{socket}?db=0") is True


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: apt-get install openssl")
    files = {name: directory / f"{name}.pem" for name in
             ("ca", "ca-key", "server", "server-key", "client", "client-key")}

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", str(files["ca-key"]), "-out", str(files["ca"]))
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        csr = directory / f"{who}.csr"
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
            "-keyout", str(files[f"{who}-key"]), "-out", str(csr))
        run("x509", "-req", "-in", str(csr), "-CA", str(files["ca"]), "-CAkey",
            str(files["ca-key"]), "-CAcreateserial", "-days", "2", "-extfile", str(ext),
            "-out", str(files[who]))
    return files


def tls_redis(redis_factory: RedisFactory, tmp_path: Path) -> tuple[int, dict[str, Path]]:
    certs = make_certificates(tmp_path)
    tls_port = free_port()
    redis_factory(extra_args=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs["server"]),
        "--tls-key-file", str(certs["server-key"]), "--tls-ca-cert-file", str(certs["ca"]),
        "--tls-auth-clients", "yes",
    ])
    return tls_port, certs


def test_tls_with_a_ca_and_a_client_certificate(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    tls_port, certs = tls_redis(redis_factory, tmp_path)
    url = f"rediss://127.0.0.1:{tls_port}/0"
    tls = TlsOptions(ca_certs=str(certs["ca"]), certfile=str(certs["client"]),
                     keyfile=str(certs["client-key"]))
    assert joins(url, tls) is True
    with pytest.raises(StoreUnavailable):  # no client certificate: the server refuses
        joins(url, TlsOptions(ca_certs=str(certs["ca"])))


def test_a_crawl_over_tls(redis_factory: RedisFactory, site: SiteFactory, tmp_path: Path) -> None:
    tls_port, certs = tls_redis(redis_factory, tmp_path)
    web = site(80)
    settings = {"CLUSTERSYNC_TLS_CA_CERTS": str(certs["ca"]),
                "CLUSTERSYNC_TLS_CERTFILE": str(certs["client"]),
                "CLUSTERSYNC_TLS_KEYFILE": str(certs["client-key"])}
    node = start_node("node1", f"rediss://127.0.0.1:{tls_port}/0", web.start_url, tmp_path,
                      settings)
    wait_all([node])
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"
