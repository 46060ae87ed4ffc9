"""The Spark jobs of rootservice.balancer.spark (docs/design/migration.md) on one local SparkSession.

Hand-made inputs cover every rule of the three plans (unit placement with anti-affinity and
capacity, the no-room reasons, zones planned independently; replica sources and
destinations; each lost-replica rule and its negative). Every plan is computed by Spark and
by the pandas reference and the two must agree; the SQL reference is checked against them
on the session's PostgreSQL, and the readers on SQLite and PostgreSQL.

One SparkSession (local[2]) serves the whole test session: starting one costs ~7 s.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from rootservice.balancer.spark import reference as R
from rootservice.balancer.spark import schema as S
from rootservice.balancer.spark.lost_replicas import lost_replicas
from rootservice.balancer.spark.readers import (
    PLAN_COLUMNS,
    Inputs,
    inputs_from_pandas,
    jdbc_url,
    read_inputs,
    read_pandas_inputs,
    servers_from_table,
)
from rootservice.balancer.spark.replica_plan import replica_migration_plan
from rootservice.balancer.spark.schema import PandasInputs
from rootservice.balancer.spark.session import (
    SparkSessionManager,
    SparkStartError,
    is_loopback_master,
)
from rootservice.balancer.spark.unit_plan import unit_migration_plan
from rootservice.db.engine import make_engine, upgrade
from tests.support import sql_plans as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import spark_metadata as gen  # noqa: E402

# One xdist worker runs every test here (tests/support/xdist_sched.py), so the session's
# SparkSession (a JVM, ~15 s to start) starts once, not once per worker.

GIB = 1 << 30
PORT = 2882


# --- the one SparkSession -------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark_manager() -> Iterator[SparkSessionManager]:
    mgr = SparkSessionManager("local[2]", postgresql_driver=True)
    mgr.start_async()
    try:
        yield mgr
    finally:
        mgr.stop()


@pytest.fixture(scope="session")
def spark(spark_manager: SparkSessionManager) -> Any:
    return spark_manager.get(timeout=180)


# --- hand-made worlds -----------------------------------------------------------------------


class World:
    """A small cluster described row by row; :meth:`inputs` gives the jobs' inputs."""

    def __init__(self) -> None:
        self.servers: list[dict[str, Any]] = []
        self.configs: list[dict[str, Any]] = []
        self.pools: list[dict[str, Any]] = []
        self.units: list[dict[str, Any]] = []
        self.ls: list[dict[str, Any]] = []
        self.meta: list[dict[str, Any]] = []
        self.zone_of: dict[str, str] = {}

    def server(
        self,
        ip: str,
        zone: str = "z1",
        status: str = "ACTIVE",
        hb: str = "alive",
        stop_time: int = 0,
        cpu: float = 16.0,
        mem_g: int = 64,
        log_g: int = 192,
        suspect: bool = False,
    ) -> str:
        self.zone_of[ip] = zone
        self.servers.append(
            {
                "svr_ip": ip,
                "svr_port": PORT,
                "zone": zone,
                "status": status,
                "hb_status": hb,
                "stop_time": stop_time,
                "cpu_total": cpu,
                "mem_total": mem_g * GIB,
                "log_disk_total": log_g * GIB,
                "suspect": suspect,
            }
        )
        return ip

    def config(self, cid: int, cpu: float, mem_g: int, log_g: int | None = None) -> int:
        self.configs.append(
            {
                "unit_config_id": cid,
                "max_cpu": cpu,
                "min_cpu": cpu,
                "memory_size": mem_g * GIB,
                "log_disk_size": (log_g if log_g is not None else 3 * mem_g) * GIB,
            }
        )
        return cid

    def pool(self, pool_id: int, tenant_id: int, config: int) -> int:
        self.pools.append(
            {"resource_pool_id": pool_id, "unit_config_id": config, "tenant_id": tenant_id}
        )
        return pool_id

    def unit(self, uid: int, pool: int, ip: str, migrate_from: str = "", zone: str = "") -> int:
        self.units.append(
            {
                "unit_id": uid,
                "resource_pool_id": pool,
                "unit_group_id": uid,
                "zone": zone or self.zone_of.get(ip, "z1"),
                "svr_ip": ip,
                "svr_port": PORT,
                "migrate_from_svr_ip": migrate_from,
                "migrate_from_svr_port": PORT if migrate_from else 0,
                "status": "ACTIVE",
            }
        )
        return uid

    def log_stream(self, tenant_id: int, ls_id: int) -> None:
        self.ls.append(
            {"tenant_id": tenant_id, "ls_id": ls_id, "status": "NORMAL", "unit_group_id": 0}
        )

    def replica(
        self,
        tenant_id: int,
        ls_id: int,
        ip: str,
        unit: int,
        *,
        leader: bool = False,
        replica_type: int = 0,
        status: str = "NORMAL",
    ) -> None:
        self.meta.append(
            {
                "tenant_id": tenant_id,
                "ls_id": ls_id,
                "svr_ip": ip,
                "svr_port": PORT,
                "role": 1 if leader else 2,
                "replica_type": replica_type,
                "replica_status": status,
                "unit_id": unit,
                "zone": self.zone_of.get(ip, "z1"),
            }
        )

    def inputs(self) -> PandasInputs:
        def frame(rows: list[dict[str, Any]], layout: S.Layout) -> pd.DataFrame:
            return S.conform_pandas(pd.DataFrame(rows, columns=S.columns(layout)), layout)

        tenants = sorted({p["tenant_id"] for p in self.pools if p["tenant_id"] != -1})
        return PandasInputs(
            servers=frame(self.servers, S.SERVERS_SCHEMA),
            units=frame(self.units, S.UNITS_SCHEMA),
            pools=frame(self.pools, S.POOLS_SCHEMA),
            unit_configs=frame(self.configs, S.UNIT_CONFIGS_SCHEMA),
            ls_status=frame(self.ls, S.LS_STATUS_SCHEMA),
            ls_meta=frame(self.meta, S.LS_META_SCHEMA),
            tenants=frame(
                [{"tenant_id": t, "tenant_name": f"t{t}", "status": "NORMAL"} for t in tenants],
                S.TENANTS_SCHEMA,
            ),
        )


