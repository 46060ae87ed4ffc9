"""__all_ls_meta_table, __all_space_usage and leader_cnt from replica reports, through a whole
RootService (docs/design/servers.md and docs/design/migration.md; rootservice.tenants.reports and meta_sync).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.db import ls_repo
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenant_parts import Layer
from tests.support.tenant_parts import make_tenant as make_tenant_alone
from tests.support.tenants import ZONE, B, lease, make_tenant, members_of, report_all, rows


def test_reports_fill_ls_meta_table_leader_cnt_and_space_usage(rs: RootService) -> None:
    tid = make_tenant(rs)
    report_all(rs, tid)
    views = rs.tenant_layer.balancer_view.views()
    leader = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    assert views[(tid, 1001)].leader == leader and views[(tid, 1002)].leader == leader
    assert rs.whitelist.get(leader).leader_cnt == 2
    assert rs.whitelist.get(B).leader_cnt == 0
    assert rs.tenant_layer.meta_sync.sync_meta() > 0
    assert rs.tenant_layer.meta_sync.sync_meta() == 0  # nothing changed: nothing written
    locs = rows(rs, "SELECT * FROM dba_ob_ls_locations ORDER BY ls_id, svr_port")
    locs = [{k.upper(): v for k, v in r.items()} for r in locs]
    assert len(locs) == 6
    assert {r["ROLE"] for r in locs if f"{r['SVR_IP']}:{r['SVR_PORT']}" == leader} == {"LEADER"}
    assert all(r["REPLICA_TYPE"] == "FULL" and r["PAXOS_REPLICA_NUMBER"] == 3 for r in locs)
    usage = rows(rs, "SELECT * FROM __all_space_usage")
    assert len(usage) == 3 and all(u["data_size"] == 2 << 20 for u in usage)
    # A replica dropped by its server disappears from the table at the next sync.
    rs.heartbeats.receive_hb(lease(B, []))
    rs.tenant_layer.meta_sync.sync_meta()
    assert not [r for r in rows(rs, "SELECT * FROM __all_ls_meta_table") if r["svr_port"] == 3002]


# --- LsMetaSync alone (no RootService) ------------------------------------------------------


def _meta_rows(layer: Layer) -> list[dict[str, Any]]:
    with layer.store.read() as conn:
        return [
            dict(r)
            for r in conn.execute(
                sa.text("SELECT * FROM __all_ls_meta_table ORDER BY ls_id, svr_port")
            ).mappings()
        ]


def test_meta_sync_writes_only_changes_and_keeps_dead_servers_as_followers(layer: Layer) -> None:
    tid = make_tenant_alone(layer, ls_count=1)
    assert layer.meta_sync.name == "ls_meta_sync"
    assert layer.meta_sync.run_once() == 3 + 3  # three replica rows, three space rows
    assert layer.meta_sync.run_once() == 0
    leader = layer.reports.views()[(tid, 1001)].leader
    assert leader is not None
    layer.servers.get(leader).hb_status = HeartbeatStatus.LEASE_EXPIRED
    assert layer.meta_sync.run_once() == 1
    roles = {f"{r['svr_ip']}:{r['svr_port']}": r["role"] for r in _meta_rows(layer)}
    assert roles[leader] == ls_repo.ROLE_FOLLOWER and len(roles) == 3
    # forgotten caches are re-read: nothing to write
    layer.meta_sync.forget_meta()
    assert layer.meta_sync.run_once() == 0
    layer.term.close_service()
    assert layer.meta_sync.run_once() == 0


def test_meta_sync_deletes_the_rows_of_a_dropped_tenant(layer: Layer) -> None:
    tid = make_tenant_alone(layer, ls_count=1)
    layer.meta_sync.run_once()
    layer.ddl.drop_tenant("t1")
    assert layer.meta_sync.run_once() >= 3
    assert _meta_rows(layer) == []
    assert tid > 0


def test_meta_sync_tells_of_the_rows_it_deleted_once_committed(layer: Layer) -> None:
    """The last step a unit moving off a server waits for is its row leaving
    ``__all_ls_meta_table``; the sync says so (``rows_deleted``) after its commit, and only
    when it deleted something."""
    tid = make_tenant_alone(layer, ls_count=1)
    layer.meta_sync.run_once()
    assert layer.moves.heard == []
    dropping = next(s for s in layer.reports.views()[(tid, 1001)].replicas if s != B)
    layer.servers.with_server(dropping, lambda s: layer.reports.report(s, []))
    layer.moves.heard.clear()  # what the report itself told (tests of reports.py)
    assert layer.meta_sync.run_once() >= 1
    assert layer.moves.heard == [("rows_deleted", frozenset({dropping}))]
    assert dropping not in {f"{r['svr_ip']}:{r['svr_port']}" for r in _meta_rows(layer)}
    assert layer.meta_sync.run_once() == 0 and len(layer.moves.heard) == 1
