"""ALTER SYSTEM MIGRATE UNIT / CANCEL MIGRATE UNIT (rootservice.balancer.unit_migration) on the
tenant layer with in-memory agents, on both databases: every refusal of OceanBase's
``ObUnitManager::admin_migrate_unit`` on both sides of its boundary, the recorded move
(MANUAL_MIGRATE, the MIGRATE_UNIT job), its progress and end by the balancer's unit moves,
and the reversed move of a cancel with its partial copy dropped. No RootService."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.balancer.copy_tasks import CopyTask, CopyTasks
from rootservice.balancer.unit_migration import ManualUnitMoves
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.db import unit_repo
from rootservice.db.unit_repo import Unit
from rootservice.metrics import Metrics
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from rootservice.tenants.ddl_requests import NewPool, NewUnitConfig
from tests.support.tenant_parts import GIB, Layer, build_layer, heartbeat, make_tenant

A, B, C, D, E = (f"127.0.0.1:300{i}" for i in range(1, 6))
# Three servers in z1 (A, D, E), one in z2 and z3.
SERVERS = [(A, "z1"), (B, "z2"), (C, "z3"), (D, "z1"), (E, "z1")]


class Whitelist:
    """The layer's in-memory servers as the balancer's ``Whitelist``."""

    def __init__(self, layer: Layer) -> None:
        self.layer = layer

    def get(self, server: str) -> Any:
        return self.layer.servers.get(server)

    def snapshot(self) -> list[Any]:
        return self.layer.servers.snapshot()

    def has_servers_to_empty(self) -> bool:
        return False


class World:
    def __init__(self, engine: sa.Engine, tmp_path: Path) -> None:
        self.layer = build_layer(engine, tmp_path, SERVERS)
        self.tid = make_tenant(self.layer, ls_count=2)
        heartbeat(self.layer)
        self.woken: list[str] = []
        self.background: list[Any] = []
        whitelist = Whitelist(self.layer)
        metrics = Metrics()
        self.units = UnitMoves(
            servers=whitelist,
            ls=self.layer.view,
            layout=self.layer.version,
            store=self.layer.store,
            clock=self.layer.clock,
            metrics=metrics,
            wake=self.woken.append,
        )
        self.copies = CopyTasks(
            servers=whitelist,
            ls=self.layer.view,
            events=self.layer.events,
            store=self.layer.store,
            clock=self.layer.clock,
            settings=self.layer.settings,
            metrics=metrics,
        )
        self.manual = ManualUnitMoves(
            servers=whitelist,
            zones=self.layer.zones,
            rooms=self.layer.rooms,
            ls=self.layer.view,
            units=self.units,
            copies=self.copies,
            store=self.layer.store,
            clock=self.layer.clock,
            wake=self.woken.append,
            background=self.background.append,
        )

    def unit(self, zone: str = "z1", pool_id: int | None = None) -> Unit:
        with self.layer.store.read() as conn:
            return next(
                u
                for u in unit_repo.load_units(conn)
                if u.zone == zone and (pool_id is None or u.resource_pool_id == pool_id)
            )

    def rows(self, query: str) -> list[dict[str, Any]]:
        with self.layer.store.read() as conn:
            return [dict(r) for r in conn.execute(sa.text(query)).mappings()]

    def job(self) -> dict[str, Any]:
        [job] = self.rows("SELECT * FROM __all_rootservice_job WHERE job_type = 'MIGRATE_UNIT'")
        return job

    def view_unit(self, unit_id: int) -> dict[str, Any]:
        [row] = self.rows(f"SELECT * FROM dba_ob_units WHERE unit_id = {unit_id}")
        return {k.lower(): v for k, v in row.items()}


@pytest.fixture
def w(engine: sa.Engine, tmp_path: Path) -> World:
    return World(engine, tmp_path)


def refusal(fn: Any, *args: Any) -> ObError:
    with pytest.raises(ObError) as e:
        fn(*args)
    return e.value


def other_z1(w: World, *taken: str) -> str:
    return next(s for s in (A, D, E) if s not in taken)


def test_each_refusal_of_migrate_unit_and_its_other_side(w: World) -> None:
    u = w.unit()
    dest = other_z1(w, u.server)
    before = w.rows("SELECT * FROM __all_unit ORDER BY unit_id")

    e = refusal(w.manual.migrate, 999999, dest)
    assert (e.name, e.message) == ("OB_ENTRY_NOT_EXIST", "unit_id not existed")
    assert refusal(w.manual.migrate, u.unit_id, "not-an-address").name == "OB_INVALID_ARGUMENT"
    e = refusal(w.manual.migrate, u.unit_id, "127.0.0.1:3999")
    assert e.message == "destination server not found in the cluster"
    e = refusal(w.manual.migrate, u.unit_id, B)
    assert (e.name, e.message) == ("OB_NOT_SUPPORTED", "migrate unit between zones not supported")

    # The destination cannot take units in: not alive, DELETING, stopped, drained.
    s = w.layer.servers.get(dest)
    assert s is not None
    for field, bad, good in (
        ("hb_status", HeartbeatStatus.LEASE_EXPIRED, HeartbeatStatus.ALIVE),
        ("admin_status", AdminStatus.DELETING, AdminStatus.NORMAL),
        ("stop_time", 5, 0),
        ("draining", True, False),
        ("block_migrate_in_time", 5, 0),
    ):
        setattr(s, field, bad)
        assert refusal(w.manual.migrate, u.unit_id, dest).name == "OB_SERVER_MIGRATE_IN_DENIED"
        setattr(s, field, good)

    # Room: u1 takes 2 CPU, 4G memory, 12G log disk. One byte short of memory is refused
    # naming zone, server and resource; exactly enough passes (below).
    s.resource_info.mem_total = 4 * GIB - 1
    e = refusal(w.manual.migrate, u.unit_id, dest)
    assert e.name == "OB_MACHINE_RESOURCE_NOT_ENOUGH"
    assert e.message == (
        f"zone 'z1' server '{dest}' MEMORY_SIZE resource is not enough to hold a new unit"
    )
    s.resource_info.mem_total = 4 * GIB
    s.resource_info.cpu_total = 1
    assert "MAX_CPU" in refusal(w.manual.migrate, u.unit_id, dest).message
    s.resource_info.cpu_total = 8
    s.resource_info.log_disk_total = 12 * GIB - 1
    assert "LOG_DISK_SIZE" in refusal(w.manual.migrate, u.unit_id, dest).message
    s.resource_info.log_disk_total = 12 * GIB
    assert w.rows("SELECT * FROM __all_unit ORDER BY unit_id") == before  # nothing changed

    # The unit's own server: nothing to do.
    assert w.manual.migrate(u.unit_id, u.server) == 0
    job_id = w.manual.migrate(u.unit_id, dest)
    assert job_id > 0
    row = w.view_unit(u.unit_id)
    assert (f"{row['svr_ip']}:{row['svr_port']}", row["manual_migrate"]) == (dest, "YES")
    assert f"{row['migrate_from_svr_ip']}:{row['migrate_from_svr_port']}" == u.server
    job = w.job()
    assert (job["job_id"], job["job_status"], job["unit_id"]) == (job_id, "INPROGRESS", u.unit_id)
    assert (f"{job['svr_ip']}:{job['svr_port']}", job["tenant_id"]) == (dest, w.tid)
    assert "balancer" in w.woken

    # Already moving: refused, to the third z1 server.
    third = other_z1(w, u.server, dest)
    e = refusal(w.manual.migrate, u.unit_id, third)
    assert (e.name, e.message) == (
        "OB_NOT_SUPPORTED",
        "migrate unit already in migrating status not supported",
    )


def test_a_server_with_a_unit_of_the_same_tenant_or_pool_is_refused(w: World) -> None:
    # Pool p2: two units in z1 (not granted): their servers hold a unit of the same pool.
    w.layer.ddl.create_pool(NewPool("p2", "u1", 2, ("z1",)))
    with w.layer.store.read() as conn:
        p2 = unit_repo.load_pools(conn)["p2"].resource_pool_id
        units = [u for u in unit_repo.load_units(conn) if u.resource_pool_id == p2]
    first, second = units
    e = refusal(w.manual.migrate, first.unit_id, second.server)
    assert (e.name, e.message) == (
        "OB_NOT_SUPPORTED",
        "hold two units of a tenant in the same server not supported",
    )
    # The third z1 server holds none of p2: the unit goes there at once (nothing to copy),
    # its job SUCCESS when created.
    free = other_z1(w, first.server, second.server)
    job_id = w.manual.migrate(first.unit_id, free)
    moved = w.view_unit(first.unit_id)
    assert (f"{moved['svr_ip']}:{moved['svr_port']}", moved["migrate_from_svr_ip"]) == (free, None)
    assert w.job()["job_id"] == job_id and w.job()["job_status"] == "SUCCESS"


def test_a_move_ends_success_once_the_source_holds_no_replica(w: World) -> None:
    u = w.unit()
    dest = other_z1(w, u.server)
    job_id = w.manual.migrate(u.unit_id, dest)
    assert w.manual.update_jobs() == 1
    job = w.job()
    assert (job["progress"], job["extra_info"]) == (
        0,
        f"moved 0 of 2 log stream(s) from {u.server} to {dest}",
    )
    # The copies arrive and the source's replicas go (as the reconciler's member change
    # leaves them): progress, then the unit's move and its job end.
    agents = w.layer.agents.replicas
    agents[dest] = dict(agents.pop(u.server))
    heartbeat(w.layer)
    w.layer.meta_sync.run_once()
    assert w.manual.update_jobs() == 1
    assert w.job()["progress"] == 99  # 100 only with SUCCESS
    assert w.units.finish_units() == 1
    job = w.job()
    assert (job["job_id"], job["job_status"], job["progress"]) == (job_id, "SUCCESS", 100)
    row = w.view_unit(u.unit_id)
    assert (row["manual_migrate"], row["migrate_from_svr_ip"]) == ("NO", None)


def test_cancel_reverses_the_move_and_drops_the_partial_copy(w: World) -> None:
    u = w.unit()
    dest = other_z1(w, u.server)
    e = refusal(w.manual.cancel, u.unit_id)
    assert (e.name, e.message) == ("OB_ERR_UNEXPECTED", "no migrate task to cancel")
    assert refusal(w.manual.cancel, 999999).name == "OB_ENTRY_NOT_EXIST"
    job_id = w.manual.migrate(u.unit_id, dest)
    key = (w.tid, 1001)
    w.copies.tasks[(key, dest)] = CopyTask(key, dest, u.server, u.server, 0)

    # The server it moves from cannot take it back: refused, the move goes on.
    src = w.layer.servers.get(u.server)
    assert src is not None
    src.stop_time = 5
    assert refusal(w.manual.cancel, u.unit_id).name == "OB_SERVER_MIGRATE_IN_DENIED"
    assert w.job()["job_status"] == "INPROGRESS"
    src.stop_time = 0

    assert w.manual.cancel(u.unit_id) == job_id
    row = w.view_unit(u.unit_id)
    # OceanBase's REVERSE: back on the source, moving from the destination it left.
    assert f"{row['svr_ip']}:{row['svr_port']}" == u.server
    assert f"{row['migrate_from_svr_ip']}:{row['migrate_from_svr_port']}" == dest
    assert row["manual_migrate"] == "NO"
    job = w.job()
    assert (job["job_status"], job["return_code"]) == ("CANCELED", -4072)
    assert (key, dest) not in w.copies.tasks
    # The partial replica on the destination is dropped off the statement's path.
    [drop] = w.background
    w.layer.agents.replicas.setdefault(dest, {})
    drop()
    dropped = [r for s, r in w.layer.agents.calls if s == dest and r.drop]
    assert [(k.tenant_id, k.ls_id) for k in dropped[-1].drop] == [key]
    e = refusal(w.manual.cancel, 999999)
    assert e.name == "OB_ENTRY_NOT_EXIST"


def test_migrating_to_the_source_cancels(w: World) -> None:
    u = w.unit()
    dest = other_z1(w, u.server)
    job_id = w.manual.migrate(u.unit_id, dest)
    assert w.manual.migrate(u.unit_id, u.server) == job_id
    assert w.job()["job_status"] == "CANCELED"


def test_a_unit_config_that_grows_beyond_a_server_is_refused(w: World) -> None:
    alter = w.layer.alter.alter_unit_config
    u = w.unit()
    s = w.layer.servers.get(u.server)
    assert s is not None
    # u1 is 2 CPU / 4G / 12G on every server of the tenant (16G memory each).
    s.resource_info.mem_total = 8 * GIB - 1
    e = refusal(alter, "u1", (("memory_size", "8G"), ("max_cpu", 2)))
    assert e.name == "OB_MACHINE_RESOURCE_NOT_ENOUGH"
    assert e.message == (
        f"zone 'z1' server '{u.server}' MEMORY_SIZE resource is not enough to hold a new unit"
    )
    e = refusal(alter, "u1", (("memory_size", "8G"), ("memory_size", "2G")))
    assert e.name == "OB_INVALID_ARGUMENT"
    assert refusal(alter, "nope", (("max_cpu", 1),)).name == "OB_RESOURCE_UNIT_NOT_EXIST"
    assert refusal(alter, "u1", (("max_cpu", 0.5),)).name == "OB_INVALID_RESOURCE_UNIT"
    assert refusal(alter, "u1", (("min_cpu", 4),)).name == "OB_INVALID_ARGUMENT"
    assert w.rows("SELECT memory_size FROM __all_unit_config") == [{"memory_size": 4 * GIB}]
    # Exactly what the server has: allowed; shrinking always is, even on a full server.
    s.resource_info.mem_total = 8 * GIB
    assert alter("u1", (("memory_size", "8G"),)) is True
    s.resource_info.mem_total = 1 * GIB
    assert alter("u1", (("memory_size", "2G"), ("max_cpu", 1), ("min_cpu", 1))) is True
    [row] = w.rows("SELECT max_cpu, min_cpu, memory_size, log_disk_size FROM __all_unit_config")
    assert (row["max_cpu"], row["min_cpu"]) == (1.0, 1.0)
    assert (row["memory_size"], row["log_disk_size"]) == (2 * GIB, 12 * GIB)
    assert alter("u1", (("memory_size", "2G"),)) is False  # no change


def test_primary_zone_moves_the_leaders_and_ends_its_job(w: World) -> None:
    alter = w.layer.alter.alter_primary_zone
    assert refusal(alter, "nope", "z2").name == "OB_TENANT_NOT_EXIST"
    assert refusal(alter, "t1", "z9").name == "OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST"
    assert refusal(alter, "t1", "z2;;z1").name == "OB_INVALID_ARGUMENT"
    assert alter("t1", "z1") == 0  # already
    assert w.layer.primary_zone_checker.run_once() == 0
    job_id = alter("t1", "z2;z1")
    assert w.layer.primary_zone_checker.run_once() == 0
    [job] = w.rows(
        "SELECT * FROM __all_rootservice_job WHERE job_type = 'ALTER_TENANT_PRIMARY_ZONE'"
    )
    assert (job["job_id"], job["job_status"], job["tenant_id"]) == (job_id, "INPROGRESS", w.tid)
    assert job["extra_info"].startswith("0 of 2 log stream(s) led in the primary zone")
    w.layer.reconciler.run_once()
    heartbeat(w.layer)
    views = w.layer.reports.views()
    assert {views[(w.tid, ls)].leader for ls in (1001, 1002)} == {B}
    assert w.layer.primary_zone_checker.run_once() == 1
    [job] = w.rows("SELECT * FROM __all_rootservice_job WHERE job_id = " + str(job_id))
    assert (job["job_status"], job["progress"]) == ("SUCCESS", 100)
    # A second change cancels an open job.
    first = alter("t1", "z3")
    second = alter("t1", "z1")
    statuses = w.rows(
        f"SELECT job_id, job_status FROM __all_rootservice_job WHERE job_id IN ({first}, {second})"
        " ORDER BY job_id"
    )
    assert [r["job_status"] for r in statuses] == ["CANCELED", "INPROGRESS"]


def test_alter_resource_pool_one_change_at_a_time(w: World) -> None:
    alter = w.layer.pools.alter_pool
    w.layer.ddl.create_pool(NewPool("p2", "u1", 1, ("z1",)))
    w.layer.ddl.create_unit_config(NewUnitConfig("big", (("max_cpu", 2), ("memory_size", "9G"))))
    w.layer.ddl.create_unit_config(NewUnitConfig("fits", (("max_cpu", 2), ("memory_size", "8G"))))

    def units(pool: str = "p2") -> list[tuple[str, str]]:
        return [
            (r["zone"], f"{r['svr_ip']}:{r['svr_port']}")
            for r in w.rows(
                "SELECT u.* FROM __all_unit u JOIN __all_resource_pool p "
                f"ON p.resource_pool_id = u.resource_pool_id WHERE p.name = '{pool}' "
                "ORDER BY u.unit_id"
            )
        ]

    def pool(name: str = "p2") -> dict[str, Any]:
        [row] = w.rows(f"SELECT * FROM __all_resource_pool WHERE name = '{name}'")
        return row

    e = refusal(alter, "p2", (("unit_num", (2, ())), ("unit", "u1")))
    assert (e.name, e.message) == (
        "OB_NOT_SUPPORTED",
        "alter unit_num, resource_unit, zone_list in one cmd not supported",
    )
    assert refusal(alter, "nope", (("unit", "u1"),)).name == "OB_RESOURCE_POOL_NOT_EXIST"
    # UNIT_NUM: bounds, a granted pool, DELETE UNIT with no shrink.
    assert refusal(alter, "p2", (("unit_num", (0, ())),)).name == "OB_INVALID_ARGUMENT"
    assert refusal(alter, "p2", (("unit_num", (1001, ())),)).name == "OB_INVALID_ARGUMENT"
    e = refusal(alter, "p1", (("unit_num", (2, ())),))
    assert (e.name, e.message) == (
        "OB_OP_NOT_ALLOW",
        "alter pool unit num which is granted to a tenant not allowed",
    )
    [(_, first)] = units()
    first_id = w.rows("SELECT max(unit_id) AS m FROM __all_unit")[0]["m"]
    assert refusal(alter, "p2", (("unit_num", (1, (first_id,))),)).name == "OB_NOT_SUPPORTED"
    assert refusal(alter, "p2", (("unit_num", (2, (first_id,))),)).name == "OB_NOT_SUPPORTED"
    assert alter("p2", (("unit_num", (1, ())),)) is False
    # Growing to three in z1 fills A, D and E; a fourth finds no server.
    assert alter("p2", (("unit_num", (3, ())),)) is True
    assert sorted(s for _, s in units()) == [A, D, E] and pool()["unit_count"] == 3
    assert refusal(alter, "p2", (("unit_num", (4, ())),)).name == "OB_ZONE_SERVER_NOT_ENOUGH"
    # Shrinking: DELETE UNIT must name units of the pool, as many as the shrink removes.
    ids = [
        r["unit_id"]
        for r in w.rows(
            f"SELECT unit_id FROM __all_unit WHERE resource_pool_id = {pool()['resource_pool_id']} ORDER BY unit_id"
        )
    ]
    assert refusal(alter, "p2", (("unit_num", (1, (ids[0],))),)).name == "OB_INVALID_ARGUMENT"
    assert refusal(alter, "p2", (("unit_num", (2, (999999,))),)).name == "OB_INVALID_ARGUMENT"
    assert alter("p2", (("unit_num", (2, (ids[0],))),)) is True
    assert [
        r["unit_id"]
        for r in w.rows(
            f"SELECT unit_id FROM __all_unit WHERE resource_pool_id = {pool()['resource_pool_id']} ORDER BY unit_id"
        )
    ] == ids[1:]
    assert alter("p2", (("unit_num", (1, ())),)) is True  # the newest goes
    assert len(units()) == 1

    # UNIT: a config that outgrows a server is refused naming it; exactly its size fits.
    s = w.layer.servers.get(B)  # p1's z2 unit only
    assert s is not None
    s.resource_info.mem_total = 9 * GIB - 1
    e = refusal(alter, "p1", (("unit", "big"),))
    assert e.message == (
        f"zone 'z2' server '{B}' MEMORY_SIZE resource is not enough to hold a new unit"
    )
    s.resource_info.mem_total = 9 * GIB
    assert alter("p1", (("unit", "big"),)) is True
    assert alter("p1", (("unit", "u1"),)) is True  # shrinking back
    s.resource_info.mem_total = 16 * GIB
    assert refusal(alter, "p2", (("unit", "nope"),)).name == "OB_RESOURCE_UNIT_NOT_EXIST"
    assert alter("p2", (("unit", "fits"),)) is True
    assert alter("p2", (("unit", "fits"),)) is False

    # ZONE_LIST: repeat, unknown zone, add and remove at once, a granted pool.
    assert refusal(alter, "p2", (("zone_list", ("z1", "z1")),)).name == "OB_OP_NOT_ALLOW"
    assert refusal(alter, "p2", (("zone_list", ("z9",)),)).name == "OB_ZONE_INFO_NOT_EXIST"
    e = refusal(alter, "p2", (("zone_list", ("z2",)),))
    assert e.message == "Cannot add and delete zones at the same time not allowed"
    e = refusal(alter, "p1", (("zone_list", ("z1", "z2")),))
    assert e.message == "alter resource pool zone list with not empty unit not allowed"
    assert alter("p2", (("zone_list", ("z1", "z2")),)) is True
    assert sorted(z for z, _ in units()) == ["z1", "z2"] and pool()["zone_list"] == "z1;z2"
    assert alter("p2", (("zone_list", ("z2",)),)) is True
    assert [z for z, _ in units()] == ["z2"]
