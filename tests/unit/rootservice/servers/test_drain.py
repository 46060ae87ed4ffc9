"""DRAIN SERVER and the disruption budget on one in-process RS with
in-memory agents and a fake clock, both databases: the leaders leave, progress rows at least
every second, the deadline exactly (both sides), the blockers named per LS, a second drain
refused by the budget, START SERVER cancelling a drain, and a new leader resuming a drain
from its row. The pure rules (budget, ranges) on their own first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obcommon.addresses import parse_server
from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.db import drain_repo, unit_repo
from rootservice.http.status import server_doc
from rootservice.servers.disruption_budget import LsMembers, disruption, refusals
from rootservice.servers.drain import PROGRESS_INTERVAL_US
from rootservice.servers.lag_policy import LagState
from rootservice.servers.maintenance_window import drain_timeout, maintenance_duration
from rootservice.servers.status import HeartbeatStatus, ServerStatus
from rootservice.servers.suspect_policy import SuspectState
from tests.support.harness import events, server_row
from tests.support.tenant_parts import FakeAgents
from tests.support.tenants import (
    A,
    B,
    C,
    D,
    lease,
    make_tenant,
    make_tenant_rs,
    members_of,
    replica,
    sql,
)

S = 1_000_000
LS1, LS2 = (1002, 1001), (1002, 1002)


# --- the pure rules ---------------------------------------------------------------------------


def test_budget_refuses_below_a_majority_and_only_for_the_targets_streams() -> None:
    three = LsMembers(LS1, (A, B, C))
    five = LsMembers(LS2, (A, B, C, D, "127.0.0.1:3005"))
    other = LsMembers((1002, 1003), (B, C, D))
    assert refusals([three], {}, {A}, "draining") == []
    # One more unavailable member and a 3-member LS is below its majority (2).
    [line] = refusals([three, other], {C: "INACTIVE"}, {A}, "draining")
    assert line == (
        "LS 1001 (tenant 1002): 1 of 3 members would stay available, a majority needs 2 "
        f"({A} draining, {C} INACTIVE)"
    )
    # Five members: two down is allowed, three is not (both sides of the majority).
    assert refusals([five], {B: "SUSPECT"}, {A}, "stopped") == []
    assert len(refusals([five], {B: "SUSPECT", C: "stopped"}, {A}, "stopped")) == 1
    # An LS without a target is never judged (the budget refuses new disruptions only).
    assert refusals([other], {B: "INACTIVE", C: "INACTIVE"}, {A}, "draining") == []


def test_disruption_names_each_state_and_one_function_decides() -> None:
    s = ServerStatus(id=1, zone="z1", ip="127.0.0.1", port=3001, sql_port=0)
    assert disruption(None, 0, 0) == "not in the whitelist"
    assert disruption(s, 0, 0) == "INACTIVE"
    s.hb_status = HeartbeatStatus.ALIVE
    assert disruption(s, 0, 0) is None
    s.suspect = SuspectState(until_mono_us=10)
    assert disruption(s, 9, 0) == "SUSPECT" and disruption(s, 10, 0) is None
    s.lag = LagState(since_mono=5, reasons=("command",))  # LAGGING
    assert disruption(s, 10, 0) == "LAGGING"
    s.lag = LagState()
    assert disruption(s, 10, 0) is None
    s.stop_time = 1
    assert disruption(s, 10, 0) == "stopped"
    s.maintenance_end_time = 100
    assert disruption(s, 10, 99) == "in maintenance" and disruption(s, 10, 100) == "stopped"
    # The status API (and the dashboard's badges): the window while it lasts, the drain.
    assert server_doc(s, 99, 0)["maintenance_end_time_us"] == 100
    assert server_doc(s, 100, 0)["maintenance_end_time_us"] == 0
    assert not server_doc(s, 0, 0)["draining"]
    s.draining = True
    assert disruption(s, 10, 0) == "draining"
    assert server_doc(s, 0, 0)["draining"]


@pytest.mark.parametrize(
    ("text", "us"),
    [(None, 600 * S), ("1s", S), ("24h", 86_400 * S), ("999ms", None), ("25h", None)],
)
def test_drain_timeout_range(text: str | None, us: int | None) -> None:
    if us is None:
        with pytest.raises(ObError) as e:
            drain_timeout(text)
        assert e.value.name == "OB_INVALID_ARGUMENT"
    else:
        assert drain_timeout(text) == us


@pytest.mark.parametrize(
    ("text", "ok"), [("1m", True), ("59s", False), ("7d", True), ("169h", False), ("2", False)]
)
def test_maintenance_duration_range(text: str, ok: bool) -> None:
    if ok:
        assert maintenance_duration(text) > 0
    else:
        with pytest.raises(ObError) as e:
            maintenance_duration(text)
        assert e.value.name == "OB_INVALID_ARGUMENT"


# --- DRAIN on an RS ---------------------------------------------------------------------------


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def led(rs: RootService, tid: int, rebuilding: str = "") -> tuple[str, FakeAgents]:
    """Both LS of a new tenant led from its z1 member (members z1, B, C), every member
    reporting through in-memory agents; ``rebuilding``'s replica of LS 1001 is not in
    service. Returns the z1 member and the agents."""
    assert tid == 1002
    z1 = next(m for m in members_of(rs, tid, 1001) if m in (A, D))
    members = sorted([z1, B, C])
    agents = FakeAgents()
    rs.tenant_layer.applier.agents = agents
    for s in members:
        reps = [
            replica(k, z1, members, me=s, in_service=(s, k) != (rebuilding, LS1))
            for k in (LS1, LS2)
        ]
        agents.replicas[s] = {(r.tenant_id, r.ls_id): r for r in reps}
        rs.heartbeats.receive_hb(lease(s, reps))
    return z1, agents


def drain_row(rs: RootService, server: str) -> drain_repo.DrainRow:
    with rs.store.read() as conn:
        [row] = [r for r in drain_repo.load_drains(conn) if f"{r.ip}:{r.port}" == server]
    return row


def leaders_on(rs: RootService, server: str) -> int:
    return sum(1 for v in rs.tenant_layer.reports.views().values() if v.leader == server)


def test_drain_moves_every_leader_and_finishes(rs: RootService) -> None:
    z1, _ = led(rs, make_tenant(rs))
    assert leaders_on(rs, z1) == 2
    row = rs.drains.drain(z1, "10s")
    assert row.status == "FINISHED" and (row.leaders_left, row.copies_left) == (0, 0)
    assert leaders_on(rs, z1) == 0
    # Isolated: stop_time set, not draining any more, events of both ends.
    assert server_row(rs, z1)["stop_time"] != 0 and not rs.whitelist.get(z1).draining
    assert [e["value1"] for e in events(rs, "drain_server")] == [z1]
    assert [e["value1"] for e in events(rs, "drain_server_finished")] == [z1]


def test_drain_times_out_at_its_deadline_naming_each_blocking_ls(rs: RootService) -> None:
    # C's replica of LS 1001 is being rebuilt: with z1 leaving, only B is a healthy member
    # of it, short of the 2 a new leader needs. LS 1002's leader moves to B or C.
    z1, _ = led(rs, make_tenant(rs), rebuilding=C)
    start = rs.clock.now_us()
    deadline = start + 5 * S
    seen: list[drain_repo.DrainRow] = []
    steps: list[int] = []

    def sleep(_: float) -> None:
        # Progress at least every PROGRESS_INTERVAL_US; then both sides of the deadline.
        seen.append(drain_row(rs, z1))
        steps.append(rs.clock.now_us())
        if len(steps) < 4:
            rs.clock.advance(PROGRESS_INTERVAL_US)
        elif rs.clock.now_us() < deadline - 1:
            rs.clock.advance(deadline - 1 - rs.clock.now_us())
        else:
            rs.clock.advance(1)

    rs.drains.sleep = sleep
    with pytest.raises(ObError) as e:
        rs.drains.drain(z1, "5s")
    assert e.value.name == "OB_WAIT_LEADER_SWITCH_TIMEOUT"
    msg = str(e.value)
    assert "LS 1001 (tenant 1002): 1 other member(s) can lead, a new leader needs 2 of 3" in msg
    assert f"{C} replica not in service" in msg and "LS 1002" not in msg
    # One microsecond before the deadline it still ran a round; at the deadline it ended.
    assert steps[-1] == deadline - 1
    # Rounds PROGRESS_INTERVAL_US apart with nothing changing: a progress row every round.
    assert [r.progress_time for r in seen[:4]] == steps[:4]
    assert all(r.status == "DRAINING" and r.leaders_left in (-1, 1) for r in seen)
    row = drain_row(rs, z1)
    assert row.status == "TIMEOUT" and row.leaders_left == 1 and "LS 1001" in row.blockers
    assert leaders_on(rs, z1) == 1


def test_a_failed_switch_leaves_the_leader_on_the_drained_server(rs: RootService) -> None:
    z1, agents = led(rs, make_tenant(rs))
    # B and C heartbeat but take no replica command: each switch fails and z1, stopped, is
    # reinstated rather than leaving the log streams without a leader.
    agents.down = {B, C}
    with pytest.raises(ObError) as e:
        rs.drains.drain(z1, "2s")
    assert e.value.name == "OB_WAIT_LEADER_SWITCH_TIMEOUT"
    assert "LS 1001 (tenant 1002): the leader switch failed" in str(e.value)
    assert leaders_on(rs, z1) == 2


def test_a_second_drain_that_would_break_a_majority_is_refused(rs: RootService) -> None:
    z1, _ = led(rs, make_tenant(rs))
    rs.drains.drain(z1, "10s")
    # z1 drained (isolated): draining B too would leave C alone of (z1, B, C).
    with pytest.raises(ObError) as e:
        rs.drains.drain(B, "10s")
    assert e.value.name == "OB_OP_NOT_ALLOW"
    assert "LS 1001 (tenant 1002): 1 of 3 members would stay available" in str(e.value)
    assert server_row(rs, B)["stop_time"] == 0
    # Nor may ISOLATE (STOP and maintenance are refused earlier here: z1 is stopped).
    with pytest.raises(ObError) as e2:
        rs.server_admin.stop_servers([B], None, "ISOLATE")
    assert e2.value.name == "OB_OP_NOT_ALLOW" and "disruption budget" in str(e2.value)


def test_start_server_cancels_a_running_drain(rs: RootService) -> None:
    z1, _ = led(rs, make_tenant(rs), rebuilding=C)
    rs.drains.sleep = lambda _: rs.server_admin.start_servers([z1], None)
    with pytest.raises(ObError) as e:
        rs.drains.drain(z1, "10s")
    assert e.value.name == "OB_CANCELED"
    assert drain_row(rs, z1).status == "CANCELED" and not rs.whitelist.get(z1).draining


def test_a_new_leader_resumes_a_drain_from_its_row(rs: RootService) -> None:
    z1, _ = led(rs, make_tenant(rs))
    now = rs.clock.now_us()
    ip, port = z1.rsplit(":", 1)
    # What the old leader left: the server isolated, the row DRAINING, its deadline ahead.
    rs.server_admin.stop_servers([z1], None, "ISOLATE")
    with rs.store.txn() as conn:
        drain_repo.start_drain(conn, ip, int(port), now, now + 60 * S, "127.0.0.1:1")
    assert rs.drains.run_once() == 1  # background is inline here
    row: Any = drain_row(rs, z1)
    assert row.status == "FINISHED" and leaders_on(rs, z1) == 0
    assert rs.drains.run_once() == 0


def test_a_unit_moving_to_the_drained_server_is_re_planned_or_named(rs: RootService) -> None:
    """Through the RS's wiring: the drain's rounds have the balancer's round
    re-plan the unit moving to the drained server; z1 has no third server, so it cannot go
    elsewhere, and the drain's blockers say so with the placement's reason."""
    # The pandas plans: the default Spark planner would start a JVM in a unit test (48 s).
    sql(rs, "ALTER SYSTEM SET balancer_planner = 'local'")
    z1, _ = led(rs, make_tenant(rs))
    other = D if z1 == A else A
    with rs.store.read() as conn:
        [unit] = [u for u in unit_repo.load_units(conn) if u.server == z1]
    with rs.store.txn() as conn:
        moved = parse_server(z1), parse_server(other)
        assert unit_repo.start_unit_move(conn, unit.unit_id, *moved, rs.clock.now_us())
    rs.tenant_layer.version.changed()

    def sleep(_: float) -> None:
        rs.migration.run_once()
        rs.clock.advance(S // 2)

    rs.drains.sleep = sleep
    with pytest.raises(ObError) as e:
        rs.drains.drain(other, "2s")
    assert e.value.name == "OB_TIMEOUT", e.value
    assert (
        f"unit {unit.unit_id} moving to it: zone 'z1' has no other active server without a "
        "unit of the same tenant" in str(e.value)
    )
    [failed] = events(rs, "copy_replan_failed")
    assert failed["value2"] == other and "is being drained" in failed["value4"]
