"""The ``learner_sync`` task (rootservice.tenants.learner_sync): a copy
whose log catch-up is refused is announced again to the current leader, with in-memory
agents and no RootService."""

from __future__ import annotations

from rootservice.ha.term import RsState
from tests.support.tenant_parts import A, D, Layer, heartbeat, make_tenant


def _refused_copy(layer: Layer) -> tuple[tuple[int, int], str, str, str]:
    """An LS whose leader moved after a copy to a non-member was handed out; the copy,
    in its log phase, reports that the former leader refused it. Returns (key, former
    leader, new leader, destination)."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    plan = layer.layout.topology().plans[key]
    view = layer.reports.views()[key]
    old = view.leader
    assert old is not None
    new = next(m for m in sorted(plan.members) if m != old)
    dest = next(s for s in (A, D) if s not in plan.members)
    layer.applier.apply(dest, [layer.applier.copy_spec(plan, view, dest, old)])
    layer.leaders.switch_leader(key, new, "test")
    r = layer.agents.replicas[dest][key]
    r.in_service, r.copy_from = False, old
    r.leader, r.term = old, view.term  # it never heard of the switch
    r.catch_up_error = f"{old} PERMISSION_DENIED: not a learner"
    heartbeat(layer, dest)
    return key, old, new, dest


def test_a_refused_copy_is_announced_again_to_the_current_leader(layer: Layer) -> None:
    key, old, new, dest = _refused_copy(layer)
    # the leader forgot the learner (an agent restart keeps learners in memory only)
    layer.applier.announced.clear()
    layer.agents.calls.clear()
    assert layer.learner_sync.run_once() == 1
    told = {server: req.upsert[0] for server, req in layer.agents.calls}
    assert dest in told[new].learner_list and told[new].leader == new
    # the copy itself is told the current leader and term, with its source unchanged
    assert (told[dest].leader, told[dest].term, told[dest].copy_from) == (
        new,
        told[new].term,
        old,
    )
    assert layer.learner_sync.metrics.get("learner_reannounced_total") == 1


def test_a_copy_is_announced_again_at_most_once_per_rpc_timeout(layer: Layer) -> None:
    key, old, new, dest = _refused_copy(layer)

    def still_refused() -> None:
        # (the in-memory agent replaced its report when the spec came)
        r = layer.agents.replicas[dest][key]
        r.in_service, r.copy_from = False, old
        r.catch_up_error = f"{new} PERMISSION_DENIED"
        heartbeat(layer, dest)

    assert layer.learner_sync.run_once() == 1
    still_refused()
    assert layer.learner_sync.run_once() == 0
    layer.clock.advance(layer.settings.rpc_timeout - 1)
    assert layer.learner_sync.run_once() == 0
    layer.clock.advance(1)
    assert layer.learner_sync.run_once() == 1
    # served again: nothing to announce
    still_refused()
    layer.agents.replicas[dest][key].catch_up_error = ""
    heartbeat(layer, dest)
    layer.clock.advance(layer.settings.rpc_timeout)
    assert layer.learner_sync.run_once() == 0


def test_a_standby_announces_nothing(layer: Layer) -> None:
    _refused_copy(layer)
    layer.term.state = RsState.NOT_MASTER
    layer.agents.calls.clear()
    assert layer.learner_sync.run_once() == 0 and layer.agents.calls == []
