"""The ``replica_rebuilder`` task (rootservice.tenants.replica_rebuilder):
a member missing on a live server is rebuilt by copy from a healthy member; dead servers,
members to be (a unit's move), leaderless log streams and a closed office get nothing. In-memory
agents, fake clock, both databases."""

from __future__ import annotations

from obcommon.proto import obrpc_pb2
from rootservice.servers.status import HeartbeatStatus
from rootservice.tenants.replica_rebuilder import REASON_MISSING, RETRY_BASE_US
from tests.support.tenant_parts import Layer, heartbeat, make_tenant


def _lose_follower(layer: Layer) -> tuple[tuple[int, int], str, str]:
    """Make a tenant, drop one follower's replica of LS 1001 on its agent (the files vanished)
    and heartbeat; returns (key, that follower, the leader)."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    view = layer.reports.views()[key]
    assert view.leader is not None
    lost = next(s for s in sorted(view.replicas) if s != view.leader)
    del layer.agents.replicas[lost][key]
    heartbeat(layer, lost)
    assert lost not in layer.reports.views()[key].replicas
    # Seen missing now; rebuilt once two more of its reports lack it.
    assert layer.rebuilder.run_once() == 0
    heartbeat(layer, lost)
    heartbeat(layer, lost)
    return key, lost, view.leader


def test_a_member_missing_on_a_live_server_is_rebuilt_by_copy(layer: Layer) -> None:
    key, lost, leader = _lose_follower(layer)
    members = sorted(layer.agents.replicas[leader][key].member_list)
    assert lost in members
    layer.agents.calls.clear()
    assert layer.rebuilder.run_once() == 1
    [spec] = [s for server, req in layer.agents.calls if server == lost for s in req.upsert]
    assert spec.copy_from == leader and sorted(spec.member_list) == members
    assert key in layer.agents.replicas[lost]
    # The member list never changed: the lost member stayed a member throughout.
    assert sorted(layer.agents.replicas[leader][key].member_list) == members
    [ev] = [e for e in layer.events.events if e.event == "rebuild_replica"]
    values = dict(ev.values)
    assert ev.module == "disaster_recovery" and values["server"] == lost
    assert values["source"] == leader and values["reason"] == REASON_MISSING
    assert layer.rebuilder.metrics.get("replica_rebuilds_total") == 1
    assert layer.rebuilder.run_once() == 0  # rebuilt: nothing left to do
    assert layer.rebuilder.name == "replica_rebuilder"


def test_a_copy_is_not_sent_twice_before_the_report_can_show_it(layer: Layer) -> None:
    key, lost, _ = _lose_follower(layer)
    assert layer.rebuilder.run_once() == 1
    # The agent lost it again; one report without it may have left before the spec arrived.
    del layer.agents.replicas[lost][key]
    heartbeat(layer, lost)
    # However long that report took (a loaded machine): still not sent again.
    layer.clock.advance(10 * layer.settings.rpc_timeout)
    assert layer.rebuilder.run_once() == 0
    # The second report since the hand-out still lacks it: the copy is gone, send it again.
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 1


def test_a_refusing_server_is_retried_next_round(layer: Layer) -> None:
    key, lost, _ = _lose_follower(layer)
    layer.agents.down.add(lost)
    assert layer.rebuilder.run_once() == 0
    assert not [e for e in layer.events.events if e.event == "rebuild_replica"]
    layer.agents.down.discard(lost)
    assert layer.rebuilder.run_once() == 1
    assert key in layer.agents.replicas[lost]


def test_a_failed_copy_is_sent_again_from_another_member(layer: Layer) -> None:
    key, lost, leader = _lose_follower(layer)
    assert layer.rebuilder.run_once() == 1
    failed = obrpc_pb2.ReplicaInfo()
    failed.CopyFrom(layer.agents.replicas[lost][key])
    failed.in_service, failed.copy_from, failed.build_error = False, leader, "source vanished"
    layer.agents.replicas[lost][key] = failed
    heartbeat(layer, lost)
    layer.agents.calls.clear()
    assert layer.rebuilder.run_once() == 1
    [spec] = [s for server, req in layer.agents.calls if server == lost for s in req.upsert]
    assert spec.copy_from not in (leader, lost, "")
    reasons = [
        dict(e.values)["reason"] for e in layer.events.events if e.event == "rebuild_replica"
    ]
    assert reasons[-1].startswith(REASON_MISSING) and "retry" in reasons[-1]


def test_nothing_for_dead_servers_leaderless_ls_or_closed_office(layer: Layer) -> None:
    key, lost, leader = _lose_follower(layer)
    # A dead server's replicas wait for permanent offline (the balancer's rebuild).
    layer.servers.get(lost).hb_status = HeartbeatStatus.LEASE_EXPIRED
    assert layer.rebuilder.run_once() == 0
    layer.servers.get(lost).hb_status = HeartbeatStatus.ALIVE
    # Leaderless: the reconciler elects first (a copy catches up the leader's log).
    layer.servers.get(leader).hb_status = HeartbeatStatus.LEASE_EXPIRED
    assert layer.reports.views()[key].leader is None
    assert layer.rebuilder.run_once() == 0
    layer.servers.get(leader).hb_status = HeartbeatStatus.ALIVE
    layer.term.close_service()
    assert layer.rebuilder.run_once() == 0
    assert key not in layer.agents.replicas[lost]


def test_a_planned_member_not_yet_in_the_member_list_is_the_balancers(layer: Layer) -> None:
    """A unit moved to a new server: its replica is built by the balancer's copy and joins
    by member change; the rebuilder leaves it alone."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    plan = layer.layout.topology().plans[key]
    old = next(m for m in plan.members if m.endswith(("3001", "3004")))
    new = "127.0.0.1:3004" if old.endswith("3001") else "127.0.0.1:3001"
    with layer.store.txn() as conn:
        ip, port = new.rsplit(":", 1)
        conn.exec_driver_sql(
            f"UPDATE __all_unit SET svr_ip = '{ip}', svr_port = {port} "
            f"WHERE unit_id = {plan.members[old][1]}"
        )
    layer.version.changed()
    assert new in layer.layout.topology().plans[key].members
    assert layer.rebuilder.run_once() == 0
    assert key not in layer.agents.replicas.get(new, {})


