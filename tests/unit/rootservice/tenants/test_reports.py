"""Replica reports, views, effective members and log sync (docs/design/servers.md and docs/design/migration.md;
rootservice.tenants.reports), built without a RootService."""

from __future__ import annotations

from obcommon.proto import obrpc_pb2
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from rootservice.tenants.reports import LsView, effective_members, in_sync
from rootservice.tenants.topology import LsPlan
from tests.support.tenant_parts import A, B, C, D, Layer
from tests.support.tenants import replica

KEY = (1002, 1001)


def _report(layer: Layer, server: str, replicas: list[obrpc_pb2.ReplicaInfo]) -> None:
    layer.servers.with_server(server, lambda s: layer.reports.report(s, replicas))


def test_report_sets_leader_cnt_and_keeps_an_empty_report(layer: Layer) -> None:
    members = [A, B, C]
    _report(layer, A, [replica(KEY, A, members, me=A), replica((1002, 1002), A, members, me=A)])
    _report(layer, B, [replica(KEY, A, members, me=B)])
    assert layer.servers.get(A).leader_cnt == 2 and layer.servers.get(B).leader_cnt == 0
    _report(layer, A, [])
    assert layer.servers.get(A).leader_cnt == 0
    assert layer.reports.reports()[A] == {}  # it reports, and has dropped them
    _report(layer, D, [])
    assert D not in layer.reports.reports()  # never had any: nothing kept
    layer.reports.forget_server(B)
    assert B not in layer.reports.reports()
    layer.reports.clear()
    assert layer.reports.reports() == {}


def test_reports_tell_of_a_copy_built_and_of_a_deleting_server_dropping_a_replica(
    layer: Layer,
) -> None:
    """The steps of a move the heartbeats bring are heard at once (the tasks of the
    next steps are woken by :class:`rootservice.balancer.emptying_wake.EmptyingWake`)."""
    members, other = [A, B, C], (1002, 1002)
    # D builds a copy: nothing is heard while it builds, once when it is in service
    _report(layer, D, [replica(KEY, A, members, me=D, in_service=False)])
    _report(layer, D, [replica(KEY, A, members, me=D, in_service=False)])
    assert layer.moves.heard == []
    _report(layer, D, [replica(KEY, A, members, me=D)])
    assert layer.moves.heard == [("copy_built", D)]
    _report(layer, D, [replica(KEY, A, members, me=D)])
    assert len(layer.moves.heard) == 1  # in service already
    # a server that is not being deleted drops a replica: not a step of an emptying
    _report(layer, B, [replica(KEY, A, members, me=B), replica(other, A, members, me=B)])
    _report(layer, B, [replica(KEY, A, members, me=B)])
    assert len(layer.moves.heard) == 1
    # a DELETING server drops one replica, then its last one
    layer.servers.get(A).admin_status = AdminStatus.DELETING
    _report(layer, A, [replica(KEY, A, members, me=A), replica(other, A, members, me=A)])
    _report(layer, A, [replica(KEY, A, members, me=A)])
    _report(layer, A, [replica(KEY, A, members, me=A)])
    _report(layer, A, [])
    _report(layer, A, [])
    assert layer.moves.heard[1:] == [("replica_dropped", A), ("replica_dropped", A)]


def test_views_take_the_alive_leader_at_the_highest_term(layer: Layer) -> None:
    members = [A, B, C]
    _report(layer, A, [replica(KEY, A, members, me=A, term=3)])
    _report(layer, B, [replica(KEY, A, members, me=B, term=3)])
    assert layer.reports.views()[KEY].leader == A
    # B leads at a newer term: A is deposed
    _report(layer, B, [replica(KEY, B, members, me=B, term=4)])
    view = layer.reports.views()[KEY]
    assert (view.leader, view.term) == (B, 4)
    # a leader that is not alive leads nothing; the term stays known
    layer.servers.get(B).hb_status = HeartbeatStatus.LEASE_EXPIRED
    view = layer.reports.views()[KEY]
    assert (view.leader, view.term) == (None, 4)


def test_effective_members_and_log_sync() -> None:
    plan = LsPlan(KEY, {A: ("z1", 1), B: ("z2", 2), D: ("z1", 3)}, {"z1": 0}, "z1")
    view = LsView(KEY)
    assert effective_members(plan, view) == sorted([A, B, D])  # nothing reported yet
    view.replicas = {
        A: replica(KEY, A, [A, B, C], me=A, end_ts=10_000_000),
        B: replica(KEY, A, [A, B, C], me=B, end_ts=9_000_000),
    }
    assert effective_members(plan, view) == [A, B, C]  # no leader: the highest term's list
    view.leader = A
    assert in_sync(view, A, 0)
    assert in_sync(view, B, 1_000_000) and not in_sync(view, B, 999_999)
    assert not in_sync(view, C, 10**12)  # no replica reported


