"""ALTER SYSTEM RUN JOB 'ROOT_INSPECTION', RELOAD UNIT and ISOLATE ZONE's tenant rule on an
in-process RS with a tenant (tests.support.tenants), on SQLite and PostgreSQL: a clean run
finds nothing; rows changed behind the RS's back are found, each once, as events, in the
job's row and in the statement's answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from rootservice.root_inspection import CHECKS
from tests.support.harness import ROOT, events, flush, jobs
from tests.support.tenants import B, C, make_tenant, make_tenant_rs, sql


@pytest.fixture
def trs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_tenant_rs(db_url, tmp_path)
    make_tenant(r)
    flush(r)
    yield r
    r.shutdown()


def inspect(rs: RootService) -> tuple[dict[str, str], dict[str, Any]]:
    """Run the job: its NAME -> INFO rows and its job row."""
    resp = execute_sql(rs, "ALTER SYSTEM RUN JOB 'ROOT_INSPECTION'", ROOT)
    assert not resp.error.code, resp.error.message
    got = {r.cells[0].string_value: r.cells[1].string_value for r in resp.rows}
    return got, jobs(rs)[-1]


def write(rs: RootService, text: str) -> None:
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text(text))


def test_a_clean_state_passes_and_each_planted_difference_is_reported(trs: RootService) -> None:
    got, job = inspect(trs)
    assert got == {c: "succeed" for c in CHECKS}
    assert (job["job_type"], job["job_status"], job["return_code"]) == (
        "ROOT_INSPECTION",
        "SUCCESS",
        0,
    )
    assert job["extra_info"] == "0 difference(s)"
    assert events(trs, "root_inspection") == []
    # Behind the RS's back: a zone's region, a server's stop_time, a unit's server.
    write(trs, "UPDATE __all_zone SET info = 'r5' WHERE zone = 'z2' AND name = 'region'")
    write(trs, f"UPDATE __all_server SET stop_time = 7 WHERE svr_port = {C.split(':')[1]}")
    write(trs, f"UPDATE __all_unit SET svr_port = 3999 WHERE svr_port = {B.split(':')[1]}")
    got, job = inspect(trs)
    assert got["zone_table"] == "zone z2 region 'r1' -> 'r5' (memory -> __all_zone)"
    assert got["server_table"] == f"server {C} stop_time: memory 0, __all_server 7"
    assert "(memory -> tables)" in got["unit_layout"] and "127.0.0.1:3999" in got["unit_layout"]
    assert "127.0.0.1:3999, which DBA_OB_SERVERS lacks" in got["view_consistency"]
    found = events(trs, "root_inspection")
    assert len(found) >= 4 and {e["module"] for e in found} == {"inspector"}
    assert {e["value1"] for e in found} == set(CHECKS)
    assert (job["job_status"], job["return_code"]) == ("FAILED", ObError("OB_STATE_NOT_MATCH").code)
    assert job["extra_info"].startswith(f"{len(found)} difference(s); ")
    assert "zone z2 region 'r1' -> 'r5'" in job["extra_info"]
    # RELOAD ZONE / UNIT / SERVER take the tables' side: memory agrees again; the views
    # still disagree about the unit on a server that does not exist.
    sql(trs, "ALTER SYSTEM RELOAD ZONE")
    info = sql(trs, "ALTER SYSTEM RELOAD UNIT").info
    assert info.startswith("1 unit change(s); ") or info.startswith("2 unit change(s); "), info
    assert "127.0.0.1:3999" in info
    assert sql(trs, "ALTER SYSTEM RELOAD UNIT").info == "0 unit change(s)"
    sql(trs, "ALTER SYSTEM RELOAD SERVER")
    got, job = inspect(trs)
    assert [c for c, v in got.items() if v != "succeed"] == ["view_consistency"]
    # The unit back on its server: everything agrees once memory is reloaded.
    write(trs, f"UPDATE __all_unit SET svr_port = {B.split(':')[1]} WHERE svr_port = 3999")
    got, _ = inspect(trs)
    assert [c for c, v in got.items() if v != "succeed"] == ["unit_layout"]
    sql(trs, "ALTER SYSTEM RELOAD UNIT")
    got, job = inspect(trs)
    assert got == {c: "succeed" for c in CHECKS} and job["job_status"] == "SUCCESS"


def test_run_job_names_the_one_job_it_runs(trs: RootService) -> None:
    resp = execute_sql(trs, "ALTER SYSTEM RUN JOB 'UPGRADE_INSPECTION'", ROOT)
    assert resp.error.name == "OB_NOT_SUPPORTED"
    assert "RUN JOB 'UPGRADE_INSPECTION' not supported" in resp.error.message
    assert [j for j in jobs(trs) if j["job_type"] == "ROOT_INSPECTION"] == []
    inspect(trs)  # any case of the name
    assert execute_sql(trs, "ALTER SYSTEM RUN JOB 'root_inspection'", ROOT).error.code == 0


def _stop(rs: RootService, server: str) -> None:
    def stopped(s: Any) -> None:
        s.stop_time = 1

    rs.whitelist.with_server(server, stopped)


def test_isolate_zone_is_refused_when_the_tenants_primary_region_would_be_stopped(
    trs: RootService,
) -> None:
    # t1: units in z1, z2, z3 (all region r1), primary zone z1: its primary region is r1.
    _stop(trs, B)  # z2 has a stopped server, and t1 a unit there
    _stop(trs, C)  # so has z3
    resp = execute_sql(trs, "ALTER SYSTEM ISOLATE ZONE z1", ROOT)
    assert resp.error.name == "OB_OP_NOT_ALLOW"
    assert resp.error.message.startswith(
        "Stop all server in primary region is disabled not allowed, tenant t1"
    )
    assert trs.zones.is_active("z1")
    assert events(trs, "isolate_zone") == []
    # One zone of the region left running (C started): the rule passes, and the next
    # check speaks: the disruption budget (z1 isolated and B stopped leave each log stream
    # one member of three), as it judges ISOLATE SERVER.
    trs.whitelist.with_server(C, lambda s: setattr(s, "stop_time", 0))
    resp = execute_sql(trs, "ALTER SYSTEM ISOLATE ZONE z1", ROOT)
    assert resp.error.name == "OB_OP_NOT_ALLOW"
    assert "disruption budget" in resp.error.message
    assert "primary region" not in resp.error.message
    # Nothing else stopped: allowed (the rule only looks at tenants on stopped servers).
    trs.whitelist.with_server(B, lambda s: setattr(s, "stop_time", 0))
    sql(trs, "ALTER SYSTEM ISOLATE ZONE z1")
    assert not trs.zones.is_active("z1")
    assert len(events(trs, "isolate_zone")) == 1


class _HeartbeatOnRead:
    """The persistence queue's pending set, with a heartbeat landing right after it is
    read: ``server``'s build_version changes in memory and its row is queued, under the
    whitelist lock, as the heartbeat path does."""

    def __init__(self, rs: RootService, server: str) -> None:
        self.rs = rs
        self.server = server
        self.landed = 0

    def pending_keys(self) -> set[str]:
        keys = self.rs.persist.pending_keys()
        if not self.landed:
            self.landed += 1

            def upgraded(s: Any) -> None:
                s.build_version = "4.2.1-after"
                self.rs.persist.mark(self.server)

            self.rs.whitelist.with_server(self.server, upgraded)
        return keys


def test_a_heartbeat_landing_during_the_run_is_no_difference(trs: RootService) -> None:
    # The queue is read after memory: a row changed meanwhile is a queued one, not a
    # difference between memory and __all_server.
    hook = _HeartbeatOnRead(trs, B)
    trs.root_inspection.pending = hook
    got, job = inspect(trs)
    assert hook.landed == 1
    assert got == {c: "succeed" for c in CHECKS} and job["job_status"] == "SUCCESS"
    # The queued row is written; the next run agrees with the table too.
    flush(trs)
    got, _ = inspect(trs)
    assert got == {c: "succeed" for c in CHECKS}
