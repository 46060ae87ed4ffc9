"""``make demo-spark-cluster``: a DELETE SERVER planned on a real Spark
cluster instead of the RS's local mode.

Starts, all on 127.0.0.1: a private PostgreSQL (tests/support/pgserver.py), a Spark
standalone master and one worker (1 core, 1g) from the installed ``pyspark`` distribution
(tests/support/spark_cluster.py), one RS on that PostgreSQL with ``--spark-master
spark://127.0.0.1:<port>`` and four agents in three zones (secure, as ``make demo``:
``rootservice cert`` writes the certificates). It bootstraps three servers, adds a spare to
z1, creates a tenant with two log streams, and runs DELETE SERVER of the first server:
``obadmin --wait-job`` follows the job while the plans run on the cluster, whose executors
read PostgreSQL over JDBC. Then it prints the application as the master lists it, the
executor directories on the worker (with the JDBC jar the executor fetched from the driver)
and the job's SUCCESS row. Everything it started is stopped at the end (process groups;
PostgreSQL's directory removed); logs in ``demo_data/``. Exit code 0 on success.

Usage: ``make demo-spark-cluster`` or ``.venv/bin/python -m tests.demo.spark_cluster``.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any

from rootservice import demo as base
from rootservice.demo import Demo, free_port, step
from tests.support.pgserver import PgServer
from tests.support.spark_cluster import SparkStandalone

# Few shuffle partitions for a 1-core worker (the plans are latency-bound; docs/operations/servers.md#the-plans-on-a-spark-cluster).
SPARK_CONF = ["spark.sql.shuffle.partitions=4", "spark.sql.adaptive.enabled=false"]


class ClusterDemo(Demo):
    """:class:`rootservice.demo.Demo` whose RS runs on PostgreSQL with a standalone master."""

    def __init__(self, db_url: str, spark: SparkStandalone) -> None:
        """``db_url`` the RS's database, ``spark`` the running master and worker."""
        super().__init__()
        self.db_url = db_url
        self.spark = spark

    def start_rs(self) -> None:
        """Start the RS on :attr:`db_url` with ``--spark-master`` the standalone master."""
        conf = [a for c in SPARK_CONF for a in ("--spark-conf", c)]
        self.spawn(
            "rs",
            [
                sys.executable, "-m", "rootservice.cli", "serve", "--db", self.db_url,
                "--data-dir", str(base.ROOT / "rs"), "--rpc-addr", self.rs_addr,
                "--mysql-addr", f"127.0.0.1:{self.mysql_port}",
                "--http-addr", f"127.0.0.1:{self.http_port}",
                "--lease-time", base.LEASE, "--heartbeat-interval", "1s",
                "--empty-server-check-interval", "2s", "--log-level", "INFO",
                "--ls-check-interval", "500ms", "--balancer-interval", "1s",
                "--lost-replica-check-interval", "1s", "--allow-short-timings",
                "--spark-master", self.spark.master_url, *conf,
                "--certs-dir", str(self.certs("rs")),
            ],
        )  # fmt: skip


def show_applications(d: ClusterDemo) -> str:
    """Print the master's applications and each one's executor directories on the worker;
    returns the RS's application id (raises ``SystemExit`` when there is none)."""
    from tabulate import tabulate

    apps = d.spark.applications()
    rows: list[list[Any]] = [
        [a["id"], a["name"], a["state"], a.get("cores"), a.get("memoryperslave")] for a in apps
    ]
    print(f"GET {d.spark.webui_url}/json/ -> applications:")
    print(tabulate(rows, ["id", "name", "state", "cores", "MB per executor"], "psql"))
    ours = [a["id"] for a in apps if a["name"] == "ob-rootservice-jobs"]
    if not ours:
        raise SystemExit("demo failed: the master lists no application of the RS")
    for app in ours:
        for ex in d.spark.executor_dirs(app):
            files = ", ".join(sorted(p.name for p in ex.iterdir()))
            print(f"worker {d.spark.work_dir / app / ex.name}: {files}")
    print(flush=True)
    return str(ours[0])


