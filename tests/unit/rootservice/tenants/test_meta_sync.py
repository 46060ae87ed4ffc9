"""__all_ls_meta_table, __all_space_usage and leader_cnt from replica reports, through a whole
RootService (docs/design/servers.md and docs/design/migration.md; rootservice.tenants.reports and meta_sync).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.db import ls_repo
from rootservice.http.status import ClusterStatus
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenant_parts import Layer, heartbeat
from tests.support.tenant_parts import make_tenant as make_tenant_alone
from tests.support.tenants import (
    ZONE,
    B,
    lease,
    make_tenant,
    members_of,
    replica,
    report_all,
    rows,
)


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
    assert all(r["REPLICA_TYPE"] == "FULL" for r in locs)
    # OceanBase shows the replica number and the member list on the leader's row only.
    assert {(r["ROLE"], r["PAXOS_REPLICA_NUMBER"]) for r in locs} == {
        ("LEADER", 3),
        ("FOLLOWER", None),
    }
    assert {r["LEARNER_LIST"] for r in locs if r["ROLE"] == "FOLLOWER"} == {""}
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


def _locations(layer: Layer) -> list[dict[str, Any]]:
    with layer.store.read() as conn:
        return [
            {k.upper(): v for k, v in r.items()}
            for r in conn.execute(
                sa.text("SELECT * FROM dba_ob_ls_locations ORDER BY ls_id, svr_port")
            ).mappings()
        ]


def test_a_paused_then_deposed_leader_is_stale_and_never_shown_beside_the_new_one(
    layer: Layer,
) -> None:
    """OceanBase's ``ObLSInfo::find_leader``: the leader is the LEADER row at the highest
    proposal id. A leader whose lease expired keeps its row, written FOLLOWER and stale with
    its last heartbeat; back alive and still reporting LEADER of the old term after another
    server leads at a higher term, it stays a stale FOLLOWER until it reports the new term."""
    tid = make_tenant_alone(layer, ls_count=1)
    layer.meta_sync.run_once()
    old = layer.reports.views()[(tid, 1001)].leader
    assert old is not None
    s_old = layer.servers.get(old)
    s_old.last_hb_time = 1_700_000_000_000_000
    s_old.hb_status = HeartbeatStatus.LEASE_EXPIRED
    layer.meta_sync.run_once()
    [row] = [r for r in _meta_rows(layer) if f"{r['svr_ip']}:{r['svr_port']}" == old]
    assert (row["role"], row["stale"], row["last_report_time"]) == (
        ls_repo.ROLE_FOLLOWER,
        1,
        1_700_000_000_000_000,
    )
    assert [r["ROLE"] for r in _locations(layer)].count("LEADER") == 0
    # Another member leads at term + 1; the old leader is back, its report unchanged.
    report = layer.agents.replicas[old][(tid, 1001)]
    new = next(m for m in report.member_list if m != old)
    nr = layer.agents.replicas[new][(tid, 1001)]
    nr.role, nr.term, nr.leader = obrpc_pb2.LEADER, report.term + 1, new
    s_old.hb_status = HeartbeatStatus.ALIVE
    s_old.last_hb_time += 5_000_000
    heartbeat(layer)
    assert layer.reports.views()[(tid, 1001)].leader == new
    layer.meta_sync.run_once()
    by_server = {f"{r['svr_ip']}:{r['svr_port']}": r for r in _meta_rows(layer)}
    assert by_server[new]["role"] == ls_repo.ROLE_LEADER and by_server[new]["stale"] == 0
    assert (by_server[old]["role"], by_server[old]["stale"]) == (ls_repo.ROLE_FOLLOWER, 1)
    # Still stale: the time is when it went stale, not rewritten at every sync.
    assert by_server[old]["last_report_time"] == 1_700_000_000_000_000
    s_old.last_hb_time += 1_000_000
    assert layer.meta_sync.run_once() == 0
    locs = _locations(layer)
    assert [f"{r['SVR_IP']}:{r['SVR_PORT']}" for r in locs if r["ROLE"] == "LEADER"] == [new]
    assert {f"{r['SVR_IP']}:{r['SVR_PORT']}": r["STALE"] for r in locs}[old] == "YES"
    # It hears of the new term: a fresh follower.
    report.role, report.term, report.leader = obrpc_pb2.FOLLOWER, nr.term, new
    heartbeat(layer, old)
    layer.meta_sync.run_once()
    row = {f"{r['svr_ip']}:{r['svr_port']}": r for r in _meta_rows(layer)}[old]
    assert (row["role"], row["stale"], row["last_report_time"]) == (ls_repo.ROLE_FOLLOWER, 0, 0)
    assert {r["STALE"] for r in _locations(layer)} == {"NO"}


def test_the_view_shows_only_the_leader_row_at_the_highest_proposal_id(layer: Layer) -> None:
    """Two LEADER rows of one LS written by anyone (an older RS, a hand edit): the views
    show LEADER only for the one at the highest proposal id, and never a stale row."""

    def row(role: int, term: int, stale: int = 0) -> dict[str, Any]:
        return {
            "sql_port": 1,
            "role": role,
            "member_list": "",
            "proposal_id": term,
            "replica_status": "NORMAL",
            "unit_id": 1,
            "zone": "z1",
            "paxos_replica_number": 3,
            "data_size": 0,
            "required_size": 0,
            "stale": stale,
            "last_report_time": 0,
        }

    with layer.store.txn() as conn:
        ls_repo.upsert_ls_meta(
            conn,
            {
                (9, 1001, "127.0.0.1", 1): row(ls_repo.ROLE_LEADER, 4),
                (9, 1001, "127.0.0.1", 2): row(ls_repo.ROLE_LEADER, 5),
                (9, 1001, "127.0.0.1", 3): row(ls_repo.ROLE_FOLLOWER, 5),
                (9, 1002, "127.0.0.1", 1): row(ls_repo.ROLE_LEADER, 7, stale=1),
                (9, 1002, "127.0.0.1", 2): row(ls_repo.ROLE_FOLLOWER, 6),
            },
            {},
            1,
        )
    for view in ("dba_ob_ls_locations", "cdb_ob_ls_locations"):
        with layer.store.read() as conn:
            got = conn.execute(
                sa.text(
                    f"SELECT ls_id, svr_port, role, member_list FROM {view} "
                    "WHERE tenant_id = 9 ORDER BY ls_id, svr_port"
                )
            ).all()
        assert [tuple(r[:3]) for r in got] == [
            (1001, 1, "FOLLOWER"),
            (1001, 2, "LEADER"),
            (1001, 3, "FOLLOWER"),
            (1002, 1, "FOLLOWER"),
            (1002, 2, "FOLLOWER"),
        ], view
        assert [r[3] for r in got] == [None, "", None, None, None]


def test_the_status_api_counts_only_current_leaders(rs: RootService) -> None:
    """``/api/v1/servers``' ``leader_count`` and ``/api/v1/ls_locations``: a leader that
    still reports LEADER at an older term than another member's leads nothing, its rows are
    stale with its last heartbeat; the new leader leads."""
    tid = make_tenant(rs)
    report_all(rs, tid)
    status = ClusterStatus(rs)
    old = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    counts = {s["server"]: s["leader_count"] for s in status.servers()}
    assert counts[old] == 2 and sum(counts.values()) == 2
    # Another member reports LEADER of ls 1001 at term 2; the old one still reports term 1.
    members = members_of(rs, tid, 1001)
    new = next(m for m in members if m != old)
    rs.heartbeats.receive_hb(
        lease(
            new,
            [
                replica(
                    (tid, ls),
                    new if ls == 1001 else old,
                    members,
                    me=new,
                    term=2 if ls == 1001 else 1,
                )
                for ls in (1001, 1002)
            ],
        )
    )
    counts = {s["server"]: s["leader_count"] for s in status.servers()}
    assert (counts[old], counts[new], sum(counts.values())) == (1, 1, 2)
    locs = {(r["ls_id"], r["server"]): r for r in status.ls_locations()}
    assert locs[(1001, new)]["role"] == "LEADER" and not locs[(1001, new)]["stale"]
    assert locs[(1001, old)]["role"] == "FOLLOWER" and locs[(1001, old)]["stale"]
    assert locs[(1001, old)]["last_report_time_us"] == rs.whitelist.get(old).last_hb_time
    assert locs[(1002, old)]["role"] == "LEADER" and not locs[(1002, old)]["stale"]
    assert [r["ls_id"] for r in locs.values() if r["role"] == "LEADER"].count(1001) == 1
