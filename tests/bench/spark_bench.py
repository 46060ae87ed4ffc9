"""Spark jobs benchmark (``make bench-spark``): the three plans of ``rootservice.balancer.spark`` on
Spark, beside the same computations in single-process pandas and as SQL inside PostgreSQL.

For each size (replica rows of ``__all_ls_meta_table``; default 100k, 1M, 5M):

1. generates a cluster (tests/bench/spark_metadata.py: 3 zones, 300 / 1,000 / 3,000 servers,
   tenants with units and log streams, DELETING / permanent_offline / lease_expired servers,
   migrating units, lost replicas) and loads it with COPY into a fresh database of a private
   PostgreSQL (tests/support/pgserver.py, run as the postgres user when root), plus the servers
   input (the RS's in-memory statuses) into a table for the SQL variant;
2. Spark (one SparkSession for the whole run, ``--master local[2]``, driver memory 6g):
   reads the tables by JDBC - only the columns the plans use (``readers.PLAN_COLUMNS``,
   pushed into the query), one partition per core split on ``mod(ls_id, n)``, 20k rows per
   fetch - and caches them (``Inputs.persist``), best of ``--repeats`` reads; then runs each
   plan once (first) and ``--repeats`` more times (warm, the best is reported), collecting
   the plan with ``toPandas`` (Arrow);
3. pandas: reads the same columns by ``COPY (SELECT ...) TO STDOUT`` (CSV) parsed by Arrow
   into pandas (best of ``--repeats``), runs each plan (best of ``--repeats``);
4. SQL: runs each plan inside PostgreSQL (best of ``--repeats``; ``work_mem`` 256MB); its
   read is part of each plan;
5. checks that the three plans agree (row count and a hash of the sorted rows).

The end-to-end table gives, per engine, read + the three warm plans and the ratio to the
fastest engine (Spark within 1.5x, read included). ``--also-full-read``
also times each engine's read of every column of the layouts (the read before column
pruning), in the same run.

Peak memory is sampled every 100 ms: the JVM's RSS (psutil, the Java child process), the
PySpark Python workers', this process's (where pandas runs) and the largest PostgreSQL
backend's. Prints markdown tables and writes ``.bench/spark.json``. Timings are wall-clock
seconds; nothing is asserted except agreement (exit status 1 when plans differ).

Usage::

    .venv/bin/python tests/bench/spark_bench.py                   # 100k, 1M, 5M
    .venv/bin/python tests/bench/spark_bench.py --sizes 100k,1M   # or --quick: 20k,100k
    .venv/bin/python tests/bench/spark_bench.py --quick --sizes 5k  # smoke run (its test)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # the repository: tests.support
sys.path.insert(0, str(HERE))  # spark_metadata.py

import spark_metadata as gen  # noqa: E402

from rootservice.balancer.spark import reference as R  # noqa: E402
from rootservice.balancer.spark import schema as S  # noqa: E402
from rootservice.balancer.spark.lost_replicas import lost_replicas  # noqa: E402
from rootservice.balancer.spark.readers import (  # noqa: E402
    PLAN_COLUMNS,
    read_inputs,
    read_pandas_inputs,
)
from rootservice.balancer.spark.replica_plan import replica_migration_plan  # noqa: E402
from rootservice.balancer.spark.session import SparkSessionManager  # noqa: E402
from rootservice.balancer.spark.unit_plan import unit_migration_plan  # noqa: E402
from rootservice.db.engine import make_engine, upgrade  # noqa: E402
from tests.support import sql_plans as Q  # noqa: E402
from tests.support.pgserver import PgServer  # noqa: E402

PLANS: dict[str, tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], S.Layout]] = {
    "unit migration": (
        unit_migration_plan,
        R.pandas_unit_migration_plan,
        Q.sql_unit_migration_plan,
        S.UNIT_PLAN_SCHEMA,
    ),
    "replica migration": (
        replica_migration_plan,
        R.pandas_replica_migration_plan,
        Q.sql_replica_migration_plan,
        S.REPLICA_PLAN_SCHEMA,
    ),
    "lost replicas": (
        lost_replicas,
        R.pandas_lost_replicas,
        Q.sql_lost_replicas,
        S.LOST_REPLICAS_SCHEMA,
    ),
}
MIB = 1 << 20


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    return int(float(t) * mult)


def human(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# --- memory sampling ----------------------------------------------------------------------------


class Sampler:
    """Polls RSS every ``interval`` s and keeps the peak per (phase, group)."""

    def __init__(self, pg: PgServer, interval: float = 0.1) -> None:
        self.pg = pg
        self.interval = interval
        self.phase = "idle"
        self.peaks: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._me = psutil.Process()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def during(self, phase: str) -> Iterator[None]:
        old, self.phase = self.phase, phase
        self._sample()
        try:
            yield
        finally:
            self._sample()
            self.phase = old

    def peak(self, phase: str, group: str) -> int:
        return self.peaks.get(phase, {}).get(group, 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _pg_backends(self) -> list[psutil.Process]:
        try:
            pid = int((self.pg.data_dir / "postmaster.pid").read_text().split()[0])
            master = psutil.Process(pid)
            return [master, *master.children(recursive=True)]
        except (OSError, ValueError, IndexError, psutil.Error):
            return []

    def _sample(self) -> None:
        sizes = {"python": 0, "jvm": 0, "spark_python_workers": 0, "postgres_backend": 0}
        with contextlib.suppress(psutil.Error):
            sizes["python"] = self._me.memory_info().rss
        with contextlib.suppress(psutil.Error):
            for child in self._me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    name = child.name()
                    rss = child.memory_info().rss
                    if name == "java":
                        sizes["jvm"] += rss
                    elif name.startswith("python"):
                        sizes["spark_python_workers"] += rss
        for proc in self._pg_backends():
            with contextlib.suppress(psutil.Error):
                sizes["postgres_backend"] = max(sizes["postgres_backend"], proc.memory_info().rss)
        peaks = self.peaks.setdefault(self.phase, {})
        for k, v in sizes.items():
            peaks[k] = max(peaks.get(k, 0), v)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


# --- one size -------------------------------------------------------------------------------------


def run_size(
    n: int,
    *,
    pg: PgServer,
    spark: Any,
    sampler: Sampler,
    repeats: int,
    seed: int,
    full_read: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {"replicas_target": n, "plans": {}}
    cluster, t_gen = timed(lambda: gen.generate(n, seed=seed))
    out["replicas"] = len(cluster.ls_meta)
    out["servers"] = len(cluster.servers)
    out["units"] = len(cluster.units)
    out["tenants"] = len(cluster.tenants)
    out["log_streams"] = len(cluster.ls_status)
    log(
        f"{human(n)}: generated {out['replicas']:,} replicas, {out['servers']} servers, "
        f"{out['units']:,} units, {out['tenants']:,} tenants in {t_gen:.1f} s"
    )
    db = f"bench_spark_{n}"
    pg.drop_database(db)
    pg.create_database(db)
    url = pg.url(db)
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    with pg.connect(db) as conn:
        _, t_load = timed(lambda c=cluster: gen.load_postgres(conn, c))
    out["load_s"] = t_load
    log(f"{human(n)}: loaded into PostgreSQL by COPY in {t_load:.1f} s")
    servers = cluster.servers
    del cluster
    digests: dict[str, dict[str, tuple[int, str]]] = {p: {} for p in PLANS}
    plans: dict[str, dict[str, Any]] = {p: {} for p in PLANS}

    # Spark
    with sampler.during(f"spark-{n}"):
        if full_read:
            full, t_full = timed(lambda: read_inputs(spark, url, servers=servers).persist())
            full.unpersist()
            out["spark_full_read_s"] = t_full
            log(f"{human(n)}: Spark read of every column (JDBC, cached) in {t_full:.1f} s")
        t_read = float("inf")
        for i in range(repeats):
            inputs, t = timed(
                lambda: read_inputs(spark, url, servers=servers, columns=PLAN_COLUMNS).persist()
            )
            t_read = min(t_read, t)
            if i < repeats - 1:
                inputs.unpersist()
        out["spark_read_s"] = t_read
        log(f"{human(n)}: Spark read (JDBC, plans' columns, cached) in {t_read:.1f} s")
        for name, (job, _pd_job, _sql_job, layout) in PLANS.items():
            df, first = timed(lambda job=job: job(inputs).toPandas())
            warm = min(timed(lambda job=job: job(inputs).toPandas())[1] for _ in range(repeats))
            plans[name]["spark_first_s"] = first
            plans[name]["spark_warm_s"] = warm
            plans[name]["rows"] = len(df)
            digests[name]["spark"] = Q.plan_digest(df, layout)
            log(
                f"{human(n)}: Spark {name}: {len(df):,} rows, first {first:.2f} s, warm {warm:.2f} s"
            )
        inputs.unpersist()
    out["jvm_peak_rss"] = sampler.peak(f"spark-{n}", "jvm")
    out["spark_workers_peak_rss"] = sampler.peak(f"spark-{n}", "spark_python_workers")
    out["spark_driver_python_peak_rss"] = sampler.peak(f"spark-{n}", "python")

    # pandas
    with sampler.during(f"pandas-{n}"):
        if full_read:
            _, t_full = timed(lambda: read_pandas_inputs(url, servers=servers))
            out["pandas_full_read_s"] = t_full
            log(f"{human(n)}: pandas read of every column (COPY -> Arrow) in {t_full:.1f} s")
        t_read = float("inf")
        for _ in range(repeats):
            p, t = timed(lambda: read_pandas_inputs(url, servers=servers, columns=PLAN_COLUMNS))
            t_read = min(t_read, t)
        out["pandas_read_s"] = t_read
        log(f"{human(n)}: pandas read (COPY -> Arrow, plans' columns) in {t_read:.1f} s")
        for name, (_job, pd_job, _sql_job, layout) in PLANS.items():
            best = float("inf")
            for _ in range(repeats):
                df, t = timed(lambda pd_job=pd_job, p=p: pd_job(p))
                best = min(best, t)
            plans[name]["pandas_s"] = best
            digests[name]["pandas"] = Q.plan_digest(df, layout)
            log(f"{human(n)}: pandas {name}: {len(df):,} rows in {best:.2f} s")
        del p
    out["pandas_python_peak_rss"] = sampler.peak(f"pandas-{n}", "python")

    # SQL inside PostgreSQL
    with sampler.during(f"sql-{n}"), pg.connect(db) as conn:
        conn.execute("SET work_mem = '256MB'")
        for name, (_job, _pd_job, sql_job, layout) in PLANS.items():
            best = float("inf")
            for _ in range(repeats):
                df, t = timed(lambda sql_job=sql_job: sql_job(conn))
                best = min(best, t)
            plans[name]["sql_s"] = best
            digests[name]["sql"] = Q.plan_digest(df, layout)
            log(f"{human(n)}: SQL {name}: {len(df):,} rows in {best:.2f} s")
    out["postgres_backend_peak_rss"] = sampler.peak(f"sql-{n}", "postgres_backend")
    pg.drop_database(db)

    for name, d in digests.items():
        plans[name]["agree"] = len(set(d.values())) == 1
        plans[name]["digest"] = d["spark"][1][:12]
    out["plans"] = plans
    return out


# --- report ---------------------------------------------------------------------------------------


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return my - slope * mx, slope


def e2e(r: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Engine -> (read s, sum of the three warm plans s) of one size's result."""
    ps = list(r["plans"].values())
    return {
        "Spark": (r["spark_read_s"], sum(p["spark_warm_s"] for p in ps)),
        "pandas": (r["pandas_read_s"], sum(p["pandas_s"] for p in ps)),
        "SQL in PG": (0.0, sum(p["sql_s"] for p in ps)),
    }