Job = tuple[Callable[[Inputs], Any], Callable[[PandasInputs], pd.DataFrame], S.Layout]
UNIT: Job = (unit_migration_plan, R.pandas_unit_migration_plan, S.UNIT_PLAN_SCHEMA)
REPLICA: Job = (replica_migration_plan, R.pandas_replica_migration_plan, S.REPLICA_PLAN_SCHEMA)
LOST: Job = (lost_replicas, R.pandas_lost_replicas, S.LOST_REPLICAS_SCHEMA)
SQL_JOBS = {
    "unit": (Q.sql_unit_migration_plan, R.pandas_unit_migration_plan, S.UNIT_PLAN_SCHEMA),
    "replica": (
        Q.sql_replica_migration_plan,
        R.pandas_replica_migration_plan,
        S.REPLICA_PLAN_SCHEMA,
    ),
    "lost": (Q.sql_lost_replicas, R.pandas_lost_replicas, S.LOST_REPLICAS_SCHEMA),
}


def run(spark: Any, job: Job, p: PandasInputs) -> list[tuple[Any, ...]]:
    """The plan by Spark, checked equal to the pandas reference; rows as sorted tuples with
    ports dropped (every server listens on PORT) and nulls as None."""
    spark_job, pandas_job, layout = job
    got = spark_job(inputs_from_pandas(spark, p)).toPandas()
    ref = pandas_job(p)
    assert Q.plan_digest(got, layout) == Q.plan_digest(ref, layout), (got, ref)
    norm = S.conform_pandas(got, layout, nullable=True).astype(object)
    norm = norm.where(norm.notna(), None)
    cols = [c for c in S.columns(layout) if not c.endswith("_port")]
    return sorted(tuple(r) for r in norm[cols].itertuples(index=False))


# --- unit migration plan (ObRootBalancer / ObUnitManager) -------------------------------------

DELETING = "server DELETING"


def world_least_loaded() -> World:
    w = World()
    a = w.server("10.0.0.1", status="DELETING")
    b = w.server("10.0.0.2")
    w.server("10.0.0.3")
    d = w.server("10.0.0.4")
    cfg = w.config(1, 4.0, 16)
    for t in (1002, 1004, 1006, 1008):
        w.pool(t, t, cfg)
    w.unit(11, 1002, a)
    w.unit(12, 1004, a)
    w.unit(13, 1002, b)  # tenant 1002 is on b already
    w.unit(14, 1006, d)
    w.unit(15, 1008, d)  # d is half full
    return w


def test_unit_plan_anti_affinity_and_least_loaded_with_ties_by_address(spark: Any) -> None:
    rows = run(spark, UNIT, world_least_loaded().inputs())
    # unit 11 (tenant 1002) may not join unit 13 on .2: .3 is emptier than .4. Unit 12 then
    # finds .2 and .3 equally loaded (0.5 after placement): the lower address wins.
    assert rows == [
        (11, 1002, "z1", "10.0.0.1", "10.0.0.3", DELETING),
        (12, 1004, "z1", "10.0.0.1", "10.0.0.2", DELETING),
    ]


