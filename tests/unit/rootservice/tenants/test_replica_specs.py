"""Replica specs and ApplyReplicas (docs/design/servers.md and docs/design/migration.md;
rootservice.tenants.replica_specs), with in-memory agents and no RootService."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2
from rootservice.tenants.replica_specs import AnnouncedCopies
from rootservice.tenants.reports import LsView
from rootservice.tenants.topology import LsPlan
from rootservice.tenants.vocabulary import LsKey
from tests.support.tenant_parts import A, B, C, D, Layer, make_tenant

KEY = (1002, 1001)
PLAN = LsPlan(KEY, {A: ("z1", 11), B: ("z2", 12), C: ("z3", 13)}, {"z1": 0}, "z1")


def test_apply_stamps_the_epoch_and_adopts_the_answer(layer: Layer) -> None:
    spec = layer.applier.spec(PLAN, A, A, 1)
    assert (spec.unit_id, list(spec.member_list), spec.replica_type) == (11, [A, B, C], "FULL")
    assert spec.paxos_replica_number == 3
    layer.applier.apply(A, [spec])
    server, req = layer.agents.calls[-1]
    assert server == A and req.rs_epoch == layer.store.epoch > 0
    assert layer.servers.get(A).leader_cnt == 1
    assert KEY in layer.reports.reports()[A]
    layer.applier.apply(A, drop=[KEY])
    assert layer.servers.get(A).leader_cnt == 0 and layer.reports.reports()[A] == {}


def test_the_agents_refusal_is_raised_after_adopting(layer: Layer) -> None:
    refused = obrpc_pb2.ApplyReplicasResponse()
    error_to_proto(ObError("OB_NOT_SUPPORTED", "x"), refused.error)
    layer.agents.apply_replicas = lambda server, request, timeout_us=None: refused  # type: ignore[method-assign]
    with pytest.raises(ObError) as e:
        layer.applier.apply(A, [layer.applier.spec(PLAN, A, A, 1)])
    assert e.value.name == "OB_NOT_SUPPORTED"


def test_apply_many_returns_the_failures(layer: Layer) -> None:
    layer.agents.down = {B}
    work = {s: [layer.applier.spec(PLAN, s, A, 1)] for s in (A, B, C)}
    failures = layer.applier.apply_many(work, {D: [KEY]})
    assert list(failures) == [B] and failures[B].name == "OB_SERVER_CONNECTION_ERROR"
    # D answered with an empty report: it never had replicas, so none is kept for it
    assert sorted(layer.reports.reports()) == [A, C]
    assert layer.applier.apply_many({}) == {}


def test_a_leaving_replica_keeps_its_reported_unit_and_copies_follow_the_leader(
    layer: Layer,
) -> None:
    # D is not planned (its unit moved): its spec keeps the unit id it reported.
    layer.applier.apply(D, [layer.applier.spec(PLAN, D, A, 1, members=[A, B, D])])
    layer.agents.replicas[D][KEY].unit_id = 77
    layer.applier.apply(D)
    assert layer.applier.spec(PLAN, D, A, 2).unit_id == 77
    view = LsView(KEY, leader=A, term=4)
    view.replicas[A] = layer.agents.replicas[D][KEY]
    copy = layer.applier.copy_spec(PLAN, view, C, B)
    assert (copy.copy_from, copy.leader, copy.term) == (B, A, 4)
    assert list(copy.member_list) == [A, B, D]  # the leader's list: C is not a member yet


def test_copies_are_announced_as_learners_and_specs_keep_them(layer: Layer) -> None:
    # The source and the leader serve a copy only to a learner they were told of.
    for s in (A, B, C):
        layer.applier.apply(s, [layer.applier.spec(PLAN, s, A, 3)])
    assert list(layer.applier.spec(PLAN, B, A, 3).learner_list) == []
    view = LsView(KEY, leader=A, term=3)
    for s in (A, B, C):
        view.replicas[s] = layer.agents.replicas[s][KEY]
    layer.agents.calls.clear()
    layer.applier.announce_copy(PLAN, view, D, B)
    # the source and the leader, each told once, nothing else changed (members, term)
    told = {server: req.upsert[0] for server, req in layer.agents.calls}
    assert sorted(told) == [A, B]
    for server, spec in told.items():
        assert list(spec.learner_list) == [D]
        assert (list(spec.member_list), spec.leader, spec.term) == ([A, B, C], A, 3), server
    # D now reports its replica being built: every later spec (a leader switch, a member
    # change) keeps it a learner until it is a member
    layer.applier.apply(D, [layer.applier.copy_spec(PLAN, view, D, B)])
    assert list(layer.applier.spec(PLAN, C, A, 4).learner_list) == [D]
    assert list(layer.applier.spec(PLAN, C, A, 4, members=[A, B, D]).learner_list) == []
    assert list(layer.applier.spec(PLAN, D, A, 4).learner_list) == []  # never itself
    # an unreachable source: the announcement fails and says so
    layer.agents.down = {B}
    with pytest.raises(ObError) as e:
        layer.applier.announce_copy(PLAN, view, D, B)
    assert e.value.name == "OB_SERVER_CONNECTION_ERROR"


def _ls_with_a_non_member(layer: Layer) -> tuple[LsKey, LsPlan, str, str, str]:
    """A tenant's LS, its leader, another member and a server that is no member (the z1
    server its unit is not on): the destination of a copy."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    plan = layer.layout.topology().plans[key]
    old = layer.reports.views()[key].leader
    assert old is not None
    other = next(m for m in sorted(plan.members) if m != old)
    dest = next(s for s in (A, D) if s not in plan.members)
    return key, plan, old, other, dest


