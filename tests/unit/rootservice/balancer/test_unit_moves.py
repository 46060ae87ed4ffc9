"""UnitMoves built from fakes on both databases (docs/design/migration.md): recording a unit plan,
finishing a unit once its source holds no replica of its log streams, moving units back on
CANCEL DELETE. No RootService."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.db import unit_repo
from rootservice.db.tables import all_rootservice_event_history
from rootservice.db.unit_repo import Unit
from rootservice.metrics import Metrics
from tests.unit.rootservice.balancer.fakes import (
    FakeLayout,
    FakeLs,
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
    def __init__(self, engine: sa.Engine) -> None:
        self.clock = FakeClock()
        self.store = FakeStore(engine)
        self.ls = FakeLs()
        self.layout = FakeLayout()
        self.waker = FakeWaker()
        self.metrics = Metrics()
        self.servers = FakeWhitelist(server(A, deleting=True), server(B, "z2"), server(D))
        self.units = UnitMoves(
            servers=self.servers,
            ls=self.ls,
            layout=self.layout,
            store=self.store,
            clock=self.clock,
            metrics=self.metrics,
            wake=self.waker,
        )
        with self.store.txn() as conn:
            unit_repo.insert_units(
                conn,
                [
                    Unit(1, 1, 1001, "z1", "127.0.0.1", 3001),
                    Unit(2, 1, 1001, "z2", "127.0.0.1", 3002),
                ],
                self.clock.now_us(),
            )

    def unit(self, unit_id: int) -> Unit:
        with self.store.read() as conn:
            return next(u for u in unit_repo.load_units(conn) if u.unit_id == unit_id)

    def events(self, name: str) -> list[Any]:
        t = all_rootservice_event_history
        with self.store.read() as conn:
            return list(conn.execute(sa.select(t).where(t.c.event == name)).mappings())


def move_row(
    unit_id: int, src: str, dest: str | None, reason: str = "server deleting"
) -> dict[str, Any]:
    sip, _, sport = src.rpartition(":")
    dip, _, dport = (dest or "").rpartition(":")
    return {
        "unit_id": unit_id,
        "tenant_id": 1001,
        "zone": "z1",
        "from_svr_ip": sip,
        "from_svr_port": int(sport),
        "to_svr_ip": dip or None,
        "to_svr_port": int(dport) if dport else None,
        "reason": reason,
    }


def test_a_unit_plan_is_recorded_once_and_units_without_room_are_remembered(
    engine: sa.Engine,
) -> None:
    w = World(engine)
    rows = [move_row(1, A, D), move_row(2, B, None, "memory: needs 4G, free 1G")]
    assert w.units.apply_unit_plan(rows) == 1
    u = w.unit(1)
    assert (u.server, u.migrate_from) == (D, A)
    assert w.units.unplaced == {2: "memory: needs 4G, free 1G"}
    assert w.layout.version == 1 and w.metrics.get("unit_moves_total") == 1
    [ev] = w.events("migrate_unit")
    assert (ev["value1"], ev["value2"], ev["value3"]) == ("1", A, D)
    assert [u.unit_id for u in w.units.moving()] == [1]
    # the same plan again: the unit is no longer where the plan saw it
    assert w.units.apply_unit_plan(rows) == 0
    assert w.layout.version == 1
    w.units.clear()
    assert w.units.unplaced == {}


def test_a_unit_finishes_once_its_source_reports_no_replica(engine: sa.Engine) -> None:
    w = World(engine)
    w.units.apply_unit_plan([move_row(1, A, D)])
    w.ls.plans[KEY] = plan(KEY, {D: 1, B: 2})
    w.ls.report_table = {A: {KEY: info(KEY, [A, B])}, B: {KEY: info(KEY, [A, B])}}
    assert w.units.finish_units() == 0
    assert w.waker.woken == []
    # A dropped its replica: the move is done and the empty-server checker is woken
    w.ls.report_table = {B: {KEY: info(KEY, [B, D])}, D: {KEY: info(KEY, [B, D])}}
    assert w.units.finish_units() == 1
    assert w.unit(1).migrate_from == ""
    assert w.waker.woken == ["empty_server_checker"]
    assert len(w.events("finish_migrate_unit")) == 1
    assert w.units.finish_units() == 0  # nothing moving any more


def test_a_dead_source_report_does_not_keep_a_unit_moving(engine: sa.Engine) -> None:
    w = World(engine)
    w.units.apply_unit_plan([move_row(1, A, D)])
    w.servers.servers[A] = server(A, alive=False, deleting=True)
    w.ls.plans[KEY] = plan(KEY, {D: 1, B: 2})
    w.ls.report_table = {A: {KEY: info(KEY, [A, B])}}
    assert w.units.finish_units() == 1


def test_cancel_moves_the_units_moving_off_a_server_back(engine: sa.Engine) -> None:
    w = World(engine)
    w.units.apply_unit_plan([move_row(1, A, D)])
    with w.store.txn() as conn:
        back = w.units.move_back(conn, A)
    assert [(u.unit_id, u.server) for u in back] == [(1, D)]
    u = w.unit(1)
    assert (u.server, u.migrate_from) == (A, "")
    assert w.layout.version == 1  # the caller's to raise once its transaction committed
    assert len(w.events("cancel_migrate_unit")) == 1
    with w.store.txn() as conn:
        assert w.units.move_back(conn, A) == []


def test_events_go_with_this_rs_address(engine: sa.Engine) -> None:
    w = World(engine)
    w.units.apply_unit_plan([move_row(1, A, D)])
    with w.store.read() as conn:
        t = all_rootservice_event_history
        row = conn.execute(sa.select(t.c.rs_svr_ip, t.c.rs_svr_port)).one()
    assert tuple(row) == w.store.rs_addr
