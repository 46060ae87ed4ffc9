"""__all_ls_meta_table, __all_space_usage and leader_cnt from replica reports, through a whole
RootService (SPEC.md sections 4 and 9; rootservice.tenants.reports and meta_sync).
"""

from __future__ import annotations

from rootservice.app import RootService
from tests.support.tenants import ZONE, B, lease, make_tenant, members_of, report_all, rows


def test_reports_fill_ls_meta_table_leader_cnt_and_space_usage(rs: RootService) -> None:
    tid = make_tenant(rs)
    report_all(rs, tid)
    views = rs.ls.views()
    leader = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    assert views[(tid, 1001)].leader == leader and views[(tid, 1002)].leader == leader
    assert rs.manager.get(leader).leader_cnt == 2
    assert rs.manager.get(B).leader_cnt == 0
    assert rs.ls_meta_sync.sync_meta() > 0
    assert rs.ls_meta_sync.sync_meta() == 0  # nothing changed: nothing written
    locs = rows(rs, "SELECT * FROM dba_ob_ls_locations ORDER BY ls_id, svr_port")
    locs = [{k.upper(): v for k, v in r.items()} for r in locs]
    assert len(locs) == 6
    assert {r["ROLE"] for r in locs if f"{r['SVR_IP']}:{r['SVR_PORT']}" == leader} == {"LEADER"}
    assert all(r["REPLICA_TYPE"] == "FULL" and r["PAXOS_REPLICA_NUMBER"] == 3 for r in locs)
    usage = rows(rs, "SELECT * FROM __all_space_usage")
    assert len(usage) == 3 and all(u["data_size"] == 2 << 20 for u in usage)
    # A replica dropped by its server disappears from the table at the next sync.
    rs.manager.receive_hb(lease(B, []))
    rs.ls_meta_sync.sync_meta()
    assert not [r for r in rows(rs, "SELECT * FROM __all_ls_meta_table") if r["svr_port"] == 3002]