def run(d: ClusterDemo) -> None:
    """The scenario of the module docstring; ``SystemExit`` at the first step that fails."""
    d.agents = {
        f"agent{i}": (f"127.0.0.1:{free_port()}", zone, free_port())
        for i, zone in enumerate(["z1", "z2", "z3", "z1"], start=1)
    }
    a = {n: v[0] for n, v in d.agents.items()}
    step("certificates, then the RS on PostgreSQL with the standalone master, four agents")
    d.create_ca()
    d.start_rs()
    for name in d.agents:
        d.start_agent(name)
    d.wait("the RS answers", lambda: d.query("SELECT name FROM __all_sys_parameter") is not None)
    d.must(
        f"ALTER SYSTEM BOOTSTRAP REGION 'sys_region' ZONE 'z1' SERVER '{a['agent1']}', "
        f"ZONE 'z2' SERVER '{a['agent2']}', ZONE 'z3' SERVER '{a['agent3']}'"
    )
    d.wait(
        "three servers ACTIVE", lambda: all(d.status(f"agent{i}") == "ACTIVE" for i in (1, 2, 3))
    )
    d.must("CREATE RESOURCE UNIT unit1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
    d.must("CREATE RESOURCE POOL pool1 UNIT 'unit1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    d.must("CREATE TENANT tenant1 RESOURCE_POOL_LIST ('pool1'), PRIMARY_ZONE 'z1', LS_COUNT 2")
    d.wait("6 replicas, 2 leaders", lambda: d.leaders() == 2)
    # The spare joins z1 only now, so that the tenant's z1 unit is on agent1 and its
    # DELETE SERVER has a unit and replicas to move (planned on the cluster).
    d.must(f"ALTER SYSTEM ADD SERVER '{a['agent4']}' ZONE 'z1'")
    d.wait("agent4 ACTIVE", lambda: d.status("agent4") == "ACTIVE")
    d.must("SELECT unit_id, zone, svr_ip, svr_port FROM DBA_OB_UNITS ORDER BY zone")
    ip, port = a["agent1"].rsplit(":", 1)
    if (
        d.query(f"SELECT unit_id FROM DBA_OB_UNITS WHERE svr_ip = '{ip}' AND svr_port = {port}")
        == []
    ):
        raise SystemExit("demo failed: agent1 holds no unit, nothing to plan")

    step(f"DELETE SERVER agent1: the plans run on {d.spark.master_url}")
    t0 = time.monotonic()
    d.must(f"ALTER SYSTEM DELETE SERVER '{a['agent1']}'")
    print("(the RS's driver registers with the master; the worker starts an executor)\n")
    d.wait_job(d.job_of("agent1"))
    print(f"... DELETE SERVER done in {time.monotonic() - t0:.1f} s\n")
    d.wait("agent1 left __all_server", lambda: d.status("agent1") is None)
    d.must(
        "SELECT job_id, job_type, job_status, svr_ip, svr_port, progress "
        "FROM DBA_OB_ROOTSERVICE_JOBS"
    )
    d.must("SELECT unit_id, zone, svr_ip, svr_port, migrate_from_svr_ip FROM DBA_OB_UNITS")

    step("the application on the Spark master and its executor on the worker")
    app = show_applications(d)
    log = (base.ROOT / "rs.log").read_text(errors="replace")
    line = next((ln for ln in log.splitlines() if f"application {app}" in ln), None)
    print(f"the RS's log: {line.split(': ', 1)[-1] if line else '(no line)'}\n")


def main() -> int:
    """Entry point of ``make demo-spark-cluster``; returns 0 (failures raise ``SystemExit``).
    Always stops the RS, the agents, the Spark worker and master and PostgreSQL."""
    started = time.monotonic()
    if base.ROOT.exists():
        shutil.rmtree(base.ROOT)
    base.ROOT.mkdir(parents=True)
    step("a private PostgreSQL and a Spark standalone master + worker on 127.0.0.1")
    pg = PgServer()
    spark: SparkStandalone | None = None
    d: ClusterDemo | None = None
    try:
        pg.create_database("oceanbase")
        db_url = pg.url("oceanbase")
        print(f"PostgreSQL: {db_url}")
        spark = SparkStandalone(base.ROOT / "spark", base.ROOT / "spark" / "work")
        spark.start()
        st = spark.state()
        print(
            f"Spark master {spark.master_url} (UI {spark.webui_url}): {st['status']}, "
            f"{st['aliveworkers']} worker, {st['cores']} core, {st['memory']} MB\n",
            flush=True,
        )
        d = ClusterDemo(db_url, spark)
        run(d)
    finally:
        if d is not None:
            d.stop_all()
        if spark is not None:
            spark.stop()
        pg.stop()
    print(f"demo finished in {time.monotonic() - started:.1f} s; logs in {base.ROOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
