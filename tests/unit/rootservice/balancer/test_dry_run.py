"""EXPLAIN ALTER SYSTEM DELETE SERVER through the statement path of a
RootService with a FakeClock, on SQLite and PostgreSQL: the three-zone tenant of
tests/support/tenants.py (A, D in z1, B in z2, C in z3; plus E in z1 where a third server is
needed), plans from the pandas planner (the Spark jobs' twin, checked against them in
test_spark_jobs.py).

Covers: the units and replicas that would move with their bytes, a unit left without room
as a BLOCKER, an LS without a leader as a BLOCKER, every refusal identical (name and
message) to DELETE SERVER's, and nothing changed: every table and the whitelist equal
before and after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.balancer.dry_run import BLOCKER, COLUMNS, REPLICA, UNIT
from rootservice.balancer.planner import PlannerError, server_rows
from rootservice.balancer.planners import PandasPlanner
from rootservice.http.status import ClusterStatus
from tests.support.harness import SEEDED, make_rs, seed_cluster
from tests.support.tenants import (
    GIB,
    ZONE,
    A,
    B,
    C,
    D,
    lease,
    make_tenant,
    members_of,
    report_all,
    rows,
    sql,
)

E = "127.0.0.1:3005"  # a third server of z1, seeded only where a test needs it


def _lease_e(mem: int) -> obrpc_pb2.LeaseRequest:
    req = lease(A, mem=mem)
    req.server, req.sql_port = E, 4005
    return req


def _rs(db_url: str, tmp_path: Path, *, with_e: bool = False) -> RootService:
    r = make_rs(
        db_url,
        tmp_path,
        seed=False,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
    )
    seed_cluster(r, SEEDED + ([(E, "z1")] if with_e else []))
    r.identity.bootstrapped = True
    r.office.do_restart()
    # What the fake-clock tests plan with (the RS's default is Spark).
    r.delete_dry_run.planner = r.migration.planner = PandasPlanner(db_url)
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    return r


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Any:
    r = _rs(db_url, tmp_path)
    yield r
    r.shutdown()


def explain(rs: RootService, text: str) -> list[dict[str, Any]]:
    resp = sql(rs, text)
    assert list(resp.columns) == list(COLUMNS)
    out = []
    for row in resp.rows:
        values = [None if c.is_null else getattr(c, c.WhichOneof("value")) for c in row.cells]
        out.append(dict(zip(COLUMNS, values, strict=True)))
    return out


def state(rs: RootService) -> tuple[Any, ...]:
    """Every table's rows (sorted, as text) and the whitelist's records."""
    tables = {}
    with rs.store.engine.connect() as conn:
        for name in sorted(sa.inspect(conn).get_table_names()):
            got = conn.execute(sa.text(f'SELECT * FROM "{name}"')).all()
            tables[name] = sorted(repr(tuple(r)) for r in got)
    return tables, repr(rs.whitelist.snapshot()), dict(rs.unit_moves.unplaced)


def z1_member(rs: RootService, tid: int) -> str:
    return next(m for m in members_of(rs, tid, 1001) if ZONE.get(m) == "z1")


def test_units_and_replicas_that_would_move_nothing_changed(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=2)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    gone = z1_member(rs, tid)
    other = D if gone == A else A
    before = state(rs)
    got = explain(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER '{gone}' ZONE 'z1'")
    assert state(rs) == before
    units = [r for r in got if r["kind"] == UNIT]
    replicas = [r for r in got if r["kind"] == REPLICA]
    assert [r for r in got if r["kind"] == BLOCKER] == []
    assert len(units) == 1
    u = units[0]
    assert (u["tenant_id"], u["from_svr"], u["to_svr"]) == (tid, gone, other)
    assert u["reason"] == "server DELETING"
    lss = sorted(k[1] for k in rs.tenant_layer.balancer_view.topology().plans if k[0] == tid)
    assert sorted(r["ls_id"] for r in replicas) == lss
    for r in replicas:
        assert (r["unit_id"], r["from_svr"], r["to_svr"]) == (u["unit_id"], gone, other)
        assert r["bytes"] == 1 << 20  # the data_size the reports carry
    assert u["bytes"] == len(lss) << 20
    # the status API's check_decommission gives the same rows with plan=1
    doc = ClusterStatus(rs).check_decommission([gone], plan=True)
    assert doc == {"ok": True, "reason": "", "plan": got}
    assert state(rs) == before
    # and DELETE SERVER does what EXPLAIN said
    rs.server_admin.delete_servers([gone], None)
    plan = rs.migration.planner.unit_plan(server_rows(rs.whitelist))
    assert [(p["unit_id"], f"{p['to_svr_ip']}:{p['to_svr_port']}") for p in plan] == [
        (u["unit_id"], other)
    ]


def test_no_room_left_by_another_deleting_server_is_a_blocker(db_url: str, tmp_path: Path) -> None:
    rs = _rs(db_url, tmp_path, with_e=True)
    try:
        rs.heartbeats.receive_hb(_lease_e(mem=12 * GIB))
        tid = make_tenant(rs, ls_count=1)  # its z1 unit goes to A (least loaded, first)
        report_all(rs, tid)
        assert z1_member(rs, tid) == A
        sql(rs, "CREATE RESOURCE UNIT u2 MAX_CPU 1, MEMORY_SIZE '10G', LOG_DISK_SIZE '12G'")
        sql(rs, "CREATE RESOURCE POOL p2 UNIT 'u2', UNIT_NUM 1, ZONE_LIST ('z1')")
        p2_unit = rows(rs, "SELECT * FROM __all_unit ORDER BY unit_id DESC")[0]
        assert f"{p2_unit['svr_ip']}:{p2_unit['svr_port']}" == D
        # D is being deleted (its 10G unit fits on A or E), the balancer has not run yet
        rs.server_admin.delete_servers([D], None)
        before = state(rs)
        # Deleting A too passes DELETE's pre-check (A's 4G unit fits on E's 12G), but the
        # balancer would put A's unit (the lower id) on E first: D's 10G unit has no room.
        got = explain(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER '{A}'")
        assert state(rs) == before
        [unit] = [r for r in got if r["kind"] == UNIT]
        assert (unit["from_svr"], unit["to_svr"]) == (A, E)
        [blocker] = [r for r in got if r["kind"] == BLOCKER]
        assert (blocker["unit_id"], blocker["from_svr"], blocker["to_svr"]) == (
            p2_unit["unit_id"],
            D,
            None,
        )
        assert blocker["reason"].startswith("no room: ") and "memory" in blocker["reason"]
    finally:
        rs.shutdown()


def test_a_log_stream_without_a_leader_is_a_blocker(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    gone = z1_member(rs, tid)
    # Every member reports a leader that is none of them: the LS has no leader now. DELETE
    # refuses that (OB_OP_NOT_ALLOW); the computation behind EXPLAIN names it as a blocker.
    report_all(rs, tid, leader={1001: "127.0.0.1:9"})
    blockers = [r for r in rs.delete_dry_run.explain([gone]) if r.kind == BLOCKER]
    assert [(b.tenant_id, b.ls_id) for b in blockers] == [(tid, 1001)]
    assert "has no leader" in blockers[0].reason


def _refusal(rs: RootService, text: str) -> tuple[str, str]:
    with pytest.raises(ObError) as e:
        sql(rs, text)
    return e.value.name, e.value.message


@pytest.mark.parametrize(
    ("servers", "name"),
    [
        ("'127.0.0.1:3999'", "OB_SERVER_NOT_IN_WHITE_LIST"),
        (f"'{A}' ZONE 'z2'", "OB_SERVER_ZONE_NOT_MATCH"),
        (f"'{A}', '{A}'", "OB_INVALID_ARGUMENT"),
        ("'not-an-address'", "OB_INVALID_ARGUMENT"),
        (f"'{A}'", "OB_OP_NOT_ALLOW"),  # the LS has no leader
        # z2 has no other server for the unit, but the LS without a leader is checked
        # first (its way out is RECOVER LS)
        (f"'{B}'", "OB_OP_NOT_ALLOW"),
    ],
)
def test_refusals_are_delete_servers_own(rs: RootService, servers: str, name: str) -> None:
    make_tenant(rs, ls_count=1)  # no reports: no LS has a leader
    before = state(rs)
    explained = _refusal(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER {servers}")
    assert state(rs) == before
    assert explained[0] == name
    assert explained == _refusal(rs, f"ALTER SYSTEM DELETE SERVER {servers}")


def test_already_deleting_is_refused_as_delete_server_refuses_it(rs: RootService) -> None:
    rs.server_admin.delete_servers([D], None)
    explained = _refusal(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER '{D}'")
    assert explained[0] == "OB_SERVER_ALREADY_DELETED"
    assert explained == _refusal(rs, f"ALTER SYSTEM DELETE SERVER '{D}'")


def test_no_tenant_nothing_moves(rs: RootService) -> None:
    assert explain(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER '{A}', '{C}'") == []


def test_only_who_may_delete_may_ask(rs: RootService) -> None:
    sql(rs, "CREATE USER reader IDENTIFIED BY 'pw'")
    sql(rs, "GRANT SELECT ON *.* TO reader")
    sql(rs, "CREATE USER operator IDENTIFIED BY 'pw'")
    sql(rs, "GRANT ALTER SYSTEM ON *.* TO operator")
    text = f"EXPLAIN ALTER SYSTEM DELETE SERVER '{A}'"
    refused = execute_sql(rs, text, Principal("reader", "127.0.0.1:40001"))
    assert refused.error.name == "ER_SPECIFIC_ACCESS_DENIED_ERROR"
    answered = execute_sql(rs, text, Principal("operator", "127.0.0.1:40002"))
    assert not answered.error.code and answered.is_result_set


class _BrokenPlanner(PandasPlanner):
    """The pandas planner whose unit plan fails as a dead JVM would (the real
    ``PlannerError`` the RS's ``SwitchablePlanner`` raises after counting the failure)."""

    def unit_plan(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise PlannerError("balancer", "java gateway process exited")


def test_a_failed_plan_answers_with_its_cause_and_changes_nothing(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    gone = z1_member(rs, tid)
    rs.delete_dry_run.planner = _BrokenPlanner(rs.settings.effective_db_url())
    before = state(rs)
    name, message = _refusal(rs, f"EXPLAIN ALTER SYSTEM DELETE SERVER '{gone}'")
    assert name == "OB_ERR_SYS"
    assert "java gateway process exited" in message
    assert state(rs) == before
