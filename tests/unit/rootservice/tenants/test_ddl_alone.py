"""TenantManager built from its collaborators, without a RootService (docs/design/statements.md;
rootservice.tenants.ddl): the gate, the layout version and the plain-value statements."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.tenants.ddl_requests import NewPool, NewTenant, NewUnitConfig
from tests.support.tenant_parts import Layer, make_tenant


def test_a_deposed_term_changes_nothing(layer: Layer) -> None:
    # The gate is statement dispatch's; what a deposed term still tries is fenced.
    tid = make_tenant(layer, ls_count=1)
    v0 = layer.version.version
    layer.term.request_step_down("test")
    for call in (
        lambda: layer.ddl.create_unit_config(
            NewUnitConfig("u9", (("max_cpu", 1), ("memory_size", "4G")))
        ),
        lambda: layer.ddl.drop_tenant("t1", force=True),
    ):
        with pytest.raises(ObError) as e:
            call()
        assert e.value.name == "OB_RS_NOT_MASTER"
    assert layer.version.version == v0 and tid


def test_committed_statements_bump_the_layout_version(layer: Layer) -> None:
    v0 = layer.version.version
    tid = make_tenant(layer, ls_count=1)
    assert layer.version.version == v0 + 3
    # refused or IF [NOT] EXISTS no-ops change nothing
    assert layer.ddl.create_pool(NewPool("p1", "u1", 1, None, if_not_exists=True)) == []
    assert not layer.ddl.drop_unit_config("nope", if_exists=True)
    assert layer.ddl.create_tenant(NewTenant("t1", ("p1",), if_not_exists=True)) == (0, 0)
    assert layer.version.version == v0 + 3
    assert layer.ddl.drop_tenant("t1", force=True) == tid
    assert layer.ddl.drop_pool("p1") and layer.ddl.drop_unit_config("u1")
    assert layer.version.version == v0 + 6
    assert layer.ddl.drop_tenant("t1", if_exists=True) == 0


def test_a_pool_without_zone_list_covers_every_zone(layer: Layer) -> None:
    layer.ddl.create_unit_config(NewUnitConfig("u1", (("max_cpu", 1), ("memory_size", "2G"))))
    units = layer.ddl.create_pool(NewPool("p1", "u1", 1, None))
    assert len(units) == 3
    with pytest.raises(ObError) as e:
        layer.ddl.create_pool(NewPool("p2", "u1", 1, ()))
    assert e.value.name == "OB_INVALID_ARGUMENT"


def test_a_reader_at_the_bump_sees_the_committed_layout(layer: Layer) -> None:
    # A reader that takes the layout the moment the version moves (a reconciler round at
    # that instant) caches what it read under the new version for good: the bump must
    # come after the commit. Inside the transaction, this reader cached the layout without
    # the tenant's log streams (a loaded suite run: the reconciler then dropped the new log
    # stream's replicas as those of a log stream gone).
    seen: list[set[tuple[int, int]]] = []
    bump = layer.version.changed

    def bump_then_read() -> None:
        bump()
        seen.append(set(layer.layout.topology().plans))

    object.__setattr__(layer.version, "changed", bump_then_read)
    tid = make_tenant(layer, ls_count=2)
    assert seen[-1] == {(tid, 1001), (tid, 1002)}
    assert set(layer.layout.topology().plans) == {(tid, 1001), (tid, 1002)}