def test_unit_plan_places_nothing_on_a_suspect_server(spark: Any) -> None:
    # The emptiest server is SUSPECT (back after its lease expired): no
    # unit, hence no copy, goes to it; the next one takes both units.
    w = world_least_loaded()
    w.servers[2]["suspect"] = True  # 10.0.0.3
    rows = run(spark, UNIT, w.inputs())
    assert rows == [
        (11, 1002, "z1", "10.0.0.1", "10.0.0.4", DELETING),
        (12, 1004, "z1", "10.0.0.1", "10.0.0.2", DELETING),
    ]


def world_room_runs_out() -> World:
    w = World()
    a = w.server("10.0.0.1", status="DELETING")
    c = w.server("10.0.0.3")
    cfg = w.config(1, 4.0, 16)
    big = w.config(2, 4.0, 40)
    w.pool(1002, 1002, cfg)
    w.pool(1004, 1004, cfg)
    w.pool(1006, 1006, big)
    w.unit(11, 1002, a)
    w.unit(12, 1004, a)
    w.unit(13, 1006, c)  # 40G of .3's 64G taken
    return w


def test_unit_plan_counts_planned_moves_and_names_what_is_short(spark: Any) -> None:
    rows = run(spark, UNIT, world_room_runs_out().inputs())
    assert rows == [
        (11, 1002, "z1", "10.0.0.1", "10.0.0.3", DELETING),
        (
            12,
            1004,
            "z1",
            "10.0.0.1",
            None,
            "memory: needs 16G, free 8G on 10.0.0.3:2882, the roomiest server of zone 'z1'",
        ),
    ]


def world_zones() -> World:
    w = World()
    cfg = w.config(1, 4.0, 16)
    w.pool(1002, 1002, cfg)
    # z1: room on .2
    a1 = w.server("10.1.0.1", "z1", status="DELETING")
    b1 = w.server("10.1.0.2", "z1")
    # z2: the only active server already hosts the tenant; the others may not take units
    a2 = w.server("10.2.0.1", "z2", status="DELETING")
    b2 = w.server("10.2.0.2", "z2")
    w.server("10.2.0.3", "z2", status="INACTIVE", hb="lease_expired")
    w.server("10.2.0.4", "z2", stop_time=1_700_000_000_000_000)  # stopped
    w.server("10.2.0.5", "z2", status="DELETING")
    w.server("10.2.0.6", "z2", status="INACTIVE", hb="permanent_offline")
    # z3: roomy, but another zone's units never go there
    w.server("10.3.0.1", "z3", cpu=64, mem_g=512, log_g=1536)
    w.unit(11, 1002, a1)
    w.unit(12, 1002, a2)
    w.unit(13, 1002, b2)
    assert b1
    return w


def test_unit_plan_plans_each_zone_on_its_own_servers(spark: Any) -> None:
    rows = run(spark, UNIT, world_zones().inputs())
    assert rows == [
        (11, 1002, "z1", "10.1.0.1", "10.1.0.2", DELETING),
        (
            12,
            1002,
            "z2",
            "10.2.0.1",
            None,
            "zone 'z2' has no other active server without a unit of the same tenant",
        ),
    ]


def world_offline_and_skips() -> World:
    w = World()
    cfg = w.config(1, 4.0, 16)
    p = w.server("10.0.0.1", status="INACTIVE", hb="permanent_offline")
    x = w.server("10.0.0.2", status="INACTIVE", hb="lease_expired")
    d = w.server("10.0.0.3", status="DELETING")
    b = w.server("10.0.0.4")
    w.server("10.0.0.5")
    e = w.server("10.0.0.6")
    w.pool(1002, 1002, cfg)
    w.pool(1004, 1004, cfg)
    w.pool(1, -1, cfg)  # ungranted: anti-affinity by pool
    w.pool(2, -1, cfg)
    w.unit(11, 1, p)  # pool 1 is on .4 already -> .5 (.6 is fuller)
    w.unit(12, 1, b)
    w.unit(13, 2, e)
    w.unit(14, 1002, e)
    w.unit(15, 1002, x)  # lease_expired: not moved by the balancer
    w.unit(16, 1004, e, migrate_from=d)  # leaving the DELETING server already
    return w


def test_unit_plan_permanent_offline_ungranted_pools_and_what_is_left_alone(spark: Any) -> None:
    rows = run(spark, UNIT, world_offline_and_skips().inputs())
    assert rows == [(11, -1, "z1", "10.0.0.1", "10.0.0.5", "server permanent_offline")]