def report(results: list[dict[str, Any]], startup: dict[str, Any]) -> str:
    lines = [
        f"SparkSession start {startup['session_s']:.1f} s, first job "
        f"{startup['first_job_s']:.1f} s ({startup['master']}, driver memory "
        f"{startup['driver_memory']}).",
        "",
        "| replicas | servers | plan | rows | Spark first (s) | Spark warm (s) | pandas (s) "
        "| SQL in PG (s) | Spark / fastest | agree |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        for name, p in r["plans"].items():
            fastest = min(p["pandas_s"], p["sql_s"])
            lines.append(
                f"| {r['replicas']:,} | {r['servers']:,} | {name} | {p['rows']:,} "
                f"| {p['spark_first_s']:.2f} | {p['spark_warm_s']:.2f} | {p['pandas_s']:.2f} "
                f"| {p['sql_s']:.2f} | {p['spark_warm_s'] / fastest:.1f}x "
                f"| {'yes' if p['agree'] else 'NO'} ({p['digest']}) |"
            )
    lines += [
        "",
        "End to end, read included (read: best of the repeats; plans: the three warm plans; "
        "SQL in PG reads inside each plan):",
        "",
        "| replicas | engine | read (s) | 3 plans (s) | read + plans (s) | / fastest "
        "| read of every column (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        for engine, total in e2e(r).items():
            read, plans_s = total
            fastest = min(a + b for a, b in e2e(r).values())
            full = r.get(
                {"Spark": "spark_full_read_s", "pandas": "pandas_full_read_s"}.get(engine, "")
            )
            lines.append(
                f"| {r['replicas']:,} | {engine} | {read:.1f} | {plans_s:.1f} "
                f"| {read + plans_s:.1f} | {(read + plans_s) / fastest:.2f}x "
                f"| {'-' if full is None else f'{full:.1f}'} |"
            )
    lines += [
        "",
        "| replicas | load by COPY (s) | JVM peak RSS | Spark Python workers peak "
        "| Python (pandas) peak RSS | PG backend peak RSS |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r['replicas']:,} | {r['load_s']:.1f} "
            f"| {r['jvm_peak_rss'] / MIB:,.0f} MiB | {r['spark_workers_peak_rss'] / MIB:,.0f} MiB "
            f"| {r['pandas_python_peak_rss'] / MIB:,.0f} MiB "
            f"| {r['postgres_backend_peak_rss'] / MIB:,.0f} MiB |"
        )
    lines += ["", "Where Spark wins (warm plan vs the faster of pandas and SQL):"]
    for name in PLANS:
        wins = [
            human(r["replicas_target"])
            for r in results
            if r["plans"][name]["spark_warm_s"]
            < min(r["plans"][name]["pandas_s"], r["plans"][name]["sql_s"])
        ]
        last = results[-1]["plans"][name]
        ratio = last["spark_warm_s"] / min(last["pandas_s"], last["sql_s"])
        where = ", ".join(wins) if wins else "at none of the measured sizes"
        lines.append(
            f"- {name}: {where}; at {human(results[-1]['replicas_target'])} Spark takes "
            f"{ratio:.1f}x the fastest single-machine plan"
        )
    if len(results) > 1:
        lines += [
            "",
            "Growth with size, least-squares fit of warm time = fixed + slope x replicas "
            "(the unit plan reads only units and servers, which grow with the server count):",
        ]
        xs = [r["replicas"] / 1e6 for r in results]
        engines = (("Spark", "spark_warm_s"), ("pandas", "pandas_s"), ("SQL", "sql_s"))
        for name in PLANS:
            fits = {
                engine: linear_fit(xs, [r["plans"][name][key] for r in results])
                for engine, key in engines
            }
            parts = [f"{e} {a:.2f} s + {b:.2f} s/M" for e, (a, b) in fits.items()]
            # where the Spark line drops below both others (if its slope is the smallest)
            a, b = fits["Spark"]
            cross = 0.0
            for engine in ("pandas", "SQL"):
                ao, bo = fits[engine]
                if bo <= b:
                    cross = float("inf")
                    break
                cross = max(cross, (a - ao) / (bo - b))
            where = (
                "never on this trend"
                if cross == float("inf")
                else f"from about {max(cross, 0):.1f}M replicas on this trend"
            )
            where = f"Spark fastest {where}"
            if name == "unit migration":  # its input does not grow with the replicas
                where = "not extrapolated: Spark's time here is its fixed cost per job"
            lines.append(f"- {name}: " + "; ".join(parts) + f" -> {where}")
    lines += [
        "",
        f"Machine: {startup['cpus']} CPUs; load average {startup['load_before']:.1f} before, "
        f"{startup['load_after']:.1f} after the run (other processes share it).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", help="replica counts (default 100k,1M,5M; 20k,100k with --quick)")
    ap.add_argument("--quick", action="store_true", help="one repeat (and sizes 20k,100k)")
    ap.add_argument("--repeats", type=int, default=2, help="warm runs per plan (best is kept)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--also-full-read",
        action="store_true",
        help="also time each engine's read of every column (before column pruning)",
    )
    ap.add_argument("--out", default=".bench/spark.json")
    args = ap.parse_args(argv)
    default_sizes = "20k,100k" if args.quick else "100k,1M,5M"
    sizes = [parse_size(s) for s in (args.sizes or default_sizes).split(",")]
    repeats = 1 if args.quick else max(1, args.repeats)

    log("starting PostgreSQL")
    pg = PgServer()
    sampler = Sampler(pg)
    mgr = SparkSessionManager(
        args.master, {"spark.driver.memory": args.driver_memory}, postgresql_driver=True
    )
    results: list[dict[str, Any]] = []
    try:
        spark, t_session = timed(lambda: mgr.get())
        _, t_first = timed(lambda: spark.range(1_000_000).selectExpr("sum(id)").collect())
        startup: dict[str, Any] = {
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg()[0],
            "session_s": t_session,
            "first_job_s": t_first,
            "master": args.master,
            "driver_memory": args.driver_memory,
        }
        log(f"SparkSession ready in {t_session:.1f} s; first job {t_first:.2f} s")
        for n in sizes:
            results.append(
                run_size(
                    n,
                    pg=pg,
                    spark=spark,
                    sampler=sampler,
                    repeats=repeats,
                    seed=args.seed,
                    full_read=args.also_full_read,
                )
            )
        startup["load_after"] = os.getloadavg()[0]
    finally:
        mgr.stop()
        sampler.stop()
        pg.stop()
    text = report(results, startup)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"startup": startup, "results": results, "cpus": os.cpu_count()}, indent=2, default=str
        )
    )
    log(f"wrote {out}")
    agree = all(p["agree"] for r in results for p in r["plans"].values())
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
