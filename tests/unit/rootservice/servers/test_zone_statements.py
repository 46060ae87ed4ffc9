"""ZONE_TYPE on ADD / ALTER ZONE and DBA_OB_ZONES.TYPE, ISOLATE ZONE, RELOAD ZONE, and START
SERVER on a server reporting a disk error: each rule on both sides, through the statements
on an in-process RS with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from rootservice.db import zone_repo
from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.admin import disk_error_message
from rootservice.servers.status import ReportStatus
from rootservice.servers.zones import ENCRYPTION_ZONE_MESSAGE, MULTIPLE_ZONES_MESSAGE
from tests.support.harness import ROOT, A, B, C, error_name, events, heartbeat_all
from tests.support.tenants import rows as raw_rows
from tests.support.tenants import sql


def rows(rs: RootService, query: str) -> list[dict[str, Any]]:
    """The rows of ``query`` with lower-case column names (SQLite keeps the view's case)."""
    return [{k.lower(): v for k, v in r.items()} for r in raw_rows(rs, query)]


@dataclass
class Refusal:
    name: str
    message: str


def refusal(rs: RootService, text: str) -> Refusal:
    """The error a statement is answered with, as the client reads it."""
    resp = execute_sql(rs, text, ROOT)
    assert resp.error.code, f"{text} was not refused"
    return Refusal(resp.error.name, resp.error.message)


def zone_types(rs: RootService) -> dict[str, str]:
    return {r["zone"]: r["type"] for r in rows(rs, "SELECT ZONE, TYPE FROM DBA_OB_ZONES")}


def zone(rs: RootService, name: str) -> ZoneInfo:
    z = rs.zones.get(name)
    assert z is not None
    return z


def zone_events(rs: RootService) -> list[str]:
    return [e["event"] for e in events(rs) if e["module"] == "zone"]


# --- ZONE_TYPE ------------------------------------------------------------------------------


def test_add_zone_takes_readwrite_in_any_case_and_dba_ob_zones_shows_it(rs: RootService) -> None:
    sql(rs, "ALTER SYSTEM ADD ZONE z4 ZONE_TYPE 'readWRITE', REGION 'r2'")
    sql(rs, "ALTER SYSTEM ADD ZONE z5")
    assert zone(rs, "z4").zone_type == zone(rs, "z5").zone_type == "ReadWrite"
    assert zone_types(rs)["z4"] == "ReadWrite"
    got = rows(rs, "SELECT info, value FROM __all_zone WHERE zone = 'z4' AND name = 'zone_type'")
    assert got == [{"info": "ReadWrite", "value": 0}]
    # The view reads the row: another type written there is shown as it is...
    with rs.store.txn() as conn:
        zone_repo.upsert_zone(conn, ZoneInfo("z5", "INACTIVE", "r1", "", "Encryption"), 1)
    assert zone_types(rs)["z5"] == "Encryption"
    # ...and a zone without the row (made before it existed) reads ReadWrite.
    with rs.store.txn() as conn:
        conn.execute(sa.text("DELETE FROM __all_zone WHERE name = 'zone_type' AND zone = 'z5'"))
    assert zone_types(rs)["z5"] == "ReadWrite"
    assert [e["event"] for e in events(rs, "add_zone")] == ["add_zone", "add_zone"]


@pytest.mark.parametrize(
    ("zone_type", "name", "message"),
    [
        ("ReadOnly", "OB_NOT_SUPPORTED", "ZONE_TYPE 'ReadOnly' not supported"),
        ("Encryption", "OB_OP_NOT_ALLOW", f"{ENCRYPTION_ZONE_MESSAGE} not allowed"),
        ("ReadWriteX", "OB_INVALID_ARGUMENT", "Incorrect arguments to ZONE_TYPE"),
        ("", "OB_INVALID_ARGUMENT", "Incorrect arguments to ZONE_TYPE"),
    ],
)
def test_add_zone_refuses_the_types_it_does_not_support(
    rs: RootService, zone_type: str, name: str, message: str
) -> None:
    with pytest.raises(ObError) as e:
        rs.zones.add_zone("z4", None, None, zone_type)
    assert e.value.name == name
    assert e.value.message.startswith(message)
    assert not rs.zones.exists("z4")
    assert "z4" not in zone_types(rs)
    assert events(rs, "add_zone") == []


def test_a_zone_option_given_twice_is_refused_as_oceanbase_resolver_does(rs: RootService) -> None:
    for text, option in [
        ("ALTER SYSTEM ADD ZONE z4 REGION 'a', REGION 'b'", "region"),
        ("ALTER SYSTEM ADD ZONE z4 IDC 'a' ZONE_TYPE 'ReadWrite' IDC 'b'", "idc"),
        ("ALTER SYSTEM ALTER ZONE z1 ZONE_TYPE 'ReadWrite', ZONE_TYPE 'ReadWrite'", "zone_type"),
    ]:
        e = refusal(rs, text)
        assert (e.name, f"multiple {option} option" in e.message) == ("OB_NOT_SUPPORTED", True)
    assert not rs.zones.exists("z4")
    # Once each: accepted.
    sql(rs, "ALTER SYSTEM ADD ZONE z4 REGION 'a', IDC 'i', ZONE_TYPE 'ReadWrite'")
    assert (zone(rs, "z4").region, zone(rs, "z4").idc) == ("a", "i")


def test_alter_zone_type_is_not_supported_and_rolls_back_the_region_given_with_it(
    rs: RootService,
) -> None:
    before = rs.zones.get("z1")
    e = refusal(rs, "ALTER SYSTEM ALTER ZONE z1 SET REGION 'r9', ZONE_TYPE 'ReadWrite'")
    assert e.name == "OB_NOT_SUPPORTED" and "alter zone type not supported" in e.message
    assert rs.zones.get("z1") == before
    assert rows(rs, "SELECT REGION FROM DBA_OB_ZONES WHERE ZONE = 'z1'") == [{"region": "r1"}]
    # Unknown zone first, as ObZoneManagerBase::alter_zone finds the zone first.
    assert refusal(rs, "ALTER SYSTEM ALTER ZONE nozone ZONE_TYPE 'ReadWrite'").name == (
        "OB_ENTRY_NOT_EXIST"
    )
    assert refusal(rs, "ALTER SYSTEM ALTER ZONE z1 ZONE_TYPE 'bogus'").name == (
        "OB_INVALID_ARGUMENT"
    )
    # Without ZONE_TYPE the same statement changes the region.
    sql(rs, "ALTER SYSTEM ALTER ZONE z1 SET REGION 'r9'")
    assert zone(rs, "z1").region == "r9"
    assert zone_events(rs) == ["alter_zone"]


# --- ISOLATE ZONE -----------------------------------------------------------------------------


def test_isolate_zone_skips_the_other_stopped_zone_rule_that_stop_zone_has(
    rs: RootService,
) -> None:
    heartbeat_all(rs)
    e = refusal(rs, "ALTER SYSTEM ISOLATE ZONE nozone")
    assert (e.name, e.message) == ("OB_ENTRY_NOT_EXIST", "zone not exist")
    rs.server_admin.stop_servers([B], None, "STOP")  # a server of z2 stopped
    # STOP ZONE z3 is refused while z2 has a stopped server; ISOLATE ZONE z3 is not.
    assert error_name(rs.server_admin.stop_zone, "z3") == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    assert refusal(rs, "ALTER SYSTEM STOP ZONE z3").message == MULTIPLE_ZONES_MESSAGE
    sql(rs, "ALTER SYSTEM ISOLATE ZONE z3")
    assert not rs.zones.is_active("z3")
    c = rs.whitelist.get(C)
    assert c is not None and c.stop_time == 0 and c.is_alive()  # the server keeps serving
    assert rows(rs, "SELECT STATUS FROM DBA_OB_ZONES WHERE ZONE = 'z3'") == [{"status": "INACTIVE"}]
    # Again: INACTIVE already, the statement succeeds and changes nothing.
    sql(rs, "ALTER SYSTEM ISOLATE ZONE z3")
    assert zone_events(rs) == ["isolate_zone"]
    # START ZONE undoes it.
    sql(rs, "ALTER SYSTEM START ZONE z3")
    assert rs.zones.is_active("z3")
    assert zone_events(rs) == ["isolate_zone", "start_zone"]


def test_isolate_zone_refuses_the_last_active_zone(rs: RootService) -> None:
    heartbeat_all(rs)
    sql(rs, "ALTER SYSTEM ISOLATE ZONE z2")
    sql(rs, "ALTER SYSTEM ISOLATE ZONE z3")
    assert refusal(rs, "ALTER SYSTEM ISOLATE ZONE z1").name == "OB_OP_NOT_ALLOW"
    assert rs.zones.is_active("z1")
    assert zone_events(rs) == ["isolate_zone", "isolate_zone"]


def test_isolate_zone_takes_no_region_or_type(rs: RootService) -> None:
    assert refusal(rs, "ALTER SYSTEM ISOLATE ZONE z1 REGION 'r'").name == "OB_INVALID_ARGUMENT"
    assert rs.zones.is_active("z1")


# --- RELOAD ZONE ------------------------------------------------------------------------------


def test_reload_zone_takes_the_tables_side_and_says_what_changed(rs: RootService) -> None:
    assert sql(rs, "ALTER SYSTEM RELOAD ZONE").info == "0 zone change(s)"
    with rs.store.txn() as conn:
        conn.execute(
            sa.text("UPDATE __all_zone SET info = 'r7' WHERE zone = 'z2' AND name = 'region'")
        )
        zone_repo.upsert_zone(conn, ZoneInfo("z9", "INACTIVE", "r1", ""), 1)
    assert zone(rs, "z2").region == "r1"  # behind the RS's back: memory unchanged
    info = sql(rs, "ALTER SYSTEM RELOAD ZONE").info
    assert info == "2 zone change(s); zone z2 region 'r1' -> 'r7'; zone z9 added"
    assert zone(rs, "z2").region == "r7" and rs.zones.exists("z9")
    [ev] = events(rs, "admin_reload_zone")[-1:]
    assert (ev["module"], ev["value1"]) == ("root_service", "2")
    assert sql(rs, "ALTER SYSTEM RELOAD ZONE").info == "0 zone change(s)"


# --- START SERVER and the disk ----------------------------------------------------------------


def _disk(rs: RootService, server: str, status: ReportStatus) -> None:
    def set_status(s: Any) -> None:
        s.server_report_status = status

    rs.whitelist.with_server(server, set_status)


def test_start_server_is_refused_while_the_agent_reports_a_disk_error(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.stop_servers([A], None, "FORCE_STOP")
    stopped = rs.whitelist.get(A)
    assert stopped is not None and stopped.stop_time != 0
    _disk(rs, A, ReportStatus.DATA_DISK_ERROR)
    e = refusal(rs, f"ALTER SYSTEM START SERVER '{A}'")
    assert e.name == "OB_OP_NOT_ALLOW"
    assert e.message == f"{disk_error_message(A)} not allowed"
    assert "may encounter device failures. Please check GV$OB_SERVERS" in e.message
    after = rs.whitelist.get(A)
    assert after is not None and after.stop_time == stopped.stop_time
    assert events(rs, "start_server") == []
    # A statement naming a healthy server too is refused whole.
    assert refusal(rs, f"ALTER SYSTEM START SERVER '{B}', '{A}'").name == "OB_OP_NOT_ALLOW"
    # The disk healthy again: START SERVER goes through.
    _disk(rs, A, ReportStatus.NORMAL)
    sql(rs, f"ALTER SYSTEM START SERVER '{A}'")
    started = rs.whitelist.get(A)
    assert started is not None and started.stop_time == 0
    assert len(events(rs, "start_server")) == 1