def world_migrating_away_counts() -> World:
    w = World()
    a = w.server("10.0.0.1", status="DELETING")
    x = w.server("10.0.0.2")
    y = w.server("10.0.0.3")
    w.pool(1002, 1002, w.config(1, 4.0, 16))
    w.pool(1004, 1004, w.config(2, 4.0, 56))
    w.unit(11, 1002, a)
    w.unit(12, 1004, y, migrate_from=x)  # 56G on both .2 and .3 while it moves
    return w


def test_unit_plan_counts_a_migrating_unit_on_both_servers(spark: Any) -> None:
    rows = run(spark, UNIT, world_migrating_away_counts().inputs())
    assert rows == [
        (
            11,
            1002,
            "z1",
            "10.0.0.1",
            None,
            "memory: needs 16G, free 8G on 10.0.0.3:2882, the roomiest server of zone 'z1'",
        )
    ]


def world_cpu_short() -> World:
    w = World()
    a = w.server("10.0.0.1", status="DELETING", cpu=64)
    w.server("10.0.0.2", cpu=32)
    w.pool(1002, 1002, w.config(1, 48.0, 16))
    w.unit(11, 1002, a)
    return w


def test_unit_plan_cpu_reason(spark: Any) -> None:
    rows = run(spark, UNIT, world_cpu_short().inputs())
    assert rows[0][-1] == (
        "CPU: max_cpu 48 exceeds the server's 32 cores on 10.0.0.2:2882, the roomiest server "
        "of zone 'z1'"
    )


# --- replica migration plan (ObDRWorker) ------------------------------------------------------

MOVED = S.REPLICA_REASON_UNIT_MOVED
OFFLINE = S.REPLICA_REASON_OFFLINE
WAIT = S.REPLICA_REASON_WAIT_UNIT
NO_SOURCE = S.REPLICA_REASON_NO_SOURCE


def three_zone_ls(
    w: World,
    tenant: int,
    ls: int,
    servers: tuple[str, str, str],
    units: tuple[int, int, int],
    leader: int = 1,
    *,
    in_status: bool = True,
) -> None:
    if in_status:
        w.log_stream(tenant, ls)
    for i, (ip, u) in enumerate(zip(servers, units, strict=True)):
        w.replica(tenant, ls, ip, u, leader=i == leader)


def replica_world(old_hb: str, old_status: str = "ACTIVE") -> World:
    """LS 1001 of tenant 1002 on .1.1 (z1), .2.1 (z2, leader), .3.1 (z3); the z1 unit has
    moved to .1.2."""
    w = World()
    a = w.server("10.1.0.1", "z1", status=old_status, hb=old_hb)
    a2 = w.server("10.1.0.2", "z1")
    b = w.server("10.2.0.1", "z2")
    c = w.server("10.3.0.1", "z3")
    w.pool(1002, 1002, w.config(1, 4.0, 16))
    w.unit(1, 1002, a2, migrate_from=a)
    w.unit(2, 1002, b)
    w.unit(3, 1002, c)
    three_zone_ls(w, 1002, 1001, (a, b, c), (1, 2, 3))
    return w


def test_replica_plan_copies_from_the_moving_replica_when_it_is_healthy(spark: Any) -> None:
    rows = run(spark, REPLICA, replica_world("alive").inputs())
    assert rows == [(1002, 1001, "10.1.0.1", "10.1.0.2", "10.1.0.1", MOVED)]


def test_replica_plan_copies_from_the_leader_when_the_old_server_is_dead(spark: Any) -> None:
    rows = run(spark, REPLICA, replica_world("lease_expired", "INACTIVE").inputs())
    assert rows == [(1002, 1001, "10.2.0.1", "10.1.0.2", "10.1.0.1", MOVED)]


def test_replica_plan_falls_back_to_a_healthy_follower(spark: Any) -> None:
    w = replica_world("lease_expired", "INACTIVE")
    w.meta[1]["replica_status"] = "OFFLINE"  # the leader is not in service
    rows = run(spark, REPLICA, w.inputs())
    assert rows == [(1002, 1001, "10.3.0.1", "10.1.0.2", "10.1.0.1", MOVED)]


def test_replica_plan_without_a_healthy_member_has_no_source(spark: Any) -> None:
    w = replica_world("lease_expired", "INACTIVE")
    w.meta[1]["replica_status"] = "OFFLINE"
    w.meta[2]["replica_type"] = gen.READONLY  # not a Paxos member: no source either
    rows = run(spark, REPLICA, w.inputs())
    assert rows == [(1002, 1001, None, "10.1.0.2", "10.1.0.1", NO_SOURCE)]


