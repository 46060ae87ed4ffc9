"""MySQL-endpoint benchmark (``make bench-mysql``, also run by ``make bench``,
"Benchmark").

Statements per second and latency through the RS's MySQL endpoint (``--mysql-addr``, a
password user over TLS, PyMySQL) for two dashboard queries over a cluster of
``--servers`` (default 1,000) servers, beside the same queries run directly against the
same database by the same kind of client (Python's ``sqlite3`` on the RS's file; psycopg on
a private PostgreSQL the benchmark starts): the ratio is the endpoint's overhead (wire
protocol, TLS, routing, checking with sqlglot (cached after the first time), the admission
pool, the read-only transaction, MySQL's text rows).

Queries::

    servers   SELECT * FROM DBA_OB_SERVERS
    group_by  SELECT zone, status, count(*) AS n, max(start_service_time) AS newest
              FROM DBA_OB_SERVERS GROUP BY zone, status ORDER BY zone, status

For each database (``--db``, default ``sqlite,postgresql``), query and target (``mysql``,
``direct``), ``--clients`` processes run the query back to back for ``--duration`` seconds
after ``--warmup`` seconds, each on one connection; reported: statements/s, latency p50 /
p99 / max (milliseconds), the RS's CPU (cores) and CPU per statement, the clients' CPU and
the cores busy on the whole machine (2 cores here: client and server share them).

The database is seeded as tests/bench/heartbeat_bench.py seeds it (3 zones, N whitelisted
servers that never heartbeat). Everything started is stopped and the temp dirs removed.
Writes ``.bench/mysql.json``. No figure is asserted.

Usage::

    .venv/bin/python -m tests.bench.mysql_bench                     # N=1,000, 20 s per case
    .venv/bin/python -m tests.bench.mysql_bench --quick --db sqlite # smoke run: 1 s per case
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from tabulate import tabulate

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from tests.bench.bench_pki import BenchPki
from tests.bench.heartbeat_bench import (
    Children,
    RsClient,
    cpu_s,
    log,
    machine_busy_s,
    pct,
    seed_database,
)
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
USER = "dash"
PASSWORD = "bench-Passw0rd"

QUERIES = {
    "servers": "SELECT * FROM DBA_OB_SERVERS",
    "group_by": (
        "SELECT zone, status, count(*) AS n, max(start_service_time) AS newest "
        "FROM DBA_OB_SERVERS GROUP BY zone, status ORDER BY zone, status"
    ),
}

# The same queries as the database runs them (SQLite: DBA_OB_SERVERS is a view there too).
DIRECT = {
    "servers": "SELECT * FROM dba_ob_servers",
    "group_by": (
        "SELECT zone, status, count(*) AS n, max(start_service_time) AS newest "
        "FROM dba_ob_servers GROUP BY zone, status ORDER BY zone, status"
    ),
}


def _client(
    target: str,
    conn_args: dict[str, Any],
    sql: str,
    warmup: float,
    duration: float,
    out: Any,
) -> None:
    """One client process: run ``sql`` back to back; put (latencies in µs, rows, cpu s)."""
    if target == "mysql":
        import pymysql

        conn: Any = pymysql.connect(**conn_args)
    elif "path" in conn_args:
        conn = sqlite3.connect(conn_args["path"], check_same_thread=False)
    else:
        import psycopg

        conn = psycopg.connect(conn_args["dsn"], autocommit=True)
    cur = conn.cursor()
    lat: list[int] = []
    rows = 0
    start = time.monotonic()
    measure_from = start + warmup
    end = measure_from + duration
    cpu0 = None
    for _ in range(10_000_000):
        t0 = time.monotonic()
        if t0 >= end:
            break
        if cpu0 is None and t0 >= measure_from:
            cpu0 = time.process_time()
        cur.execute(sql)
        got = cur.fetchall()
        t1 = time.monotonic()
        if t0 >= measure_from:
            lat.append(int((t1 - t0) * 1e6))
            rows = len(got)
    cpu = time.process_time() - (cpu0 or time.process_time())
    conn.close()
    out.put((lat, rows, cpu))


def run_case(
    target: str,
    conn_args: dict[str, Any],
    sql: str,
    args: argparse.Namespace,
    rs: psutil.Process | None,
) -> dict[str, Any]:
    """``args.clients`` processes on one query; the figures of the measured window."""
    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_client, args=(target, conn_args, sql, args.warmup, args.duration, q))
        for _ in range(args.clients)
    ]
    for p in procs:
        p.start()
    time.sleep(args.warmup)
    rs_cpu0 = cpu_s(rs) if rs is not None else 0.0
    busy0 = machine_busy_s()
    t0 = time.monotonic()
    results = [q.get(timeout=args.warmup + args.duration + 120) for _ in procs]
    wall = time.monotonic() - t0
    rs_cpu = (cpu_s(rs) - rs_cpu0) if rs is not None else 0.0
    busy1 = machine_busy_s()
    for p in procs:
        p.join(10)
    lat = sorted(x for r in results for x in r[0])
    n = len(lat)
    window = min(wall, args.duration) or args.duration
    busy = (busy1[0] - busy0[0]) / max(busy1[1] - busy0[1], 1e-9)
    return {
        "target": target,
        "statements": n,
        "per_s": n / window,
        "rows": results[0][1],
        "p50_ms": pct(lat, 0.50) / 1000,
        "p99_ms": pct(lat, 0.99) / 1000,
        "max_ms": (lat[-1] / 1000) if lat else 0.0,
        "server_cores": rs_cpu / window,
        "server_cpu_us_per_stmt": (rs_cpu * 1e6 / n) if n else 0.0,
        "client_cores": sum(r[2] for r in results) / window,
        "machine_busy": busy,
    }


def setup_user(addr: str, certs_dir: Path) -> None:
    """CREATE USER + GRANT SELECT over gRPC as root (client.root.crt)."""
    security = TransportSecurity.for_dir(certs_dir, Role.CLIENT, "root")
    channel = security.channel(addr)
    stub = obrpc_pb2_grpc.AdminServiceStub(channel)
    try:
        for stmt in (
            f"CREATE USER IF NOT EXISTS {USER} IDENTIFIED BY '{PASSWORD}'",
            f"GRANT SELECT ON *.* TO {USER}",
        ):
            r = stub.ExecuteSql(obrpc_pb2.SqlRequest(statement=stmt), timeout=30)
            if r.error.name:
                raise RuntimeError(f"{stmt}: {r.error.name} {r.error.message}")
    finally:
        channel.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table and write ``--out``."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--servers", type=int, default=1000)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--db", default="sqlite,postgresql", help="sqlite, postgresql or both")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "mysql.json")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 1.0, 0.5
    results: list[dict[str, Any]] = []
    for engine in args.db.split(","):
        results += run_engine(engine.strip(), args)
    report(results, args)
    return 0


def run_engine(engine: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both queries through a real RS on ``engine`` (``sqlite``, or ``postgresql``: a
    private server started here) and directly against that database."""
    tmp = Path(tempfile.mkdtemp(prefix=f"mysqlbench-{engine}-"))
    children = Children()
    results: list[dict[str, Any]] = []
    pg: Any = None
    try:
        if engine == "postgresql":
            from tests.support.pgserver import PgServer

            pg = PgServer()
            pg.create_database("oceanbase")
            url = pg.url("oceanbase")
            direct: dict[str, Any] = {"dsn": url.replace("postgresql+psycopg", "postgresql")}
        elif engine == "sqlite":
            url = f"sqlite:///{tmp / 'rootservice.db'}"
            direct = {"path": str(tmp / "rootservice.db")}
        else:
            raise SystemExit(f"--db: unknown engine {engine!r}")
        seed_database(url, args.servers)
        log(f"{engine}: seeded {args.servers} servers")
        pki = BenchPki.create(tmp / "pki")
        rpc = f"127.0.0.1:{free_port()}"
        mysql_port = free_port()
        certs_dir = pki.server_dir(tmp / "certs", rpc)
        argv_rs = [
            sys.executable, "-m", "rootservice.cli", "serve",
            "--db", url,
            "--rpc-addr", rpc,
            "--mysql-addr", f"127.0.0.1:{mysql_port}",
            "--data-dir", str(tmp / "data"),
            "--certs-dir", str(certs_dir),
            "--log-level", "WARNING",
        ]  # fmt: skip
        rs = children.start("rs", argv_rs, tmp / "rs.log", False)
        client = RsClient(rpc, certs_dir)
        client.wait_serving(rs, 30)
        client.wait_state(rs, "FULL_SERVICE", 120)
        client.close()
        setup_user(rpc, certs_dir)
        conn_mysql = {
            "host": "127.0.0.1",
            "port": mysql_port,
            "user": USER,
            "password": PASSWORD,
            "database": "oceanbase",
            "ssl": {"ca": str(certs_dir / "ca.crt")},
        }
        for name in QUERIES:
            log(f"{engine} {name}: through the MySQL endpoint")
            r = run_case("mysql", conn_mysql, QUERIES[name], args, rs.ps)
            results.append({"db": engine, "query": name, **r})
            log(f"{engine} {name}: directly against the database")
            r = run_case("direct", direct, DIRECT[name], args, None)
            results.append({"db": engine, "query": name, **r})
    finally:
        children.close()
        if pg is not None:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Print one row per (database, query, target), with the direct statements/s over this
    target's as the ratio, and write ``args.out``."""
    headers = [
        "db", "query", "target", "rows", "stmt/s", "p50 ms", "p99 ms", "max ms", "RS cores",
        "RS µs/stmt", "client cores", "machine cores", "direct/this",
    ]  # fmt: skip
    table = []
    for r in results:
        ref = next(
            (
                x
                for x in results
                if (x["db"], x["query"], x["target"]) == (r["db"], r["query"], "direct")
            ),
            None,
        )
        ratio = (ref["per_s"] / r["per_s"]) if ref and r["per_s"] else None
        table.append(
            [
                r["db"], r["query"], r["target"], r["rows"], f"{r['per_s']:.0f}",
                f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['max_ms']:.1f}",
                f"{r['server_cores']:.2f}", f"{r['server_cpu_us_per_stmt']:.0f}",
                f"{r['client_cores']:.2f}", f"{r['machine_busy']:.2f}",
                "" if ratio is None else f"{ratio:.1f}",
            ]
        )  # fmt: skip
    print(tabulate(table, headers=headers))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"servers": args.servers, "results": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
