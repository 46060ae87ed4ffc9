"""The ``ls_reconciler`` task (docs/design/servers.md, docs/design/statements.md and docs/design/migration.md; rootservice.tenants.reconciler),
with in-memory agents and no RootService."""

from __future__ import annotations

from obcommon.proto import obrpc_pb2
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenant_parts import A, B, C, D, Layer, heartbeat, make_tenant


def test_a_round_does_nothing_while_not_in_service(layer: Layer) -> None:
    make_tenant(layer, ls_count=1)
    layer.agents.replicas.clear()
    layer.reports.clear()
    layer.term.close_service()
    assert layer.reconciler.run_once() == 0
    assert layer.agents.replicas == {}
    assert layer.reconciler.name == "ls_reconciler"


def test_missing_replicas_are_created_and_a_leader_elected(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    layer.agents.replicas.clear()  # the agents lost everything
    for s in (A, B, C, D):
        heartbeat(layer, s)
    assert layer.reports.views()[key].leader is None
    assert layer.reconciler.run_once() > 0
    assert layer.reports.views()[key].leader in (A, D)
    assert layer.reconciler.run_once() == 0  # settled


def test_replicas_of_a_dropped_ls_are_dropped_on_alive_servers(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    stray = (tid, 4242)
    spec = layer.applier.spec(layer.layout.topology().plans[(tid, 1001)], B, B, 1)
    spec.ls_id = 4242
    layer.applier.apply(B, [spec])
    assert stray in layer.agents.replicas[B]
    assert layer.reconciler.reconcile(only={stray}) == 1
    assert stray not in layer.agents.replicas[B]


def test_a_migration_completes_with_a_member_change(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    plan = layer.layout.topology().plans[key]
    old = next(m for m in plan.members if m in (A, D))
    new = D if old == A else A
    view = layer.reports.views()[key]
    # The unit moves from old to new: new builds a copy; then the layout names new.
    layer.applier.apply(new, [layer.applier.copy_spec(plan, view, new, B)])
    with layer.store.txn() as conn:
        ip, port = new.rsplit(":", 1)
        conn.exec_driver_sql(
            f"UPDATE __all_unit SET svr_ip = '{ip}', svr_port = {port} "
            f"WHERE unit_id = {plan.members[old][1]}"
        )
    layer.version.changed()
    layer.reconciler.run_once()  # the leader moves off the leaving replica first
    layer.reconciler.run_once()  # then the member list changes and old's replica goes
    members = sorted(layer.agents.replicas[B][key].member_list)
    assert members == sorted([new, B, C])
    assert key not in layer.agents.replicas[old]
    changes = [e for e in layer.events.events if e.event == "change_member_list"]
    assert dict(changes[-1].values)["removed"] == old


def test_a_dead_planned_member_gets_no_replica(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    layer.agents.replicas.clear()
    layer.reports.clear()
    layer.servers.get(C).hb_status = HeartbeatStatus.LEASE_EXPIRED
    layer.reconciler.run_once()
    assert C not in layer.agents.replicas
    assert (tid, 1001) in layer.agents.replicas[B]


def test_a_stored_report_with_a_huge_term_does_not_break_the_rounds(layer: Layer) -> None:
    """One replica reported LEADER at term 2^63-1 (a report kept from before the
    lease bounds refused it) made every round fail (term + 1 overflows the int64 of the
    protocol) and showed two leaders. It is now ignored for leadership: rounds succeed, the
    real leader stays the only one, and SWITCH LEADER works."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    real = layer.reports.views()[key].leader
    assert real is not None
    forger = next(s for s in layer.reports.views()[key].replicas if s != real)
    forged = layer.agents.replicas[forger][key].__class__()
    forged.CopyFrom(layer.agents.replicas[forger][key])
    forged.role, forged.term, forged.leader = obrpc_pb2.LEADER, 2**63 - 1, forger
    layer.servers.with_server(forger, lambda s: layer.reports.report(s, [forged]))
    for _ in range(3):
        layer.reconciler.run_once()
    view = layer.reports.views()[key]
    assert view.leader == real and view.term < 2**53
    layer.leaders.switch_leader(key, forger, "test")
    heartbeat(layer)
    view = layer.reports.views()[key]
    assert view.leader == forger and view.term < 2**53


def test_a_tenant_created_during_a_round_keeps_its_replicas(layer: Layer) -> None:
    # The tenant is created, and its replicas reported, while a round runs (a loaded
    # machine): the round must not take the reported replicas for those of a log stream
    # gone. It reads the reports before the layout, so whatever it saw reported is in the
    # layout it reads next (before, the layout read first had no such log stream, and the
    # round dropped the new tenant's replicas on every server).
    layer.layout.topology()  # cached before the tenant exists
    views = layer.reports.views
    created: list[int] = []
    calls = [0]

    def create_then_report() -> dict[tuple[int, int], object]:
        calls[0] += 1
        if calls[0] == 1:  # the round's first read; the DDL's own reads come after
            created.append(make_tenant(layer, ls_count=1))
            heartbeat(layer)
        return views()

    object.__setattr__(layer.reports, "views", create_then_report)
    layer.reconciler.run_once()
    key = (created[0], 1001)
    assert all(key in layer.agents.replicas.get(s, {}) for s in (A, B, C)), layer.agents.replicas


def test_a_copy_added_joins_while_another_zones_unit_server_is_down(layer: Layer) -> None:
    """A log stream left with one member (RECOVER LS from the servers of z1 and z3): the copy
    added in z1 joins the member list although z3's unit still sits on a dead server; nobody
    leaves meanwhile."""
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    plan = layer.layout.topology().plans[key]
    x = next(m for m in plan.members if m in (A, D))
    term = layer.reports.views()[key].term + 1
    layer.applier.apply(B, [layer.applier.spec(plan, B, B, term, members=[B])])
    layer.applier.apply(x, drop=[key])
    layer.servers.get(C).hb_status = HeartbeatStatus.LEASE_EXPIRED
    heartbeat(layer, B, x)
    assert layer.reconciler.run_once() == 0  # nothing in z1 yet: nothing to add
    view = layer.reports.views()[key]
    assert view.leader == B and list(view.replicas[B].member_list) == [B]
    layer.applier.apply(x, [layer.applier.copy_spec(plan, view, x, B)])
    heartbeat(layer, B, x)
    layer.reconciler.run_once()
    assert sorted(layer.agents.replicas[B][key].member_list) == sorted([B, x])
    changes = [e for e in layer.events.events if e.event == "change_member_list"]
    assert dict(changes[-1].values)["added"] == x and dict(changes[-1].values)["removed"] == ""