def test_replica_plan_skips_when_the_destination_has_the_replica_already(spark: Any) -> None:
    w = replica_world("alive")
    w.replica(1002, 1001, "10.1.0.2", 1)  # built already
    # and a log stream gone from __all_ls_status is not migrated
    three_zone_ls(w, 1002, 1002, ("10.1.0.1", "10.2.0.1", "10.3.0.1"), (1, 2, 3), in_status=False)
    assert run(spark, REPLICA, w.inputs()) == []


def test_replica_plan_keeps_a_destination_replica_not_in_service(spark: Any) -> None:
    # the copy to .1.2 is building or failed (its replica reported out of service): the row
    # stays, so that a failed copy is handed out again
    w = replica_world("alive")
    w.replica(1002, 1001, "10.1.0.2", 1, status="OFFLINE")
    rows = run(spark, REPLICA, w.inputs())
    assert rows == [(1002, 1001, "10.1.0.1", "10.1.0.2", "10.1.0.1", MOVED)]


def world_permanent_offline() -> World:
    w = World()
    p = w.server("10.1.0.1", "z1", status="INACTIVE", hb="permanent_offline")
    q = w.server("10.1.0.3", "z1", status="INACTIVE", hb="permanent_offline")
    a2 = w.server("10.1.0.2", "z1")
    b = w.server("10.2.0.1", "z2")
    bx = w.server("10.2.0.2", "z2", status="INACTIVE", hb="lease_expired")
    c = w.server("10.3.0.1", "z3")
    cfg = w.config(1, 4.0, 16)
    for t in (1002, 1004, 1006, 1008):
        w.pool(t, t, cfg)
    # tenant 1002: its z1 unit has left the dead server -> rebuild there, from the leader
    w.unit(1, 1002, a2, migrate_from=p)
    w.unit(2, 1002, b)
    w.unit(3, 1002, c)
    three_zone_ls(w, 1002, 1001, (p, b, c), (1, 2, 3))
    # tenant 1004: its z1 unit is still on the dead server -> listed, no destination yet
    w.unit(4, 1004, q)
    w.unit(5, 1004, b)
    w.unit(6, 1004, c)
    three_zone_ls(w, 1004, 1001, (q, b, c), (4, 5, 6))
    # tenant 1006: leader on a lease_expired server -> the LS is not alive: nothing
    w.unit(7, 1006, q)
    w.unit(8, 1006, bx)
    w.unit(9, 1006, c)
    three_zone_ls(w, 1006, 1001, (q, bx, c), (7, 8, 9))
    # tenant 1008: the leader was the replica on the dead server -> not alive: nothing
    w.unit(10, 1008, q)
    w.unit(11, 1008, b)
    w.unit(12, 1008, c)
    three_zone_ls(w, 1008, 1001, (q, b, c), (10, 11, 12), leader=0)
    return w


def test_replica_plan_permanent_offline_rebuilds_of_living_log_streams(spark: Any) -> None:
    rows = run(spark, REPLICA, world_permanent_offline().inputs())
    assert rows == [
        (1002, 1001, "10.2.0.1", "10.1.0.2", "10.1.0.1", OFFLINE),
        (1004, 1001, "10.2.0.1", None, "10.1.0.3", WAIT),
    ]


# --- lost replicas (ObLostReplicaChecker) -----------------------------------------------------


def world_lost() -> World:
    w = World()
    gone = "10.9.0.1"  # not in __all_server
    off = w.server("10.1.0.1", status="INACTIVE", hb="permanent_offline")
    exp = w.server("10.1.0.2", status="INACTIVE", hb="lease_expired")
    ok = w.server("10.1.0.3")
    dl = w.server("10.1.0.4", status="DELETING")
    w.log_stream(1002, 1)
    # LS 1002/2 is gone from __all_ls_status
    cases = [
        (gone, 1, "OFFLINE", 0),  # lost: not in service
        (gone, 1, "NORMAL", gen.READONLY),  # lost: not a paxos member
        (off, 2, "NORMAL", 0),  # lost: LS gone
        (off, 1, "OFFLINE", 0),  # lost: not in service
    ]
    negatives = [
        (gone, 1, "NORMAL", 0),  # FULL, in service, LS alive: left to DR
        (off, 1, "NORMAL", 0),
        (exp, 1, "OFFLINE", 0),  # server not lost
        (ok, 2, "NORMAL", gen.READONLY),
        (dl, 2, "OFFLINE", 0),
    ]
    # Several rows of one LS on one server would share a primary key: row i's server
    # listens on PORT + i (the servers input gets that address too, unless it is gone).
    for i, (ip, ls, status, rtype) in enumerate(cases + negatives):
        w.replica(1002, ls, ip, 1, replica_type=rtype, status=status)
        w.meta[-1]["svr_port"] = PORT + i
        if ip != gone:
            base = next(s for s in w.servers if s["svr_ip"] == ip and s["svr_port"] == PORT)
            w.servers.append(base | {"svr_port": PORT + i})
    return w


