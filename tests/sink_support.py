"""Databases of its own for each sink test: a fresh database on the machine's PostgreSQL
(127.0.0.1:5432, trust auth) or MariaDB (127.0.0.1:3306, root without a password), dropped
afterwards, or an SQLite file in tmp. A server that does not answer skips the test locally
and fails it under CI=true (as a missing redis-server does)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

SERVERS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/",
    "mariadb": "mysql+pymysql://root@127.0.0.1:3306/",
}
#: what the sink is given (its own scheme, no driver named)
SINK_PREFIX = {"postgresql": "postgresql://postgres@127.0.0.1:5432/",
               "mariadb": "mysql://root@127.0.0.1:3306/"}


def _unavailable(what: str, exc: Exception) -> None:
    message = f"{what} is not reachable here: {exc}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def database_url(kind: str, tmp_path: Path) -> Generator[str, None, None]:
    """A URL of an empty database of ``kind`` (sqlite, postgresql, mariadb), as the sink takes
    it; the database is dropped after the test."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'results.db'}"
        return
    name = f"cs_readers_{uuid.uuid4().hex[:10]}"
    admin_url = SERVERS[kind] + ("postgres" if kind == "postgresql" else "")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    except DBAPIError as exc:
        admin.dispose()
        _unavailable(kind, exc)
    try:
        yield SINK_PREFIX[kind] + name
    finally:
        with admin.connect() as conn:
            if kind == "postgresql":
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


def rows_of(url: str, table: str, columns: str = "id") -> list[tuple[object, ...]]:
    """Every row of ``table`` (the columns named), by id; [] while the table is missing."""
    scheme, _, rest = url.partition("://")
    driver = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}.get(scheme, scheme)
    engine = create_engine(f"{driver}://{rest}")
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in
                    conn.execute(text(f"SELECT {columns} FROM {table} ORDER BY id"))]
    except DBAPIError:
        return []
    finally:
        engine.dispose()


def drain_queue(url: str, queue: str) -> list[dict[str, Any]]:
    """Every message of ``queue`` (taken off it), each checked to carry its result id as
    ``message_id``, as the JSON objects they hold."""
    return asyncio.run(_drain(url, queue))


async def _drain(url: str, queue: str) -> list[dict[str, Any]]:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        declared = await channel.get_queue(queue)
        messages: list[dict[str, Any]] = []
        while True:
            message = await declared.get(no_ack=True, fail=False)
            if message is None:
                return messages
            body = json.loads(message.body)
            assert message.message_id == body["id"]
            messages.append(body)


def delete_queues(url: str, *queues: str) -> None:
    async def delete() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            for queue in queues:
                await channel.queue_delete(queue)

    asyncio.run(delete())


def rabbitmqctl(*args: str) -> None:
    """``rabbitmqctl ARGS`` (RabbitMQ on this machine); skips (fails under CI) without one."""
    try:
        done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable("rabbitmqctl", exc)
        return
    if done.returncode != 0:
        _unavailable("rabbitmqctl", RuntimeError(done.stderr.strip()))


def rabbitmq_vhost() -> Iterator[str]:
    """A vhost of its own for one test (guest may use it), deleted afterwards; yields its
    name."""
    vhost = f"cs-readers-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield vhost
    finally:
        rabbitmqctl("delete_vhost", vhost)
