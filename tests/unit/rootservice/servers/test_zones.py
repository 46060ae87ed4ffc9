"""Zones (docs/design/servers.md and docs/design/statements.md: OceanBase's zone rules, docs/ZONES.md).
Each rule on both sides, allowed and refused, on an in-process RS with a FakeClock or on the
server layer's parts, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.db.zone_repo import DEFAULT_REGION
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_client import EmptyCheck
from rootservice.servers.ports import inline
from rootservice.servers.zones import MAX_ZONE_NUM, MULTIPLE_ZONES_MESSAGE
from tests.support.harness import (
    ZA,
    A,
    B,
    C,
    D,
    error_name,
    events,
    heartbeat_all,
)
from tests.support.server_parts import Parts, make_parts, seed


def refusal(fn: object, *args: object, **kwargs: object) -> tuple[str, int, str]:
    """``(name, code, message)`` of the ObError ``fn`` raises."""
    with pytest.raises(ObError) as e:
        fn(*args, **kwargs)  # type: ignore[operator]
    return e.value.name, e.value.code, e.value.message


def zone_events(rs: RootService) -> list[str]:
    return [e["event"] for e in events(rs) if e["module"] == "zone"]


# --- ADD ZONE ---------------------------------------------------------------------------------


def test_add_zone_is_inactive_with_the_default_region_and_refuses_an_existing_zone(
    rs: RootService,
) -> None:
    z = rs.zones
    z.add_zone("z4", None, None)
    assert (z.get("z4").status, z.get("z4").region) == ("INACTIVE", DEFAULT_REGION)
    assert DEFAULT_REGION == "default_region"  # ob_define.h DEFAULT_REGION_NAME
    z.add_zone("z5", "r2", "idc1")
    assert (z.get("z5").region, z.get("z5").idc) == ("r2", "idc1")
    # An existing zone, INACTIVE or ACTIVE: OB_ENTRY_EXIST without LOG_USER_ERROR.
    assert refusal(z.add_zone, "z4", None, None) == ("OB_ENTRY_EXIST", -4017, "Entry already exist")
    assert refusal(z.add_zone, "z1", "r9", None)[0] == "OB_ENTRY_EXIST"
    assert z.get("z1").region != "r9"
    assert zone_events(rs) == ["add_zone", "add_zone"]


def test_add_zone_refuses_beyond_max_zone_num(rs: RootService) -> None:
    have = len(rs.zones.all())
    for i in range(MAX_ZONE_NUM - have):
        rs.zones.add_zone(f"n{i}", None, None)
    assert len(rs.zones.all()) == MAX_ZONE_NUM == 64
    assert refusal(rs.zones.add_zone, "one_more", None, None) == (
        "OB_OVER_ZONE_NUM_LIMIT",
        -4632,
        "zone num has reach max zone num",
    )
    assert not rs.zones.exists("one_more")


# --- START ZONE -------------------------------------------------------------------------------


def test_start_zone_needs_an_inactive_zone(rs: RootService) -> None:
    z = rs.zones
    z.add_zone("z4", None, None)
    z.start_zone("z4")
    assert z.is_active("z4")
    assert refusal(z.start_zone, "z4") == (
        "OB_ZONE_STATUS_NOT_MATCH",
        -4633,
        "zone status not match",
    )
    assert refusal(z.start_zone, "nozone") == ("OB_ENTRY_NOT_EXIST", -4018, "Entry not exist")
    assert zone_events(rs) == ["add_zone", "start_zone"]


# --- STOP / FORCE STOP ZONE -------------------------------------------------------------------


def test_stop_zone_one_zone_at_a_time_as_have_other_stop_task(rs: RootService) -> None:
    heartbeat_all(rs)
    m = rs.server_admin
    assert refusal(m.stop_zone, "nozone") == ("OB_ENTRY_NOT_EXIST", -4018, "zone not exist")
    m.stop_zone("z3")
    assert not rs.zones.is_active("z3")
    m.stop_zone("z3")  # INACTIVE already: succeeds without a change (retry until it succeeds)
    m.stop_zone("z3", force=True)
    assert zone_events(rs) == ["stop_zone"]
    # Another zone INACTIVE: STOP and FORCE STOP ZONE refused, as STOP SERVER.
    for force in (False, True):
        assert refusal(m.stop_zone, "z2", force=force) == (
            "OB_STOP_SERVER_IN_MULTIPLE_ZONES",
            -4660,
            MULTIPLE_ZONES_MESSAGE,
        )
    assert error_name(m.stop_servers, [B], None, "STOP") == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    assert rs.zones.is_active("z2")
    rs.zones.start_zone("z3")
    # A stopped server in another zone blocks STOP ZONE too; one in the same zone does not.
    m.stop_servers([B], None, "STOP")
    assert refusal(m.stop_zone, ZA)[0] == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    assert rs.zones.is_active(ZA)
    m.stop_zone("z2", force=True)
    assert not rs.zones.is_active("z2")
    assert zone_events(rs) == ["stop_zone", "start_zone", "force_stop_zone"]


def test_stop_zone_checks_the_zones_servers_as_stop_server(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    admin = make_admin(p, EmptyAgents("z1"))
    p.tenants.refuse = "OB_OP_NOT_ALLOW"
    assert error_name(admin.stop_zone, ZA) == "OB_OP_NOT_ALLOW"
    assert p.zones.is_active(ZA)
    p.tenants.refuse = ""
    p.tenants.calls.clear()
    admin.stop_zone(ZA, force=True)
    assert not p.zones.is_active(ZA)
    assert p.tenants.calls == [
        ("check_stop", ([A, D], "FORCE_STOP")),
        ("move_leaders_off", [A, D]),
    ]


def test_stop_zone_refuses_the_last_active_zone(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p, [(A, "z1")])  # a one-zone cluster
    admin = make_admin(p, EmptyAgents("z1"))
    for force in (False, True):
        assert refusal(admin.stop_zone, "z1", force=force) == (
            "OB_OP_NOT_ALLOW",
            -4179,
            "Operation not allowed now",
        )
    assert p.zones.is_active("z1")
    # With a second ACTIVE zone it may stop.
    p.zones.add_zone("z2", None, None)
    p.zones.start_zone("z2")
    admin.stop_zone("z1")
    assert not p.zones.is_active("z1")


# --- DELETE ZONE ------------------------------------------------------------------------------


def test_delete_zone_needs_an_empty_inactive_zone(rs: RootService) -> None:
    z = rs.zones
    msg = "The zone is not empty and can not be deleted. You should delete the servers of the zone."
    assert refusal(z.delete_zone, ZA) == (
        "OB_ERR_ZONE_NOT_EMPTY",
        -4668,
        f"{msg} There are 0 servers alive and 2 not alive.",
    )
    heartbeat_all(rs)
    assert refusal(z.delete_zone, ZA)[2] == f"{msg} There are 2 servers alive and 0 not alive."
    assert refusal(z.delete_zone, "nozone") == ("OB_ENTRY_NOT_EXIST", -4018, "Entry not exist")
    z.add_zone("z4", None, None)
    z.start_zone("z4")
    assert refusal(z.delete_zone, "z4") == (
        "OB_ZONE_STATUS_NOT_MATCH",
        -4633,
        "zone status not match",
    )
    rs.server_admin.stop_zone("z4")
    z.delete_zone("z4")
    assert not z.exists("z4")
    rs.server_loader.load(take_office=False)
    assert not z.exists("z4") and z.exists(ZA)
    assert zone_events(rs)[-1] == "delete_zone"


# --- ALTER ZONE -------------------------------------------------------------------------------


def test_alter_zone_changes_region_and_idc(rs: RootService) -> None:
    z = rs.zones
    z.alter_zone(ZA, "r7", None)
    assert (z.get(ZA).region, z.get(ZA).status) == ("r7", "ACTIVE")
    z.alter_zone(ZA, None, "idc7")
    z.alter_zone(ZA, "", None)  # an empty region is OceanBase's default region
    rs.server_loader.load(take_office=False)
    assert (z.get(ZA).region, z.get(ZA).idc) == (DEFAULT_REGION, "idc7")
    assert refusal(z.alter_zone, "nozone", "r1", None)[0] == "OB_ENTRY_NOT_EXIST"
    assert error_name(z.alter_zone, ZA, None, None) == "OB_INVALID_ARGUMENT"


# --- STOP SERVER and ADD SERVER's zone rules --------------------------------------------------


def test_stop_server_of_stopped_servers_skips_the_precheck(rs: RootService) -> None:
    heartbeat_all(rs)
    m = rs.server_admin
    m.stop_servers([B], None, "STOP")
    assert refusal(m.stop_servers, [A, C], None, "STOP") == (
        "OB_STOP_SERVER_IN_MULTIPLE_ZONES",
        -4660,
        "Can not stop server in multiple zones",
    )
    assert refusal(m.stop_servers, [A], None, "STOP")[2] == MULTIPLE_ZONES_MESSAGE
    # Every server named is stopped already: nothing to check (stop_server_precheck).
    m.stop_servers([B], None, "FORCE_STOP")
    assert rs.whitelist.get(B).stop_time != 0
    # ...but STOP / FORCE STOP still ask have_other_stop_task for every server named
    # (start_or_stop_server_): A, stopped by ISOLATE (which skips it), is not STOPped while
    # B's zone has a stopped server; ISOLATE again is allowed.
    m.stop_servers([A], None, "ISOLATE")
    assert refusal(m.stop_servers, [A], None, "STOP")[2] == MULTIPLE_ZONES_MESSAGE
    assert refusal(m.stop_servers, [B], None, "FORCE_STOP")[2] == MULTIPLE_ZONES_MESSAGE
    m.stop_servers([A], None, "ISOLATE")


class EmptyAgents:
    """Agents that answer ADD SERVER's emptiness check: empty (or not), started in ``zone``."""

    def __init__(self, zone: str, empty: bool = True) -> None:
        self.zone = zone
        self.empty = empty

    def check_server_empty(self, server: str, epoch: int) -> EmptyCheck:
        return EmptyCheck(self.empty, self.zone, server, "" if self.empty else "c1", 0)