def test_lost_replicas_each_rule_and_its_negative(spark: Any) -> None:
    w = world_lost()
    rows = run(spark, LOST, w.inputs())
    assert rows == [
        (1002, 1, "10.1.0.1", "server permanent_offline: replica not in service"),
        (1002, 1, "10.9.0.1", "server not in __all_server: not a paxos member"),
        (1002, 1, "10.9.0.1", "server not in __all_server: replica not in service"),
        (1002, 2, "10.1.0.1", "server permanent_offline: log stream not in __all_ls_status"),
    ]


# --- the engines agree --------------------------------------------------------------------------

HAND_MADE = [
    world_least_loaded,
    world_room_runs_out,
    world_zones,
    world_offline_and_skips,
    world_migrating_away_counts,
    world_cpu_short,
    lambda: replica_world("alive"),
    lambda: replica_world("lease_expired", "INACTIVE"),
    world_permanent_offline,
    world_lost,
]


@pytest.fixture(scope="module")
def small_cluster() -> gen.Cluster:
    return gen.generate(6000, seed=7)


def test_spark_and_pandas_agree_on_a_generated_cluster(
    spark: Any, small_cluster: gen.Cluster
) -> None:
    p = small_cluster.pandas_inputs()
    inputs = inputs_from_pandas(spark, p).persist()
    try:
        for spark_job, pandas_job, layout in (UNIT, REPLICA, LOST):
            got = spark_job(inputs).toPandas()
            ref = pandas_job(p)
            assert len(ref) > 0
            assert Q.plan_digest(got, layout) == Q.plan_digest(ref, layout), spark_job.__name__
    finally:
        inputs.unpersist()


def _pg_tables(p: PandasInputs) -> dict[str, pd.DataFrame]:
    """Hand-made inputs as full rows of their tables (NOT NULL columns filled in)."""
    configs = p.unit_configs.assign(
        name=lambda d: "c" + d["unit_config_id"].astype(str), max_iops=1, min_iops=1, iops_weight=0
    )
    pools = p.pools.assign(
        name=lambda d: "p" + d["resource_pool_id"].astype(str), unit_count=1, zone_list="z1"
    )
    tenants = p.tenants[["tenant_id", "tenant_name", "status"]].assign(zone_list="z1")
    ls_status = p.ls_status.assign(ls_group_id=0)
    meta = p.ls_meta.assign(sql_port=2881, paxos_replica_number=3)
    return {
        "__all_unit_config": configs,
        "__all_resource_pool": pools,
        "__all_unit": p.units,
        "__all_tenant": tenants,
        "__all_ls_status": ls_status,
        "__all_ls_meta_table": meta,
    }


@pytest.fixture
def pg_db(pg_server: Any) -> Iterator[str]:
    name = "spark_jobs_sql"
    pg_server.drop_database(name)
    pg_server.create_database(name)
    engine = make_engine(pg_server.url(name))
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    try:
        yield name
    finally:
        pg_server.drop_database(name)


def test_sql_in_postgresql_agrees_with_pandas(
    pg_server: Any, pg_db: str, small_cluster: gen.Cluster
) -> None:
    with pg_server.connect(pg_db) as conn:
        for make in HAND_MADE:
            p = make().inputs()
            with conn.transaction():
                for table in reversed(list(_pg_tables(p))):
                    conn.execute(f"DELETE FROM {table}")
                for table, df in _pg_tables(p).items():
                    cols = ", ".join(df.columns)
                    with conn.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                        for row in df.itertuples(index=False):
                            copy.write_row(tuple(row))
                Q.load_servers_table(conn, p.servers)
            for name, (sql_job, pandas_job, layout) in SQL_JOBS.items():
                got = sql_job(conn)
                assert Q.plan_digest(got, layout) == Q.plan_digest(pandas_job(p), layout), (
                    make,
                    name,
                    got,
                )
        # and the generated cluster, loaded by COPY as the benchmark does
        for table in reversed(list(small_cluster.tables())):
            conn.execute(f"DELETE FROM {table}")
        gen.load_postgres(conn, small_cluster)
        p = small_cluster.pandas_inputs()
        for name, (sql_job, pandas_job, layout) in SQL_JOBS.items():
            ref = pandas_job(p)
            assert len(ref) > 0
            assert Q.plan_digest(sql_job(conn), layout) == Q.plan_digest(ref, layout), name


