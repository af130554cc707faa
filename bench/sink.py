"""``clustersync sink``: results/s from a job's results stream into SQLite, PostgreSQL, MariaDB
and RabbitMQ, whole pipeline (read by a reader group, upserted or published, acknowledged).

    python bench/sink.py [--results 50000] [--batch 500] [--only sqlite,postgresql+psycopg]

Each target gets a fresh job in its own redis-server and a database of its own (dropped after):
PostgreSQL on 127.0.0.1:5432 (trust), MariaDB on 127.0.0.1:3306 (root), RabbitMQ on
127.0.0.1:5672 (guest). A URL naming its driver compares drivers (psycopg against psycopg2,
PyMySQL against mysqlclient); a target whose server or driver is missing is reported and
skipped. Every run checks that the destination holds every result.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

# testkit and the tests' helpers are not installed: imported from the repository
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from results_support import add_results, finish_job, make_job  # noqa: E402
from sink_support import delete_queues  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from scrapy_clustersync.cli.sink_command import open_sink, run_sink  # noqa: E402
from scrapy_clustersync.results.reader import ResultReader  # noqa: E402
from scrapy_clustersync.sinks.sql_sink import engine_url  # noqa: E402
from testkit.redis_server import RedisServer  # noqa: E402

TARGETS = {
    "sqlite": "sqlite:///{tmp}/bench.db",
    "postgresql+psycopg": "postgresql+psycopg://postgres@127.0.0.1:5432/{db}",
    "postgresql+psycopg2": "postgresql+psycopg2://postgres@127.0.0.1:5432/{db}",
    "mysql+pymysql": "mysql+pymysql://root@127.0.0.1:3306/{db}",
    "mysql+mysqldb": "mysql+mysqldb://root@127.0.0.1:3306/{db}",
    "amqp": "amqp://guest:guest@127.0.0.1:5672/%2F",
}
ADMIN = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
         "mysql": "mysql+pymysql://root@127.0.0.1:3306/"}


def item(n: int) -> dict[str, Any]:
    """A product page's item, about 300 bytes of JSON."""
    return {"title": f"Product {n}", "price": round(n * 0.37, 2), "sku": f"SKU-{n:08d}",
            "in_stock": n % 3 != 0, "tags": ["a", "b", f"t{n % 17}"],
            "description": "lorem ipsum dolor sit amet " * 6}


def database(kind: str, db: str, create: bool) -> None:
    engine = create_engine(ADMIN[kind], isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if create:
            conn.execute(text(f"CREATE DATABASE {db}"))
        elif kind == "postgresql":
            conn.execute(text(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        else:
            conn.execute(text(f"DROP DATABASE IF EXISTS {db}"))
    engine.dispose()


def run_one(name: str, count: int, batch: int, columns: bool, tmp: Path) -> str:
    db = f"cs_bench_{uuid.uuid4().hex[:8]}"
    url = TARGETS[name].format(tmp=tmp, db=db)
    kind = name.partition("+")[0]
    with RedisServer(directory=tmp / f"redis-{db}") as server:
        client = server.client()
        make_job(client, "bench")
        add_results(client, "bench", count, item=item)
        finish_job(client, "bench")
        if kind in ADMIN:
            database(kind, db, create=True)
        try:
            reader = ResultReader(None, "bench", "bench", "c1", client=client, kinds=["item"])
            sink = open_sink(url, "bench", None, f"clustersync.bench-{db}", columns)
            began, cpu = time.perf_counter(), time.process_time()
            summary = run_sink(reader, sink, batch, follow=False)
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
            left = client.xlen(make_job(client, "bench").results)
            ceiling = executemany_ceiling(url, count, batch) if kind in CEILING else None
        finally:
            if kind in ADMIN:
                database(kind, db, create=False)
            if kind == "amqp":
                queue = f"clustersync.bench-{db}"
                delete_queues(url, queue, f"{queue}.dead")
    ok = "ok" if summary["written"] == count and left == 0 else "MISSING RESULTS"
    line = (f"{name:<22} {count:>7,} results in {elapsed:6.2f} s = {count / elapsed:>8,.0f}"
            f" results/s (batch {batch}{', --columns' if columns else ''}): {ok}; sink CPU "
            f"{cpu / count * 1e6:.0f} us/result (one core: {count / cpu:,.0f}/s)")
    if ceiling:
        line += (f"\n{'':<22} executemany ceiling {ceiling:>8,.0f} rows/s (no Redis); "
                 f"sink/ceiling {count / elapsed / ceiling:.2f}")
    return line


#: the SQL targets the executemany ceiling is measured for
CEILING = ("sqlite", "postgresql", "mysql")


def executemany_ceiling(url: str, count: int, batch: int) -> float:
    """Rows/s of a plain DB-API ``executemany`` INSERT of the same rows into the same table
    (emptied first), ``batch`` rows per statement and commit, the rows built beforehand (their
    JSON already text): what the driver and the server allow, without Redis, decoding or
    SQLAlchemy. The sink's results/s is quoted against it."""
    engine = create_engine(engine_url(url))
    mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
    now = dt.datetime.now(dt.timezone.utc)
    if engine.dialect.name != "postgresql":
        now = now.replace(tzinfo=None)
    rows = [(f"r{n:05d}", "item", f"http://site.test/{n}", "n1", now,
             json.dumps(item(n), separators=(",", ":"))) for n in range(count)]
    statement = (f"INSERT INTO bench (id, kind, url, node, crawled_at, item) "
                 f"VALUES ({', '.join([mark] * 6)})")
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute("DELETE FROM bench")
        connection.commit()
        began = time.perf_counter()
        for first in range(0, count, batch):
            cursor.executemany(statement, rows[first:first + batch])
            connection.commit()
        elapsed = time.perf_counter() - began
    finally:
        connection.close()
        engine.dispose()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--columns", action="store_true", help="SQL: a column per item field")
    parser.add_argument("--only", default=",".join(TARGETS),
                        help=f"comma-separated targets of {', '.join(TARGETS)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            try:
                print(run_one(name, args.results, args.batch, args.columns, Path(tmp)),
                      flush=True)
            except Exception as exc:  # a server or driver missing here: say so, go on
                print(f"{name:<22} skipped: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    main()