def test_copies_that_keep_failing_are_retried_with_growing_waits(layer: Layer) -> None:
    """A destination whose disk is full fails every copy; the first retry is
    immediate, the next ones wait 1 s, 2 s, 4 s ... (not every round)."""
    key, lost, leader = _lose_follower(layer)
    assert layer.rebuilder.run_once() == 1

    def fail() -> None:
        failed = obrpc_pb2.ReplicaInfo()
        failed.CopyFrom(layer.agents.replicas[lost][key])
        failed.in_service, failed.build_error = False, "OB_SERVER_OUTOF_DISK_SPACE"
        failed.copy_from = failed.copy_from or leader
        layer.agents.replicas[lost][key] = failed
        heartbeat(layer, lost)

    fail()
    assert layer.rebuilder.run_once() == 1  # first retry: at once
    for wait_us in (RETRY_BASE_US, 2 * RETRY_BASE_US, 4 * RETRY_BASE_US):
        fail()
        layer.clock.advance(wait_us - 1)
        assert layer.rebuilder.run_once() == 0
        layer.clock.advance(1)
        assert layer.rebuilder.run_once() == 1


def test_a_member_not_yet_in_its_servers_report_waits_two_reports(layer: Layer) -> None:
    # A replica just created is missing from the report that was in flight: no copy then.
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    view = layer.reports.views()[key]
    lost = next(s for s in sorted(view.replicas) if s != view.leader)
    del layer.agents.replicas[lost][key]
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 0
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 0  # one more report lacks it: not yet
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 1  # the second: its files are gone


def test_a_member_reported_again_ends_its_wait(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    view = layer.reports.views()[key]
    lost = next(s for s in sorted(view.replicas) if s != view.leader)
    kept = layer.agents.replicas[lost].pop(key)
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 0
    layer.agents.replicas[lost][key] = kept  # it was only late: reported now
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 0
    del layer.agents.replicas[lost][key]
    heartbeat(layer, lost)
    heartbeat(layer, lost)
    # Its wait started again when it went missing again: one round to note it, then two.
    assert layer.rebuilder.run_once() == 0
    heartbeat(layer, lost)
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 1