def test_a_copy_announced_before_a_leader_switch_is_a_learner_of_the_new_leader(
    layer: Layer,
) -> None:
    # The copy was handed out 60 ms before its leader moved; its destination's
    # report did not show it yet, so the switch's specs left it out and the new leader
    # refused its log catch-up for ever.
    key, plan, old, new, dest = _ls_with_a_non_member(layer)
    layer.applier.announce_copy(plan, layer.reports.views()[key], dest, new)
    assert key not in layer.agents.replicas.get(dest, {})  # its ApplyReplicas in flight
    layer.agents.calls.clear()
    layer.leaders.switch_leader(key, new, "test")
    told = {server: spec for server, req in layer.agents.calls for spec in req.upsert}
    assert told[new].leader == new
    for server in plan.members:
        assert list(told[server].learner_list) == [dest], server
    # dropped on the destination: no longer a learner of anyone's next spec
    layer.applier.apply(dest, drop=[key])
    assert list(layer.applier.spec(plan, new, new, 9).learner_list) == []


def test_an_announcement_reads_the_leader_after_a_switch(layer: Layer) -> None:
    key, plan, old, new, dest = _ls_with_a_non_member(layer)
    planned = layer.reports.views()[key]  # the view the balancer planned with
    layer.leaders.switch_leader(key, new, "test")
    layer.agents.calls.clear()
    view = layer.applier.announce_copy(plan, planned, dest, old)
    assert (view.leader, view.term) == (new, planned.term + 1)
    # the source and the current leader are told, at the current term
    told = {server: req.upsert[0] for server, req in layer.agents.calls}
    assert sorted(told) == sorted({old, new})
    assert all(s.term == planned.term + 1 and s.leader == new for s in told.values())
    spec = layer.applier.copy_spec(plan, view, dest, old)
    assert (spec.leader, spec.term, spec.copy_from) == (new, planned.term + 1, old)


def test_announced_copies_are_forgotten_when_they_end() -> None:
    now = [0]
    a = AnnouncedCopies(lambda: now[0])
    a.add(KEY, C)
    a.add(KEY, D)
    a.add((1002, 1002), C)
    assert a.of(KEY) == {C, D} and len(a) == 3
    reported = {(KEY, C)}

    def prune() -> int:
        return a.prune(lambda k, d: (k, d) in reported, lambda k, d: k == (1002, 1002), 1000)

    # a member is forgotten at once; an unreported copy only once forget_after_us passed
    now[0] = 999
    assert prune() == 1 and a.of((1002, 1002)) == set() and a.of(KEY) == {C, D}
    now[0] = 1000
    assert prune() == 1 and a.of(KEY) == {C}  # D never reported its copy
    now[0] = 10**9
    assert prune() == 0 and a.of(KEY) == {C}  # C reports it: kept
    a.discard(KEY, C)
    assert len(a) == 0
    a.add(KEY, C)
    a.clear()
    assert a.of(KEY) == set()
