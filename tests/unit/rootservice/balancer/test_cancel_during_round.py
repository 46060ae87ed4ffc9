"""CANCEL DELETE SERVER while a balancer round is computing its plan, on both
databases with a FakeClock and the RS as RootService wires it: the statement answers while the
round is still blocked in its planner (it never waits for a round), and the plan the round
computed before the cancel moves nothing once it is released (stale rows skipped and
counted).

The planner is the pandas one (the Spark jobs' computation) wrapped by :class:`GatedPlanner`,
which computes the real plan and then waits, inside the planner call, until the test lets it
return: the stand-in for a Spark job that takes 20-60 s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rootservice.app import RootService
from rootservice.balancer.planner import Row, server_rows
from rootservice.balancer.planners import PandasPlanner
from tests.support.harness import events, make_rs
from tests.support.tenants import ZONE, A, B, C, D, lease, make_tenant, members_of, replica, rows

# Generous bounds for the waits between threads (never reached unless something deadlocks).
WAIT_S = 60


class GatedPlanner:
    """A :class:`rootservice.balancer.planner.Planner`: the pandas plans, except that the call
    named ``gate`` ("unit_plan" or "replica_plan") computes its plan, records it in
    :attr:`planned`, sets :attr:`entered` and waits for :attr:`release` before returning it."""

    def __init__(self, inner: PandasPlanner, gate: str) -> None:
        self.inner = inner
        self.gate = gate
        self.entered = threading.Event()
        self.release = threading.Event()
        self.planned: list[Row] = []

    def _gated(self, name: str, rows: list[Row]) -> list[Row]:
        if name == self.gate:
            self.planned = rows
            self.entered.set()
            if not self.release.wait(WAIT_S):
                raise RuntimeError("the test never released the planner")
        return rows

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        return self._gated("unit_plan", self.inner.unit_plan(servers))

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        return self._gated("replica_plan", self.inner.replica_plan(servers))

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        return self.inner.lost_replicas(servers)


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(
        db_url,
        tmp_path,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
        migration_stall_time="30s",
    )
    r.lost_replica_checker.planner = PandasPlanner(db_url)
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    yield r
    r.shutdown()


def z1_unit(rs: RootService) -> tuple[str, str]:
    """(server, migrate_from) of the tenant's z1 unit, as ``'ip:port'`` (``''`` if none)."""
    u = rows(rs, "SELECT * FROM __all_unit WHERE zone = 'z1'")[0]
    src = f"{u['migrate_from_svr_ip']}:{u['migrate_from_svr_port']}"
    return f"{u['svr_ip']}:{u['svr_port']}", src if u["migrate_from_svr_ip"] else ""


def report_with_units(rs: RootService, tid: int) -> None:
    """Every member reports every LS of tenant ``tid`` led from z1, each replica with its
    own unit's id (which the replica plan joins on), and ``__all_ls_meta_table`` has them."""
    plans = rs.tenant_layer.balancer_view.topology(force=True).plans
    per_server: dict[str, list[Any]] = {}
    for key, p in plans.items():
        if key[0] != tid:
            continue
        members = sorted(p.members)
        lead = next(m for m in members if ZONE[m] == "z1")
        for m in members:
            r = replica(key, lead, members, me=m, end_ts=rs.clock.now_us())
            r.unit_id = p.members[m][1]
            per_server.setdefault(m, []).append(r)
    for server in (A, B, C, D):
        rs.heartbeats.receive_hb(lease(server, per_server.get(server, [])))
    rs.tenant_layer.meta_sync.sync_meta()


def deleting_z1_member(rs: RootService) -> str:
    """A tenant with one LS reported by its members, and DELETE SERVER of its z1 member."""
    tid = make_tenant(rs, ls_count=1)
    report_with_units(rs, tid)
    gone = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    rs.server_admin.delete_servers([gone], None)
    return gone


class Round:
    """One balancer round in a thread of its own, blocked in ``planner`` once started."""

    def __init__(self, rs: RootService, planner: GatedPlanner) -> None:
        self.planner = planner
        rs.migration.planner = planner
        self.result: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(rs,), daemon=True)

    def _run(self, rs: RootService) -> None:
        try:
            self.result.append(rs.migration.run_once())
        except Exception as e:  # reported by the test's assertion on the result
            self.result.append(e)

    def __enter__(self) -> Round:
        self.thread.start()
        assert self.planner.entered.wait(WAIT_S), "the round never reached its planner"
        return self

    def __exit__(self, *exc: object) -> None:
        self.planner.release.set()
        self.thread.join(WAIT_S)


def test_cancel_answers_while_the_unit_plan_runs_and_the_plan_moves_nothing(
    rs: RootService, db_url: str
) -> None:
    gone = deleting_z1_member(rs)
    planner = GatedPlanner(PandasPlanner(db_url), "unit_plan")
    with Round(rs, planner) as rnd:
        # the plan was computed while the server was DELETING: it moves the unit away
        assert [(r["from_svr_port"], bool(r["to_svr_ip"])) for r in planner.planned] == [
            (int(gone.rsplit(":", 1)[1]), True)
        ]
        rs.server_admin.cancel_delete_servers([gone], None)
        # the statement returned while the round is still inside its planner
        assert rnd.thread.is_alive() and not rnd.result
        assert rs.whitelist.get(gone).admin_status.value == "NORMAL"
        assert rows(rs, "SELECT job_status FROM __all_rootservice_job")[0]["job_status"] == (
            "CANCELED"
        )
    assert not rnd.thread.is_alive() and rnd.result == [0]
    assert z1_unit(rs) == (gone, "")
    rs.persist.run_once()
    assert events(rs, "migrate_unit") == []
    assert len(events(rs, "cancel_delete_server")) == 1
    assert rs.metrics.get("stale_plan_rows_total") == 1
    assert len(rs.copy_tasks) == 0 and gone not in rs.delete_jobs.progress


def test_cancel_answers_while_the_replica_plan_runs_and_no_copy_is_handed_out(
    rs: RootService, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gone = deleting_z1_member(rs)
    rs.unit_moves.apply_unit_plan(PandasPlanner(db_url).unit_plan(server_rows(rs.whitelist)))
    dest, src = z1_unit(rs)
    assert src == gone and dest != gone
    planner = GatedPlanner(PandasPlanner(db_url), "replica_plan")
    with caplog.at_level("INFO", logger="rootservice.balancer"), Round(rs, planner) as rnd:
        # the plan saw the unit on its destination: one copy ready to go there
        ready = [r for r in planner.planned if r["src_svr_ip"] and r["dest_svr_ip"]]
        assert [f"{r['dest_svr_ip']}:{r['dest_svr_port']}" for r in ready] == [dest]
        rs.server_admin.cancel_delete_servers([gone], None)
        assert rnd.thread.is_alive() and not rnd.result
        assert z1_unit(rs) == (gone, "")  # back as the statement returned
    assert not rnd.thread.is_alive() and rnd.result == [0]
    assert z1_unit(rs) == (gone, "")
    assert len(rs.copy_tasks) == 0
    assert rs.metrics.get("stale_plan_rows_total") == 1
    assert rs.metrics.get("replica_tasks_total") == 0
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "handing the copy" in m], messages
    assert [m for m in messages if "skipped stale plan rows" in m and "1 copy" in m], messages
    rs.persist.run_once()
    assert events(rs, "migrate_replica") == []
    assert len(events(rs, "cancel_migrate_unit")) == 1