# --- readers ------------------------------------------------------------------------------------


def _sorted(df: pd.DataFrame, layout: S.Layout) -> pd.DataFrame:
    cols = S.columns(layout)
    return S.conform_pandas(df, layout).sort_values(cols).reset_index(drop=True)


def test_read_inputs_from_the_database(spark: Any, db_url: str) -> None:
    cluster = gen.generate(1500, seed=3)
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        gen.load_sqlalchemy(engine, cluster)
    finally:
        engine.dispose()
    expected = cluster.pandas_inputs()
    inputs = read_inputs(spark, db_url, servers=cluster.servers).persist()
    try:
        if db_url.startswith("postgresql"):
            assert inputs.ls_meta.rdd.getNumPartitions() == 2  # JDBC split on ls_id
        for name, layout in S.INPUT_LAYOUTS.items():
            got = getattr(inputs, name).toPandas()
            pd.testing.assert_frame_equal(
                _sorted(got, layout), _sorted(getattr(expected, name), layout), obj=name
            )
        got_plan = replica_migration_plan(inputs).toPandas()
    finally:
        inputs.unpersist()
    ref = R.pandas_replica_migration_plan(expected)
    digest = Q.plan_digest(ref, S.REPLICA_PLAN_SCHEMA)
    assert Q.plan_digest(got_plan, S.REPLICA_PLAN_SCHEMA) == digest
    # the pandas reader (COPY for PostgreSQL) reads the same tables
    p = read_pandas_inputs(db_url, servers=cluster.servers)
    for name, layout in S.INPUT_LAYOUTS.items():
        pd.testing.assert_frame_equal(
            _sorted(getattr(p, name), layout), _sorted(getattr(expected, name), layout), obj=name
        )


def test_reading_only_the_plans_columns_gives_the_same_plans(spark: Any, db_url: str) -> None:
    """PLAN_COLUMNS lists every column a plan reads: the plans on inputs
    read with it, lazily persisted as the RS does, equal the plans on every column."""
    cluster = gen.generate(1500, seed=5)
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        gen.load_sqlalchemy(engine, cluster)
    finally:
        engine.dispose()
    full = cluster.pandas_inputs()
    pruned = read_pandas_inputs(db_url, servers=cluster.servers, columns=PLAN_COLUMNS)
    assert set(pruned.ls_meta["zone"]) == {""} and len(pruned.tenants) == 0
    inputs = read_inputs(spark, db_url, servers=cluster.servers, columns=PLAN_COLUMNS)
    inputs = inputs.persist(eager=False)
    try:
        for job, pandas_job, layout in (UNIT, REPLICA, LOST):
            ref = Q.plan_digest(pandas_job(full), layout)
            assert Q.plan_digest(pandas_job(pruned), layout) == ref, pandas_job
            assert Q.plan_digest(job(inputs).toPandas(), layout) == ref, job
    finally:
        inputs.unpersist()


def test_servers_derived_from_all_server_when_the_caller_has_none(tmp_path: Path) -> None:
    now = 10_000_000_000
    rows = pd.DataFrame(
        {
            "svr_ip": ["a", "b", "c", "d"],
            "svr_port": [1, 2, 3, 4],
            "zone": ["z1"] * 4,
            "status": ["active", "INACTIVE", "INACTIVE", "DELETING"],
            "stop_time": [0, 0, 0, 5],
            "last_offline_time": [0, now - 60_000_000, now - 3_590_000_000, now - 1],
        }
    )
    out = servers_from_table(rows, now_us=now)
    assert list(out["hb_status"]) == [
        "alive",
        "lease_expired",
        "permanent_offline",
        "lease_expired",
    ]
    assert list(out["status"]) == ["ACTIVE", "INACTIVE", "INACTIVE", "DELETING"]
    assert (out["mem_total"] == 0).all()
    assert list(servers_from_table(rows)["hb_status"])[2] == "lease_expired"  # no clock


def test_jdbc_url_from_the_rs_database_url() -> None:
    url, props = jdbc_url(
        "postgresql+psycopg://rs:s3cret@db.example:6543/oceanbase?sslmode=require"
    )
    assert url == "jdbc:postgresql://db.example:6543/oceanbase"
    assert props == {
        "driver": "org.postgresql.Driver",
        "user": "rs",
        "password": "s3cret",
        "sslmode": "require",
    }
    with pytest.raises(ValueError):
        jdbc_url("sqlite:///x.db")


