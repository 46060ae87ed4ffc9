"""Creating and dropping a tenant's replicas (docs/design/statements.md;
rootservice.tenants.log_streams), with in-memory agents and no RootService."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from tests.support.tenant_parts import A, B, C, D, Layer, make_tenant


def test_create_then_drop_the_replicas_of_a_tenant(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=2)
    for s in (B, C):
        assert sorted(layer.agents.replicas[s]) == [(tid, 1001), (tid, 1002)]
    specs = [sp for _, req in layer.agents.calls for sp in req.upsert]
    assert {sp.term for sp in specs} == {1}
    assert {sp.leader for sp in specs} <= {A, D}  # primary zone z1
    layer.replicas.drop_tenant_replicas(tid)
    assert all(not table for table in layer.agents.replicas.values())


def test_create_times_out_naming_the_leaderless_log_streams(layer: Layer) -> None:
    layer.agents.down = {A, B, C, D}
    t0 = layer.clock.now_us()
    with pytest.raises(ObError) as e:
        make_tenant(layer, ls_count=2)
    assert e.value.name == "OB_TIMEOUT"
    assert "log stream(s) 1001, 1002 have no leader yet" in str(e.value)
    assert layer.clock.now_us() - t0 >= layer.settings.tenant_create_timeout
    # the tenant exists: the reconciler finishes the job once the agents answer
    layer.agents.down = set()
    layer.reconciler.run_once()
    assert all(v.leader is not None for v in layer.reports.views().values())
