"""Upgrade mode through the statements of an in-process RS (FakeClock, SQLite and
PostgreSQL): BEGIN UPGRADE refused with its blockers named and nothing changed, then
accepted; the stages and their refusals; the events and SHOW PARAMETERS rows; tenant DDL
refused in upgrade mode; permanent offline and re-replication held; STOP ZONE's zone order;
and the mode read back by a leader taking office."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.balancer.planner import Row
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import SEEDED, A, B, C, D, events, flush, hb, hb_status, make_rs
from tests.support.tenants import lease, sql

S = 1_000_000
LEASE = 10 * S
NEW = "0.2.0_ob-rootservice-py"


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path, server_permanent_offline_time="30s")
    yield r
    r.shutdown()


def refused(rs: RootService, statement: str) -> ObError:
    with pytest.raises(ObError) as e:
        sql(rs, statement)
    return e.value


def heartbeat(rs: RootService, servers: list[tuple[str, str]] = SEEDED, **fields: Any) -> None:
    for server, zone in servers:
        rs.heartbeats.receive_hb(hb(server, zone, **fields))


def shown(rs: RootService) -> dict[str, str]:
    out = {}
    for row in sql(rs, "SHOW PARAMETERS LIKE '%upgrade%'").rows:
        cells = [c.string_value for c in row.cells]
        out[cells[4]] = cells[6]  # OceanBase's SHOW PARAMETERS: name 5th, value 7th
    return out


def upgrade_events(rs: RootService) -> list[tuple[str, str]]:
    flush(rs)
    return [
        (e["event"], next(e[f"value{i}"] for i in range(1, 7) if e[f"name{i}"] == "user"))
        for e in events(rs)
        if e["module"] == "upgrade"
    ]


BEGIN = "ALTER SYSTEM BEGIN UPGRADE"


def test_begin_upgrade_refused_then_accepted(rs: RootService) -> None:
    # Nobody has heartbeated since the take office: no server is ACTIVE.
    err = refused(rs, BEGIN)
    assert err.name == "OB_OP_NOT_ALLOW" and "BEGIN UPGRADE not allowed" in err.message
    assert all(f"server '{s}' is not ACTIVE" in err.message for s, _ in SEEDED)
    heartbeat(rs, SEEDED[:3])
    err = refused(rs, BEGIN)
    assert f"server '{D}' is not ACTIVE" in err.message and f"'{A}'" not in err.message
    heartbeat(rs, SEEDED[3:], build_version=NEW)
    err = refused(rs, BEGIN)
    assert "the servers run more than one release" in err.message
    assert shown(rs) == {"enable_upgrade_mode": "False", "_upgrade_stage": "NONE"}
    assert not rs.versions.in_upgrade_mode() and upgrade_events(rs) == []
    heartbeat(rs)
    assert "tenant DDL" in sql(rs, BEGIN).info
    assert shown(rs) == {"enable_upgrade_mode": "True", "_upgrade_stage": "PREUPGRADE"}
    assert rs.versions.in_upgrade_mode()
    assert sql(rs, BEGIN).affected_rows == 0  # already: nothing written
    assert upgrade_events(rs) == [("begin_upgrade", "root")]


def test_the_stages_in_order(rs: RootService) -> None:
    heartbeat(rs)
    err = refused(rs, "ALTER SYSTEM BEGIN ROLLING UPGRADE")
    assert "not in upgrade mode" in err.message
    assert sql(rs, "ALTER SYSTEM END UPGRADE").affected_rows == 0  # not in it: nothing to end
    sql(rs, BEGIN)
    sql(rs, "ALTER SYSTEM BEGIN ROLLING UPGRADE")
    assert shown(rs)["_upgrade_stage"] == "DBUPGRADE"
    err = refused(rs, "ALTER SYSTEM END UPGRADE")
    assert "END ROLLING UPGRADE first" in err.message
    assert shown(rs)["_upgrade_stage"] == "DBUPGRADE" and rs.versions.in_upgrade_mode()
    # END ROLLING UPGRADE keeps its own rule: refused until every server runs the release.
    err = refused(rs, "ALTER SYSTEM END ROLLING UPGRADE")
    assert "must report release 0.2.0" in err.message
    assert shown(rs)["_upgrade_stage"] == "DBUPGRADE"
    heartbeat(rs, build_version=NEW)
    assert "raised from 0.1.0 to 0.2.0" in sql(rs, "ALTER SYSTEM END ROLLING UPGRADE").info
    assert shown(rs) == {
        "enable_upgrade_mode": "True",
        "_upgrade_stage": "POSTUPGRADE",
    }
    err = refused(rs, "ALTER SYSTEM BEGIN ROLLING UPGRADE")
    assert "has ended" in err.message
    assert sql(rs, "ALTER SYSTEM END UPGRADE").affected_rows == 1
    assert shown(rs) == {"enable_upgrade_mode": "False", "_upgrade_stage": "NONE"}
    assert not rs.versions.in_upgrade_mode()
    assert upgrade_events(rs) == [
        ("begin_upgrade", "root"),
        ("begin_rolling_upgrade", "root"),
        ("end_rolling_upgrade", "root"),
        ("end_upgrade", "root"),
    ]


def test_the_mode_is_stored_for_the_next_leader(rs: RootService) -> None:
    heartbeat(rs)
    sql(rs, BEGIN)
    rs.versions.set_upgrade_stage("NONE")  # a new leader's memory
    rs.office.do_restart()
    assert rs.versions.upgrade_stage == "PREUPGRADE" and rs.versions.in_upgrade_mode()
    for name in ("enable_upgrade_mode", "_upgrade_stage"):
        err = refused(rs, f"ALTER SYSTEM SET {name} = 'False'")
        assert err.name == "OB_OP_NOT_ALLOW" and "BEGIN / END [ROLLING] UPGRADE" in err.message
    assert rs.versions.in_upgrade_mode()


TENANT_DDL = [
    ("CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1')", "CREATE RESOURCE POOL"),
    ("ALTER RESOURCE POOL p1 UNIT_NUM 1", "ALTER RESOURCE POOL"),
    ("DROP RESOURCE POOL p1", "DROP RESOURCE POOL"),
    ("CREATE TENANT t2 RESOURCE_POOL_LIST ('p1')", "CREATE TENANT"),
    ("ALTER TENANT t1 PRIMARY_ZONE 'z2'", "ALTER TENANT"),
    ("DROP TENANT t1", "DROP TENANT"),
]


def test_tenant_ddl_is_refused_in_upgrade_mode(rs: RootService) -> None:
    for server in (A, B, C, D):
        rs.heartbeats.receive_hb(lease(server))  # with room for units
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '1G'")
    sql(rs, BEGIN)
    for statement, name in TENANT_DDL:
        err = refused(rs, statement)
        assert err.name == "OB_OP_NOT_ALLOW", statement
        assert f"in upgrade mode, {name} is not allowed" in err.message
    # A unit config is no tenant DDL; a pool is, and works again after END UPGRADE.
    sql(rs, "CREATE RESOURCE UNIT u2 MAX_CPU 1, MEMORY_SIZE '1G'")
    sql(rs, "ALTER SYSTEM END UPGRADE")
    sql(rs, TENANT_DDL[0][0])


def test_permanent_offline_is_held_in_upgrade_mode(rs: RootService) -> None:
    rs.clock.advance(LEASE)  # past the take-office grace
    heartbeat(rs)
    sql(rs, BEGIN)
    for _ in range(6):  # 60 s, A silent, past server_permanent_offline_time (30 s)
        rs.clock.advance(LEASE)
        heartbeat(rs, SEEDED[1:])
        rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    sql(rs, "ALTER SYSTEM END UPGRADE")
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.PERMANENT_OFFLINE


class RecordingPlanner:
    """A planner that plans nothing and records that it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        self.asked.append("unit_plan")
        return []

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        self.asked.append("replica_plan")
        return []

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        self.asked.append("lost_replicas")
        return []