class NoRequests:
    def request_heartbeats(self, servers: object) -> int:
        return 0


def make_admin(p: Parts, agents: EmptyAgents) -> ServerAdmin:
    return ServerAdmin(
        p.whitelist,
        p.zones,
        p.store,
        p.clock,
        p.settings,
        agents,  # type: ignore[arg-type]
        checks=p.tenants,
        leaders=p.tenants,
        cancel_listener=p.balancer,
        heartbeats=NoRequests(),
        wake=p.wake,
        background=inline,
    )


def test_add_server_zone_checks_in_oceanbases_order(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    p.zones.add_zone("z9", None, None)  # INACTIVE until START ZONE
    new = "127.0.0.1:3009"
    # OceanBase 4.3.3's order: the zone the agent was started in, then non-empty, then the
    # zone's status.
    assert error_name(make_admin(p, EmptyAgents("z9", empty=False)).add_servers, [new], "z1") == (
        "OB_SERVER_ZONE_NOT_MATCH"
    )
    name, _, message = refusal(
        make_admin(p, EmptyAgents("z1", empty=False)).add_servers, [new], "z1"
    )
    assert name == "OB_OP_NOT_ALLOW"
    assert message.startswith(f"add non-empty server {new} not allowed")
    assert error_name(make_admin(p, EmptyAgents("z1")).add_servers, [new], "z9") == (
        "OB_SERVER_ZONE_NOT_MATCH"
    )
    assert refusal(make_admin(p, EmptyAgents("z9")).add_servers, [new], None) == (
        "OB_ZONE_NOT_ACTIVE",
        -4655,
        "zone not active",
    )
    assert error_name(make_admin(p, EmptyAgents("nozone")).add_servers, [new], None) == (
        "OB_ZONE_INFO_NOT_EXIST"
    )
    p.zones.start_zone("z9")
    assert make_admin(p, EmptyAgents("z9")).add_servers([new], "z9") == [
        len(p.whitelist.snapshot())
    ]
    assert p.whitelist.get(new).zone == "z9"
