"""CopyReplan built from fakes and a real database: a copy stalled at its
destination is sent again from another member the first time and its unit re-planned to
another server of the zone the second time (at once when no other member has the LS);
SUSPECT, LAGGING and recently stalled servers are no candidates; with none the copy is resent
and the reason recorded; a drained destination's moving units go elsewhere. FakeClock; the
unit row, the placement (ServerRooms) and the events are real."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.copy_replan import AVOID_TIMEOUTS, CopyReplan
from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.config import RsSettings
from rootservice.db import unit_repo
from rootservice.db.tables import all_rootservice_event_history
from rootservice.db.unit_repo import ResourcePool, Unit, UnitConfig
from rootservice.metrics import Metrics
from rootservice.servers.lag_policy import LagState
from rootservice.servers.status import HeartbeatStatus, ResourceInfo, ServerStatus
from rootservice.servers.suspect_policy import SuspectState
from rootservice.tenants.rooms import ServerRooms
from tests.unit.rootservice.balancer.fakes import (
    FakeEvents,
    FakeLayout,
    FakeLs,
    FakeStore,
    FakeWaker,
    FakeWhitelist,
    info,
    plan,
    server,
)
from tests.unit.rootservice.balancer.test_copy_tasks import row

# A (z1) is being deleted and its unit 1 moves to D; E and F are spare in z1; B, C hold the
# other members in z2, z3.
A, B, C, D, E, F = (f"127.0.0.1:300{i}" for i in range(1, 7))
KEY = (1002, 1001)
S = 1_000_000
T = 5 * S  # agent_lag_timeout
GIB = 1 << 30


class Zones:
    def is_active(self, zone: str) -> bool:
        return True


def roomy(s: ServerStatus) -> ServerStatus:
    s.resource_info = ResourceInfo(cpu_total=8, mem_total=16 * GIB, log_disk_total=64 * GIB)
    return s


class World:
    def __init__(self, engine: sa.Engine, *, a_alive: bool = True, c_serves: bool = True) -> None:
        self.clock = FakeClock()
        self.clock.advance(100 * S)
        self.store = FakeStore(engine)
        self.ls = FakeLs()
        self.layout = FakeLayout()
        self.waker = FakeWaker()
        self.metrics = Metrics()
        a = server(A, deleting=True, hb=None if a_alive else HeartbeatStatus.PERMANENT_OFFLINE)
        self.servers = FakeWhitelist(
            *(roomy(s) for s in (a, server(B, "z2"), server(C, "z3"), server(D), server(E)))
        )
        settings = RsSettings(
            agent_lag_timeout="5s", migration_concurrency_per_server=2, rpc_timeout="200ms"
        )
        self.copies = CopyTasks(
            servers=self.servers,
            ls=self.ls,
            events=FakeEvents(),
            store=self.store,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
        )
        self.replan = CopyReplan(
            copies=self.copies,
            ls=self.ls,
            rooms=ServerRooms(self.servers, Zones()),  # type: ignore[arg-type]
            servers=self.servers,
            store=self.store,
            layout=self.layout,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            wake=self.waker,
        )
        now = self.clock.now_us()
        with self.store.txn() as conn:
            unit_repo.insert_unit_config(
                conn, UnitConfig(1, "u1", 1.0, 1.0, 2 * GIB, 4 * GIB, 0, 0, 0), now
            )
            unit_repo.insert_pool(conn, ResourcePool(1, "p1", 1, 1, ("z1", "z2", "z3"), 1002), now)
            unit_repo.insert_units(
                conn,
                [
                    Unit(1, 1, 1001, "z1", "127.0.0.1", 3004, "127.0.0.1", 3001),
                    Unit(2, 1, 1001, "z2", "127.0.0.1", 3002),
                    Unit(3, 1, 1001, "z3", "127.0.0.1", 3003),
                ],
                now,
            )
        self.ls.plans[KEY] = plan(KEY, {D: 1, B: 2, C: 3})
        for s in (A, B, C):
            served = s != C or c_serves
            self.ls.report_table[s] = {KEY: info(KEY, [A, B, C], leader=B, in_service=served)}
        self.ls.leaders[KEY] = B
        # The copy from B to D is handed out and builds there.
        assert self.copies.hand_out([row(KEY, B, D)]) == 1
        self.building(D, B)

    def add(self, s: ServerStatus) -> ServerStatus:
        self.servers.servers[s.key] = roomy(s)
        return s

    def building(self, dest: str, src: str) -> None:
        self.ls.report_table[dest] = {KEY: info(KEY, [A, B, C], in_service=False, copy_from=src)}

    def unit_server(self) -> str:
        with self.store.read() as conn:
            u = next(u for u in unit_repo.load_units(conn) if u.unit_id == 1)
        assert u.migrate_from == A  # still moving from the deleted server
        return u.server

    def events(self, name: str) -> list[Any]:
        t = all_rootservice_event_history
        with self.store.read() as conn:
            return list(conn.execute(sa.select(t).where(t.c.event == name)).mappings())

    def resend(self) -> None:
        """The balancer's next hand-out, after the layout it reads moved to the unit's
        server (the fake layer does not read the database)."""
        target = self.unit_server()
        self.ls.plans[KEY] = plan(KEY, {target: 1, B: 2, C: 3})


def test_the_second_stall_re_plans_the_unit_to_a_spare_server(engine: sa.Engine) -> None:
    w = World(engine)
    # First stall: sent again from another member (A, still alive), same destination.
    assert w.replan.stalled(KEY, D) is True
    assert w.copies.stalled() == {(KEY, D)} and w.waker.woken == ["balancer"]
    assert w.replan.run() == 0
    assert w.unit_server() == D
    assert w.copies.hand_out([row(KEY, B, D)]) == 1
    assert w.ls.applied[-1][1][0].copy_from == A
    w.building(D, A)
    # Second stall of the resent copy: the destination is the problem.
    assert w.replan.stalled(KEY, D) is True
    assert w.copies.stalled() == frozenset()
    version = w.layout.version
    assert w.replan.run() == 1
    assert w.unit_server() == E
    assert w.layout.version == version + 1
    [ev] = w.events("copy_replanned")
    assert (ev["value1"], ev["value2"], ev["value3"], ev["value4"], ev["value5"]) == (
        "1",
        D,
        E,
        A,
        "1002.1001",
    )
    assert "again after a resend from another member" in ev["value6"]
    # The copy to D is forgotten, its partial replica dropped; the next hand-out goes to E.
    assert (KEY, D) not in w.copies.tasks and w.ls.dropped == {D: [KEY]}
    assert w.metrics.get("copy_replans_total") == 1
    assert w.replan.run() == 0  # done once
    w.resend()
    assert w.copies.hand_out([row(KEY, A, E)]) == 1
    assert w.ls.applied[-1][0] == E


def test_a_copy_no_other_member_has_is_re_planned_at_its_first_stall(engine: sa.Engine) -> None:
    # A is offline for good, C's replica is not in service: B is the only source.
    w = World(engine, a_alive=False, c_serves=False)
    assert w.replan.stalled(KEY, D) is True
    assert w.copies.stalled() == frozenset()  # no resend: nowhere else to send it from
    assert w.replan.run() == 1
    assert w.unit_server() == E
    [ev] = w.events("copy_replanned")
    assert "and no other member has it" in ev["value6"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_stall_without_a_copy_in_flight_does_nothing(engine: sa.Engine) -> None:
    w = World(engine)
    assert w.replan.stalled(KEY, E) is False
    assert w.replan.run() == 0 and w.waker.woken == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_suspect_and_lagging_servers_are_no_candidates_until_they_clear(
    engine: sa.Engine,
) -> None:
    w = World(engine, a_alive=False, c_serves=False)
    mono = w.clock.monotonic_us()
    e = w.servers.servers[E]
    e.suspect = SuspectState(until_mono_us=mono + 10 * S)  # SUSPECT for 10 s more
    f = w.add(server(F))
    f.lag = LagState(since_mono=mono, reasons=("command",))  # LAGGING
    f.lagging_time = w.clock.now_us()
    assert w.replan.stalled(KEY, D) is True
    assert w.replan.run() == 0
    assert w.unit_server() == D
    # Nowhere else: the copy is resent as before and the reason is recorded once.
    assert w.copies.stalled() == {(KEY, D)}
    [failed] = w.events("copy_replan_failed")
    assert failed["value2"] == D and "zone 'z1'" in failed["value5"], failed
    assert not w.events("copy_replanned")
    # One microsecond before E's suspicion ends it is still excluded ...
    w.clock.advance(10 * S - 1)
    assert w.replan.stalled(KEY, D) is True
    assert w.replan.run() == 0 and w.unit_server() == D
    assert len(w.events("copy_replan_failed")) == 1  # same reason: not repeated
    # ... at its end it is a candidate; F, still LAGGING, is not.
    w.clock.advance(1)
    assert w.replan.stalled(KEY, D) is True
    assert w.replan.run() == 1
    assert w.unit_server() == E


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_stalled_destination_is_avoided_for_its_window(engine: sa.Engine) -> None:
    w = World(engine, a_alive=False, c_serves=False)
    assert w.replan.stalled(KEY, D) is True
    assert w.replan.run() == 1 and w.unit_server() == E
    start = w.clock.monotonic_us()
    # The copy to E stalls too, and E's only alternative in z1 is D, which stalled.
    w.resend()
    assert w.copies.hand_out([row(KEY, B, E)]) == 1
    w.building(E, B)
    w.clock.advance(AVOID_TIMEOUTS * T - 1)
    assert w.replan.stalled(KEY, E) is True
    assert w.replan.run() == 0 and w.unit_server() == E
    w.clock.advance(1)
    assert w.clock.monotonic_us() == start + AVOID_TIMEOUTS * T
    assert w.replan.stalled(KEY, E) is True
    assert w.replan.run() == 1 and w.unit_server() == D


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_drained_destination_has_its_moving_units_re_planned(engine: sa.Engine) -> None:
    w = World(engine)
    d = w.servers.servers[D]
    d.draining, d.stop_time = True, w.clock.now_us()
    assert w.copies.involving(D) == 1
    assert w.replan.leave(D) == [] and w.waker.woken == ["balancer"]
    assert w.replan.leave(D) == [] and w.waker.woken == ["balancer"]  # woken once
    assert w.replan.run() == 1
    assert w.unit_server() == E
    assert w.copies.involving(D) == 0 and w.ls.dropped == {D: [KEY]}
    [ev] = w.events("copy_replanned")
    assert ev["value6"] == f"its destination {D} is being drained"
    assert w.replan.run() == 0  # nothing moves to D any more


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_drain_waits_for_what_cannot_go_elsewhere_and_says_why(engine: sa.Engine) -> None:
    w = World(engine)
    d = w.servers.servers[D]
    d.draining, d.stop_time = True, w.clock.now_us()
    w.servers.servers[E].stop_time = w.clock.now_us()  # isolated: no destination
    w.replan.leave(D)
    assert w.replan.run() == 0
    assert w.copies.involving(D) == 1 and w.unit_server() == D
    [line] = w.replan.leave(D)
    assert line.startswith("unit 1 moving to it: zone 'z1'"), line
    # A unit whose log streams are all built on the drained server is not moved.
    w.servers.servers[E].stop_time = 0
    w.ls.report_table[D] = {KEY: info(KEY, [A, B, C], in_service=True)}
    assert w.replan.run() == 0 and w.unit_server() == D
    # The drain ended: forgotten.
    d.draining = False
    assert w.replan.run() == 0
    assert w.replan.leave(D) == []
