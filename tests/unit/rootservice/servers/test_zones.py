"""Zones (SPEC.md sections 4 and 7). Unit tests on an in-process RS with a FakeClock, on SQLite
and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rootservice.app import RootService
from tests.support.harness import (
    ZA,
    error_name,
)
from tests.support.server_parts import make_parts, seed


def test_zone_operations(rs: RootService) -> None:
    z = rs.zones
    z.add_zone("z4", "r2", "idc1")
    assert z.get("z4").status == "INACTIVE" and z.get("z4").region == "r2"
    assert error_name(z.add_zone, "z4", None, None) == "OB_ENTRY_EXIST"
    z.set_status("z4", True)
    assert z.is_active("z4")
    z.set_status("z3", False)
    assert error_name(z.set_status, "z4", False) == "OB_OP_NOT_ALLOW"
    z.set_status("z4", False, force=True)
    assert not z.is_active("z4")
    assert error_name(z.delete_zone, "z1") == "OB_OP_NOT_ALLOW"
    assert error_name(z.set_status, "nozone", True) == "OB_ZONE_INFO_NOT_EXIST"
    z.delete_zone("z4")
    assert not z.exists("z4")
    rs.server_loader.load(take_office=False)
    assert not z.exists("z4") and not z.is_active("z3")


# --- built from its collaborators, without RootService ------------------------------------


def test_zone_manager_alone_refuses_to_delete_a_zone_with_servers(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    assert error_name(p.zones.delete_zone, ZA) == "OB_OP_NOT_ALLOW"
    p.zones.add_zone("z9", None, None)
    assert not p.zones.is_active("z9") and p.zones.exists("z9")
    p.zones.delete_zone("z9")
    assert p.zones.get("z9") is None
