"""The balancer's view of the tenant layer delegates to the owners (rootservice.tenants
.balancer_view), with no RootService."""

from __future__ import annotations

from tests.support.tenant_parts import B, C, Layer, make_tenant


def test_the_view_delegates_to_the_owning_classes(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    view = layer.view
    key = (tid, 1001)
    assert view.topology() is layer.layout.topology()
    assert view.views()[key].leader == layer.reports.views()[key].leader
    assert view.reports() == layer.reports.reports()
    plan, v = view.topology().plans[key], view.views()[key]
    assert view.members(plan, v) == sorted(plan.members)
    assert view.copy_spec(plan, v, B, C).copy_from == C
    assert view.apply_many({}) == {}
    view.switch_leader(key, B, "test")
    assert view.views()[key].leader == B
    assert view.reconcile(only={key}) >= 0
    before = view.tenants.version
    view.tenants.version += 1  # what the balancer does after moving units
    assert layer.version.version == before + 1
    layer.meta_sync.run_once()
    view.forget_meta()
    view.clear()
    assert view.reports() == {}
    assert layer.meta_sync.run_once() == 0  # re-read: nothing new, nobody reports
