"""The balancer's plans on a real Spark cluster, not in local mode.

A Spark standalone master and one worker (1 core, 1g) from the installed ``pyspark``
distribution run on 127.0.0.1 for the module (tests/support/spark_cluster.py); an RS on the
session's private PostgreSQL gets ``--spark-master spark://127.0.0.1:<port>`` and takes a
DELETE SERVER to SUCCESS, its executors reading PostgreSQL over JDBC with the driver jar
shipped by ``spark.jars``. PostgreSQL only: remote executors cannot read the RS's SQLite
file, and the RS refuses that combination at start-up
(tests/unit/rootservice/test_spark_master_db.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_delete_server import MIGRATION_FLAGS, job
from tests.integration.test_tenants import TenantCluster
from tests.support.cluster import ProcSet, wait_until
from tests.support.spark_cluster import LEAN_SPARK_CONF, SparkStandalone

# slow: a master, a worker, an executor and the RS's driver are four JVMs; under xdist the
# file runs first, in the "cpu" group (tests/support/xdist_sched.py), beside no other Spark.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

APP_NAME = "ob-rootservice-jobs"  # rootservice.balancer.spark.session.DEFAULT_APP_NAME
# Spark's 200 shuffle partitions make each plan 200 tasks on the worker's one core; the
# plans are latency-bound (session.py), so a small cluster wants few (docs/operations/servers.md#the-plans-on-a-spark-cluster).
CLUSTER_CONF = [
    "spark.sql.shuffle.partitions=4",
    "spark.sql.adaptive.enabled=false",
    *LEAN_SPARK_CONF,
]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """One master and one worker for every test of the module, started in the background
    (a test calls ``wait_started`` before it needs them); stopped (process groups killed)
    at the module's end."""
    base = tmp_path_factory.mktemp("spark-standalone")
    sc = SparkStandalone(base / "logs", base / "work", cores=1, memory="1g")
    sc.start_in_background()
    try:
        yield sc
    finally:
        errors = sc.stop()
        assert not errors, errors


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_delete_server_planned_on_a_standalone_cluster(
    spark_cluster: SparkStandalone, procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(
        **{
            **MIGRATION_FLAGS,
            "balancer_planner": "spark",
            "spark_master": spark_cluster.master_url,
            "spark_conf": CLUSTER_CONF,
        }
    )
    assert c.rs is not None
    a1, _, _ = c.bootstrap()
    spare = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 15, message="spare ACTIVE")
    c.make_tenant(ls_count=1)
    assert c.ok("SELECT svr_port FROM DBA_OB_UNITS WHERE zone = 'z1'") == [
        [int(a1.rsplit(":", 1)[1])]
    ]

    # The RS starts its SparkSession at its first plan: the master and the worker (started
    # while the cluster above was set up) must be up by then.
    spark_cluster.wait_started()
    c.ok(f"ALTER SYSTEM DELETE SERVER '{a1}'")
    # The first plan starts the SparkSession: the driver registers with the master, which
    # has the worker launch an executor JVM; 13 s on a quiet machine, bounded generously for
    # a loaded one: at a load average of 15 on 2 cores the session took 58 s and the first
    # plan 96 s, and a run with Spark's default partitioning missed a 240 s bound.
    wait_until(lambda: job(c, a1)["status"] != "INPROGRESS", 480, 1.0, "DELETE SERVER job ended")
    done = job(c, a1)
    assert done["status"] == "SUCCESS", done
    assert done["progress"] == 100
    wait_until(lambda: a1 not in c.statuses(), 30, message="a1 left __all_server")
    spare_ip, spare_port = spare.rsplit(":", 1)
    assert c.ok(
        "SELECT svr_ip, svr_port, migrate_from_svr_ip FROM DBA_OB_UNITS WHERE zone = 'z1'"
    ) == [[spare_ip, int(spare_port), None]]
    wait_until(
        lambda: sorted(s for _, s, z, _ in c.locations() if z == "z1") == [spare],
        30,
        message="z1's replica on the spare",
    )

    # The plans ran on the cluster: the RS's application is the master's, and its executor
    # ran in the worker, with the JDBC jar fetched from the driver (spark.jars).
    found = re.search(r"SparkSession \(spark://[^,]+, application (\S+)\)", c.rs.log_text())
    assert found, c.rs.log_tail()
    app_id = found.group(1)
    assert not app_id.startswith("local-"), app_id
    apps = {a["id"]: a for a in spark_cluster.applications()}
    assert app_id in apps, apps
    assert apps[app_id]["name"] == APP_NAME
    assert apps[app_id]["state"] == "RUNNING"  # the RS keeps its session for the next plan
    executors = spark_cluster.executor_dirs(app_id)
    assert executors, f"no executor of {app_id} in {spark_cluster.work_dir}"
    assert any((d / "postgresql.jar").is_file() for d in executors), executors
    assert any("Executor" in (d / "stderr").read_text(errors="replace") for d in executors)

    # Stopping the RS ends its application on the master.
    c.rs.stop(60)
    wait_until(
        lambda: (
            {a["id"]: a["state"] for a in spark_cluster.applications()}.get(app_id) == "FINISHED"
        ),
        30,
        message=f"{app_id} FINISHED on the master",
    )