def _heartbeat(layer: Layer, server: str, version: int, reps: list[obrpc_pb2.ReplicaInfo]) -> None:
    layer.servers.with_server(server, lambda s: layer.reports.report(s, reps, version))


def _answer(
    layer: Layer, server: str, version: int, reps: list[obrpc_pb2.ReplicaInfo], run: int = 0
) -> None:
    layer.servers.with_server(server, lambda s: layer.reports.adopt(s, reps, version, run))


def test_a_lease_request_built_before_an_apply_answer_does_not_undo_it(layer: Layer) -> None:
    """The agent numbers its reports; a lease request it built before it applied a leader
    move (report 7) arrives after the answer (report 8) that the RS took: the older state
    (A still leading at term 3) must not come back, or the LS shows no leader and the RS
    raises the term again."""
    members = [A, B, C]
    old = [replica(KEY, A, members, me=A, term=3)]
    moved = [replica(KEY, B, members, me=A, term=4)]
    layer.servers.get(A).start_service_time = 1_700_000_000_000_000
    _heartbeat(layer, A, 6, old)
    _answer(layer, A, 8, moved)
    _heartbeat(layer, A, 7, old)
    assert layer.reports.reports()[A][KEY].leader == B
    assert layer.servers.get(A).leader_cnt == 0
    assert layer.reports.metrics.get("replica_reports_stale_total") == 1
    # The next lease request, built after the answer, is taken.
    _heartbeat(layer, A, 9, old)
    assert layer.reports.reports()[A][KEY].leader == A
    # The mark is gone: an older number (a new run of the agent counting again, say)
    # is taken as well.
    _heartbeat(layer, A, 2, moved)
    assert layer.reports.reports()[A][KEY].leader == B


def test_answers_that_crossed_keep_the_newer_report(layer: Layer) -> None:
    members = [A, B, C]
    layer.servers.get(A).start_service_time = 1_700_000_000_000_000
    _answer(layer, A, 5, [replica(KEY, B, members, me=A, term=4)])
    _answer(layer, A, 4, [replica(KEY, A, members, me=A, term=3)])
    assert layer.reports.reports()[A][KEY].leader == B
    assert layer.reports.metrics.get("replica_reports_stale_total") == 1


def test_an_agent_restart_or_an_unnumbered_report_is_always_taken(layer: Layer) -> None:
    members = [A, B, C]
    s = layer.servers.get(A)
    s.start_service_time = 1_700_000_000_000_000
    _answer(layer, A, 50, [replica(KEY, B, members, me=A, term=4)])
    # Restarted: its numbers start again, and the lease path records the new start first.
    s.start_service_time += 60_000_000
    _heartbeat(layer, A, 1, [replica(KEY, A, members, me=A, term=5)])
    assert layer.reports.reports()[A][KEY].term == 5
    # An agent of release 0.1.0 numbers nothing (0): taken, and it sets no mark.
    _answer(layer, A, 0, [replica(KEY, A, members, me=A, term=6)])
    _heartbeat(layer, A, 0, [replica(KEY, A, members, me=A, term=7)])
    assert layer.reports.reports()[A][KEY].term == 7
    # A step-down forgets the marks with the reports.
    _answer(layer, A, 10, [replica(KEY, A, members, me=A, term=8)])
    layer.reports.clear()
    _heartbeat(layer, A, 3, [replica(KEY, A, members, me=A, term=9)])
    assert layer.reports.reports()[A][KEY].term == 9
    assert layer.reports.metrics.get("replica_reports_stale_total") == 0


def test_an_answer_from_a_restarted_agent_before_its_first_lease_is_taken(layer: Layer) -> None:
    """The agent restarted (its numbers start again) and answers an ApplyReplicas before its
    new run's first lease request reached the RS, which still holds the old run's start: the
    answer names its own run, so it is taken, and it is what later reports of that run are
    judged by."""
    members = [A, B, C]
    s = layer.servers.get(A)
    s.start_service_time = old_run = 1_700_000_000_000_000
    new_run = old_run + 60_000_000
    _answer(layer, A, 50, [replica(KEY, B, members, me=A, term=4)], old_run)
    _answer(layer, A, 2, [replica(KEY, A, members, me=A, term=5)], new_run)
    assert layer.reports.reports()[A][KEY].term == 5
    assert layer.reports.metrics.get("replica_reports_stale_total") == 0
    # The new run's first lease request, built before that answer (number 1), comes after.
    s.start_service_time = new_run
    _heartbeat(layer, A, 1, [replica(KEY, B, members, me=A, term=4)])
    assert layer.reports.reports()[A][KEY].term == 5
    assert layer.reports.metrics.get("replica_reports_stale_total") == 1
    # Without a run in the answer (an agent before 0.2.0 sends 0) the lease path's is used.
    _answer(layer, A, 1, [replica(KEY, A, members, me=A, term=6)])
    assert layer.reports.reports()[A][KEY].term == 5
    assert layer.reports.metrics.get("replica_reports_stale_total") == 2