def test_re_replication_is_held_in_upgrade_mode(db_url: str, tmp_path: Path) -> None:
    planner = RecordingPlanner()
    rs = make_rs(db_url, tmp_path, planner=planner)
    try:
        heartbeat(rs)
        sql(rs, BEGIN)
        rs.whitelist.with_server(
            A, lambda s: setattr(s, "hb_status", HeartbeatStatus.PERMANENT_OFFLINE)
        )
        assert rs.migration.run_once() == 0 and planner.asked == []
        sql(rs, "ALTER SYSTEM END UPGRADE")
        rs.migration.run_once()
        assert planner.asked[:1] == ["unit_plan"]
    finally:
        rs.shutdown()


def test_stop_zone_keeps_the_zone_order(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    heartbeat(rs)
    sql(rs, BEGIN)
    sql(rs, "ALTER SYSTEM BEGIN ROLLING UPGRADE")
    heartbeat(rs, SEEDED[3:], build_version=NEW)  # z1 half-upgraded: D new, A old
    err = refused(rs, "ALTER SYSTEM STOP ZONE 'z2'")
    assert err.name == "OB_OP_NOT_ALLOW" and "zone 'z1' is half-upgraded" in err.message
    assert rs.zones.get("z2").active  # type: ignore[union-attr]
    heartbeat(rs, SEEDED[:1], build_version=NEW)  # z1 done
    sql(rs, "ALTER SYSTEM STOP ZONE 'z2'")
    sql(rs, "ALTER SYSTEM START ZONE 'z2'")
    rs.clock.advance(LEASE)
    heartbeat(rs, [SEEDED[0], SEEDED[1], SEEDED[3]], build_version=NEW)
    rs.lease_checker.run_once()  # C (z3) expires
    err = refused(rs, "ALTER SYSTEM STOP ZONE 'z2'")
    assert f"server '{C}' is not ACTIVE" in err.message
    assert f"'{B}'" not in err.message  # the zone being stopped is not judged


def test_end_rolling_upgrade_needs_no_begin_rolling_upgrade(rs: RootService) -> None:
    heartbeat(rs, build_version=NEW)
    sql(rs, "ALTER SYSTEM END ROLLING UPGRADE")  # outside upgrade mode, as before
    assert shown(rs)["_upgrade_stage"] == "NONE"
    sql(rs, BEGIN)
    # From PREUPGRADE: nothing left to raise, the stage still moves on, with its own event.
    assert "0.2.0 already" in sql(rs, "ALTER SYSTEM END ROLLING UPGRADE").info
    assert shown(rs)["_upgrade_stage"] == "POSTUPGRADE"
    sql(rs, "ALTER SYSTEM END UPGRADE")
    assert upgrade_events(rs) == [
        ("end_rolling_upgrade", "root"),
        ("begin_upgrade", "root"),
        ("end_rolling_upgrade", "root"),
        ("end_upgrade", "root"),
    ]
