"""What the empty-server checker asks of the tenant layer (docs/design/migration.md;
rootservice.tenants.server_probes and rooms), with no RootService."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db import space_usage_repo
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from tests.support.tenant_parts import GIB, A, B, C, D, Layer, make_tenant


def test_units_replicas_and_leaders(layer: Layer) -> None:
    assert not layer.probes.has_units(B) and not layer.probes.has_replicas(B)
    assert layer.probes.all_ls_have_leader()  # no LS at all
    tid = make_tenant(layer, ls_count=1)
    z1 = next(m for m in layer.layout.topology().plans[(tid, 1001)].members if m in (A, D))
    spare = D if z1 == A else A
    assert layer.probes.has_units(B) and layer.probes.has_units(z1)
    assert not layer.probes.has_units(spare)
    assert layer.probes.has_replicas(C) and not layer.probes.has_replicas(spare)
    assert layer.probes.all_ls_have_leader()
    layer.agents.replicas.clear()
    layer.reports.clear()
    assert not layer.probes.all_ls_have_leader()
    # no leader lists C and __all_ls_meta_table is empty (never synced)
    assert not layer.probes.has_replicas(C)


def test_extra_deletes_removes_the_space_usage_of_the_server(layer: Layer) -> None:
    make_tenant(layer, ls_count=1)
    layer.meta_sync.run_once()
    with layer.store.txn() as conn:
        layer.probes.extra_deletes(conn, "127.0.0.1", 3002)
    with layer.store.read() as conn:
        usage = space_usage_repo.load_space_usage(conn)
        ports = {k[2] for k in usage}
        count = conn.execute(sa.text("SELECT COUNT(*) FROM __all_space_usage")).scalar()
    assert 3002 not in ports and count == 2
    # the sync knows it is gone: it writes B's row again (B still reports the replica)
    assert layer.meta_sync.run_once() == 1


def test_rooms_mark_the_servers_that_may_receive_units(layer: Layer) -> None:
    layer.servers.get(A).stop_time = 1
    layer.servers.get(B).hb_status = HeartbeatStatus.LEASE_EXPIRED
    layer.servers.get(C).admin_status = AdminStatus.DELETING
    with layer.store.read() as conn:
        rooms = {r.key: r for r in layer.rooms.rooms(conn)}
        excluded = {r.key: r for r in layer.rooms.rooms(conn, exclude_usable={D})}
    assert [k for k, r in rooms.items() if r.usable] == [D]
    assert not excluded[D].usable
    assert rooms[D].mem_total == 16 * GIB and rooms[D].cpu_total == 8.0