# --- the session manager ----------------------------------------------------------------------


def test_session_defaults_local_and_cluster_masters() -> None:
    local = SparkSessionManager("local[*]", db_url="postgresql+psycopg://u@h/d").effective_conf()
    assert local["spark.ui.enabled"] == "false"
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.sql.shuffle.partitions"] == "4"
    assert local["spark.sql.adaptive.enabled"] == "false"
    assert local["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert local["spark.jars"].endswith("postgresql.jar")
    cluster = SparkSessionManager(
        "spark://m:7077",
        {"spark.sql.shuffle.partitions": "64", "spark.jars": "/x.jar"},
        db_url="sqlite:///rs.db",
    ).effective_conf()
    assert "spark.driver.host" not in cluster
    assert "spark.sql.adaptive.enabled" not in cluster
    assert cluster["spark.sql.shuffle.partitions"] == "64"
    assert cluster["spark.jars"] == "/x.jar"  # no JDBC driver for SQLite


def test_session_on_a_loopback_standalone_master_binds_the_driver_to_loopback() -> None:
    """A standalone master on 127.0.0.1 has its executors on this host, and
    the RS binds loopback only; the cluster keeps Spark's own partitioning defaults."""
    for master in ("spark://127.0.0.1:7077", "spark://localhost:7077,127.0.0.2:7078"):
        conf = SparkSessionManager(master, db_url="postgresql+psycopg://u@h/d").effective_conf()
        assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
        assert "spark.sql.shuffle.partitions" not in conf
        assert conf["spark.jars"].endswith("postgresql.jar")
    assert is_loopback_master("spark://[::1]:7077")
    for master in ("spark://10.0.0.5:7077", "spark://127.0.0.1:7077,m2:7077", "local[2]", "yarn"):
        assert not is_loopback_master(master), master
    given = SparkSessionManager("spark://127.0.0.1:7077", {"spark.driver.host": "10.1.1.1"})
    assert given.effective_conf()["spark.driver.host"] == "10.1.1.1"


def test_session_start_failure_is_reported_and_retried() -> None:
    mgr = SparkSessionManager(postgresql_driver=True, postgresql_jar="/nonexistent/pg.jar")
    for _ in range(2):
        with pytest.raises(SparkStartError, match="libpostgresql-jdbc-java"):
            mgr.get(timeout=30)
    mgr.stop()


def test_the_shared_session_was_started_off_thread(spark_manager: SparkSessionManager) -> None:
    spark_manager.get(timeout=180)
    assert spark_manager.ready
    # The JVM started on the manager's own daemon thread, not on a caller's (this one's).
    assert spark_manager.created_on == "spark-session-start"
    assert spark_manager.created_on != threading.current_thread().name
    assert spark_manager.startup_s is not None and spark_manager.startup_s > 0
    assert spark_manager.get() is spark_manager.get()


def test_empty_database_gives_empty_plans(spark: Any, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path}/rs.db"
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM __all_unit")).scalar() == 0
    finally:
        engine.dispose()
    inputs = read_inputs(spark, db_url)
    for job in (unit_migration_plan, replica_migration_plan):
        assert job(inputs).count() == 0
    p = read_pandas_inputs(db_url)
    assert len(R.pandas_unit_migration_plan(p)) == 0
    assert len(R.pandas_replica_migration_plan(p)) == 0
    assert len(R.pandas_lost_replicas(p)) == 0


def test_spark_bench_quick_size_computes_every_plan_alike_on_three_engines(
    spark: Any, pg_server: Any
) -> None:
    """``make bench-spark`` smoke run: one size of the Spark jobs benchmark
    (``spark_bench.run_size``, 5k replicas, one repeat) on this file's SparkSession and the
    session's PostgreSQL, so that no second JVM starts. No figure is asserted, only counts:
    the generated cluster, and the three plans computed by Spark, pandas and SQL agreeing
    row for row (what the bench's exit code says)."""
    from tests.bench import spark_bench

    sampler = spark_bench.Sampler(pg_server)
    try:
        size = spark_bench.run_size(
            5000, pg=pg_server, spark=spark, sampler=sampler, repeats=1, seed=0
        )
    finally:
        sampler.stop()
    assert size["replicas_target"] == 5000 and size["replicas"] > 0
    assert size["servers"] > 0 and size["units"] > 0
    assert set(size["plans"]) == set(spark_bench.PLANS)
    for name, plan in size["plans"].items():
        assert plan["agree"], (name, plan)
    # The generated cluster has work for the plans (DELETING servers, lost replicas).
    assert sum(p["rows"] for p in size["plans"].values()) > 0
