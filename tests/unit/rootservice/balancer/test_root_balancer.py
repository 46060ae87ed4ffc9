"""RootBalancer built from its parts and fakes on both databases (docs/design/migration.md): the gate,
the cheap idle checks that never start a plan, one full round, CANCEL DELETE and step-down.
No RootService."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.root_balancer import RootBalancer
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.config import RsSettings
from rootservice.db import job_repo, unit_repo
from rootservice.db.tables import all_rootservice_job
from rootservice.db.unit_repo import Unit
from rootservice.metrics import Metrics
from tests.unit.rootservice.balancer.fakes import (
    RS_ADDR,
    FakeEvents,
    FakeGate,
    FakeLayout,
    FakeLs,
    FakePlanner,
    FakeStore,
    FakeWaker,
    FakeWhitelist,
    info,
    plan,
    server,
)

A, B, C, D = (f"127.0.0.1:300{i}" for i in range(1, 5))
KEY = (1001, 1001)


class World:
    """A holds unit 1 and a replica of LS KEY with B and C (B leads); D is free."""

    def __init__(self, engine: sa.Engine, *, deleting: bool = True) -> None:
        self.clock = FakeClock()
        self.store = FakeStore(engine)
        self.ls = FakeLs()
        self.gate = FakeGate()
        self.planner = FakePlanner()
        events = FakeEvents()
        metrics = Metrics()
        settings = RsSettings()
        self.servers = FakeWhitelist(
            server(A, deleting=deleting), server(B, "z2"), server(C, "z3"), server(D)
        )
        self.units = UnitMoves(
            servers=self.servers,
            ls=self.ls,
            layout=FakeLayout(),
            store=self.store,
            clock=self.clock,
            metrics=metrics,
            wake=FakeWaker(),
        )
        self.copies = CopyTasks(
            servers=self.servers,
            ls=self.ls,
            events=events,
            store=self.store,
            clock=self.clock,
            settings=settings,
            metrics=metrics,
        )
        self.jobs = DeleteJobProgress(
            servers=self.servers,
            ls=self.ls,
            events=events,
            store=self.store,
            clock=self.clock,
            settings=settings,
            units=self.units,
            copies=self.copies,
        )
        self.balancer = RootBalancer(
            servers=self.servers,
            ls=self.ls,
            planner=self.planner,
            term=self.gate,
            units=self.units,
            copies=self.copies,
            jobs=self.jobs,
        )
        now = self.clock.now_us()
        with self.store.txn() as conn:
            unit_repo.insert_units(conn, [Unit(1, 1, 1001, "z1", "127.0.0.1", 3001)], now)
            if deleting:
                self.job_id = job_repo.create_job(
                    conn, "DELETE_SERVER", "127.0.0.1", 3001, now, RS_ADDR
                )

    def layout(self, unit_server: str) -> None:
        self.ls.plans[KEY] = plan(KEY, {unit_server: 1, B: 2, C: 3})
        for s in (A, B, C):
            self.ls.report_table.setdefault(s, {})[KEY] = info(KEY, [A, B, C], leader=B)
        self.ls.leaders[KEY] = B

    def unit(self) -> Unit:
        with self.store.read() as conn:
            return unit_repo.load_units(conn)[0]


def unit_move(src: str, dest: str) -> dict[str, Any]:
    sip, _, sport = src.rpartition(":")
    dip, _, dport = dest.rpartition(":")
    return {
        "unit_id": 1,
        "tenant_id": 1001,
        "zone": "z1",
        "from_svr_ip": sip,
        "from_svr_port": int(sport),
        "to_svr_ip": dip,
        "to_svr_port": int(dport),
        "reason": "server deleting",
    }


def copy(src: str, dest: str, old: str) -> dict[str, Any]:
    (si, _, sp), (di, _, dp), (oi, _, op) = (x.rpartition(":") for x in (src, dest, old))
    return {
        "tenant_id": KEY[0],
        "ls_id": KEY[1],
        "src_svr_ip": si,
        "src_svr_port": int(sp),
        "dest_svr_ip": di,
        "dest_svr_port": int(dp),
        "old_svr_ip": oi,
        "old_svr_port": int(op),
        "reason": "server deleting",
    }


def cancel(w: World) -> int:
    """CANCEL DELETE SERVER A's balancer part, as ServerAdmin drives it: units back in the
    transaction, memory once committed, then the drops. Returns the units moved back."""
    with w.store.txn() as conn:
        back = w.balancer.move_units_back(conn, A)
    w.balancer.drop_partial(w.balancer.cancelled(A, back))
    return len(back)


def test_nothing_runs_out_of_service(engine: sa.Engine) -> None:
    w = World(engine)
    w.gate.in_service = False
    assert w.balancer.run_once() == 0
    assert w.planner.calls == []


def test_an_idle_cluster_never_plans(engine: sa.Engine) -> None:
    w = World(engine, deleting=False)
    assert w.balancer.run_once() == 0  # no server to empty, no LS at all
    w.layout(A)
    assert w.balancer.run_once() == 0  # every planned member has its replica
    assert w.planner.calls == []


def test_a_round_moves_the_unit_hands_out_the_copy_and_updates_the_job(
    engine: sa.Engine,
) -> None:
    w = World(engine)
    w.layout(D)  # as the tenant layer re-reads it once the unit moved
    w.planner.units = [unit_move(A, D)]
    w.planner.replicas = [copy(B, D, A)]
    assert w.balancer.run_once() == 2  # one unit moved, one copy sent
    assert w.planner.calls == ["unit_plan", "replica_plan"]
    assert (w.unit().server, w.unit().migrate_from) == (D, A)
    assert [(dest, spec.copy_from) for dest, [spec] in w.ls.applied] == [(D, B)]
    t = all_rootservice_job
    with w.store.read() as conn:
        extra = conn.execute(sa.select(t.c.extra_info).where(t.c.job_id == w.job_id)).scalar_one()
    assert json.loads(extra)["units_total"] == 1


def test_a_moving_unit_keeps_the_replica_plan_going_without_a_unit_plan(
    engine: sa.Engine,
) -> None:
    w = World(engine, deleting=False)
    with w.store.txn() as conn:
        unit_repo.start_unit_move(conn, 1, ("127.0.0.1", 3001), ("127.0.0.1", 3004), 0)
    w.layout(D)
    w.planner.replicas = [copy(B, D, A)]
    assert w.balancer.run_once() == 1
    assert w.planner.calls == ["replica_plan"]


def test_cancel_delete_moves_the_unit_back_and_drops_the_copy(engine: sa.Engine) -> None:
    w = World(engine)
    w.layout(D)  # as the tenant layer re-reads it once the unit moved
    w.planner.units = [unit_move(A, D)]
    w.planner.replicas = [copy(B, D, A)]
    w.balancer.run_once()
    w.ls.report_table[D] = {KEY: info(KEY, [A, B, C], in_service=False, copy_from=B)}
    assert A in w.jobs.progress
    assert cancel(w) == 1
    assert (w.unit().server, w.unit().migrate_from) == (A, "")
    assert len(w.copies) == 0 and w.ls.dropped == {D: [KEY]}
    assert w.jobs.progress == {}
    assert cancel(w) == 0


def test_step_down_forgets_copies_progress_and_placement_failures(engine: sa.Engine) -> None:
    w = World(engine)
    w.layout(D)  # as the tenant layer re-reads it once the unit moved
    w.planner.units = [unit_move(A, D) | {"to_svr_ip": None, "reason": "no server"}]
    w.planner.replicas = [copy(B, D, A)]
    w.balancer.run_once()
    assert w.units.unplaced and len(w.copies) and w.jobs.progress
    w.balancer.clear()
    assert not w.units.unplaced and not len(w.copies) and not w.jobs.progress
