"""FORCE DELETE SERVER and RECOVER LS ... FROM LOST SERVERS through the
statement path of a RootService with a FakeClock, on SQLite and PostgreSQL: the three-zone
tenant of tests/support/tenants.py whose replicas are applied by
:class:`tests.support.tenant_parts.FakeAgents` (in memory).

Covers: the refusals (a server that heartbeats, an unknown one, an LS that would lose its
majority, an unnamed dead member) with nothing changed; DELETE SERVER refused naming the LS
without a leader; DRY RUN's rows with nothing changed; RECOVER applied (survivor leading at a
new term with the members left, job and events per stage, the lost servers buried and refused
at lease time by address and by server id, scheduling resumed); a report that changes between
the plan and its check; FORCE DELETE where a majority is left (leader elected, member list
shrunk); the resumption of a run a previous leader left before and after its commit point.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.tenants.vocabulary import LsKey
from tests.support.harness import events, jobs, server_row
from tests.support.tenant_parts import FakeAgents
from tests.support.tenants import (
    ZONE,
    B,
    C,
    D,
    err,
    lease,
    make_tenant,
    make_tenant_rs,
    members_of,
    replica,
    sql,
)

S = 1_000_000


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def feed(rs: RootService, agents: FakeAgents, server: str, reps: list[Any]) -> None:
    """``server`` heartbeats with ``reps``, which its fake agent holds from now on."""
    agents.replicas[server] = {(r.tenant_id, r.ls_id): r for r in reps}
    rs.heartbeats.receive_hb(lease(server, reps))


def cluster(
    rs: RootService, dead: Iterable[str], ends: dict[str, int]
) -> tuple[int, str, FakeAgents]:
    """A tenant of 2 LS on (z1 member, B, C), led from z1; the ``dead`` servers (roles
    ``'z1'`` for the z1 member, or addresses) stop heartbeating after one report and their
    leases expire. ``ends`` gives each member's log end (default 100). Returns the tenant id,
    the z1 member and the agents."""
    tid = make_tenant(rs, ls_count=2)
    z1 = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    members = sorted([z1, B, C])
    agents = FakeAgents()
    rs.tenant_layer.applier.agents = agents
    dead_set = {z1 if d == "z1" else d for d in dead}
    ends = {z1 if k == "z1" else k: v for k, v in ends.items()}

    def report(server: str) -> list[Any]:
        return [
            replica((tid, ls), z1, members, me=server, end=ends.get(server, 100))
            for ls in (1001, 1002)
        ]

    for s in members:
        feed(rs, agents, s, report(s))
    feed(rs, agents, D if z1 != D else "127.0.0.1:3001", [])
    live = [s for s in (*members, D, "127.0.0.1:3001") if s not in dead_set]
    for _ in range(2):
        rs.clock.advance(5 * S)
        for s in sorted(set(live)):
            rs.heartbeats.receive_hb(lease(s, list(agents.replicas.get(s, {}).values())))
    rs.lease_checker.run_once()
    for s in dead_set:
        assert not rs.whitelist.get(s).is_alive()
    return tid, z1, agents


def state(rs: RootService) -> tuple[Any, ...]:
    """Every table's rows (as text, sorted), the whitelist and the buried identities."""
    tables = {}
    with rs.store.engine.connect() as conn:
        for name in sorted(sa.inspect(conn).get_table_names()):
            # Statements are audited (as events), refused or not.
            where = " WHERE module <> 'audit'" if name == "__all_rootservice_event_history" else ""
            got = conn.execute(sa.text(f'SELECT * FROM "{name}"{where}')).all()
            tables[name] = sorted(repr(tuple(r)) for r in got)
    return tables, repr(rs.whitelist.snapshot()), sorted(rs.whitelist.tombstones.keys())


def report_of(agents: FakeAgents, server: str, key: LsKey) -> obrpc_pb2.ReplicaInfo:
    return agents.replicas[server][key]


def test_refusals_change_nothing(rs: RootService) -> None:
    tid, z1, _ = cluster(rs, ["z1", B], {})
    rs.persist.run_once()
    before = state(rs)
    # DELETE SERVER names the LS without a leader (before any unit check).
    e = err(sql, rs, f"ALTER SYSTEM DELETE SERVER '{z1}'")
    assert e.name == "OB_OP_NOT_ALLOW"
    assert f"log stream 1001 of tenant {tid} has no leader" in str(e)
    assert "RECOVER LS" in str(e)
    # FORCE DELETE of a server that heartbeats, of an unknown one, and of a lost server
    # whose LS would lose its majority.
    e = err(sql, rs, f"ALTER SYSTEM FORCE DELETE SERVER '{C}'")
    assert e.name == "OB_OP_NOT_ALLOW" and "heartbeats" in str(e)
    e = err(sql, rs, "ALTER SYSTEM FORCE DELETE SERVER '127.0.0.1:3999'")
    assert e.name == "OB_SERVER_NOT_IN_WHITE_LIST"
    e = err(sql, rs, f"ALTER SYSTEM FORCE DELETE SERVER '{z1}', '{B}'")
    assert e.name == "OB_OP_NOT_ALLOW"
    assert f"log stream 1001 of tenant {tid} would keep less than a majority" in str(e)
    assert "RECOVER LS" in str(e)
    e = err(sql, rs, f"ALTER SYSTEM FORCE DELETE SERVER '{z1}'")  # B is dead too
    assert e.name == "OB_OP_NOT_ALLOW" and "would keep less than a majority" in str(e)
    # RECOVER naming one of the two dead members: the other may come back with more.
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{z1}'")
    assert e.name == "OB_OP_NOT_ALLOW" and B in str(e) and "log stream 1001" in str(e)
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{z1}', '{C}'")
    assert e.name == "OB_OP_NOT_ALLOW" and "heartbeats" in str(e)
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS TENANT nope FROM LOST SERVERS '{z1}', '{B}'")
    assert e.name == "OB_TENANT_NOT_EXIST"
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS LS 9 FROM LOST SERVERS '{z1}', '{B}'")
    assert e.name == "OB_ENTRY_NOT_EXIST"
    rs.persist.run_once()
    assert state(rs) == before
    assert rs.tenant_layer.pause.paused() == ""


def rows_of(resp: Any) -> list[dict[str, Any]]:
    cols = list(resp.columns)
    return [
        dict(zip(cols, [c.int_value or c.string_value for c in r.cells], strict=True))
        for r in resp.rows
    ]


def test_dry_run_shows_the_plan_and_changes_nothing(rs: RootService) -> None:
    # The dead leader reached 120 and B 95 before they died; C, the survivor, has 90.
    tid, z1, _ = cluster(rs, ["z1", B], {"z1": 120, B: 95, C: 90})
    rs.persist.run_once()
    before = state(rs)
    text = f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{B}', '{z1}' DRY RUN"
    resp = sql(rs, text)
    got = rows_of(resp)
    assert [(r["TENANT_ID"], r["LS_ID"]) for r in got] == [(tid, 1001), (tid, 1002)]
    for r in got:
        assert (r["ACTION"], r["SURVIVOR"], r["MEMBERS_AFTER"]) == ("RECOVER", C, C)
        assert r["REMOVED"] == ",".join(sorted([z1, B]))
        assert r["NEW_TERM"] == 2  # every report was at term 1
        assert (r["SURVIVOR_LOG_END"], r["HIGHEST_LOG_END"], r["LOST_ENTRIES"]) == (90, 120, 30)
    assert "nothing changed" in resp.info
    rs.persist.run_once()
    assert state(rs) == before
    # The same state gives the same plan id.
    again = sql(rs, text)
    assert again.rows[0].cells[2].string_value == got[0]["PLAN_ID"]


def test_recover_applies_buries_and_refuses_the_dead(rs: RootService) -> None:
    tid, z1, agents = cluster(rs, ["z1", B], {"z1": 120, B: 95, C: 90})
    dry = rows_of(sql(rs, f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{z1}', '{B}' DRY RUN"))
    resp = sql(rs, f"ALTER SYSTEM RECOVER LS TENANT t1 FROM LOST SERVERS '{z1}', '{B}'")
    done = rows_of(resp)
    assert done == dry and "applied: RECOVER_LS job" in resp.info
    for ls in (1001, 1002):
        r = report_of(agents, C, (tid, ls))
        assert r.role == obrpc_pb2.LEADER and r.term == 2 and list(r.member_list) == [C]
        view = rs.tenant_layer.reports.views()[(tid, ls)]
        assert view.leader == C and sorted(view.replicas) == [C]
    rs.persist.run_once()
    (job,) = [j for j in jobs(rs) if j["job_type"] == "RECOVER_LS"]
    assert (job["job_status"], job["progress"]) == ("SUCCESS", 100)
    info = json.loads(job["extra_info"])
    assert info["stage"] == "done" and info["plan_id"] == dry[0]["PLAN_ID"]
    assert sorted(info["removed"]) == sorted([z1, B])
    for name in ("recover_ls_plan", "recover_ls_check", "recover_ls_bury", "recover_ls_done"):
        assert len(events(rs, name)) == 1, name
    assert len(events(rs, "recover_ls")) == 2
    # Buried: DELETING with a DELETE_SERVER job each, a tombstone, refused at lease time.
    for s in (z1, B):
        assert server_row(rs, s)["status"] == "DELETING"
    assert sorted(j["svr_port"] for j in jobs(rs) if j["job_type"] == "DELETE_SERVER") == sorted(
        int(s.rsplit(":", 1)[1]) for s in (z1, B)
    )
    with rs.store.engine.connect() as conn:
        stones = conn.execute(
            sa.text("SELECT svr_port, reason FROM dba_ob_server_tombstones")
        ).all()
    assert sorted(p for p, _ in stones) == sorted(int(s.rsplit(":", 1)[1]) for s in (z1, B))
    assert all(f"RECOVER LS plan {dry[0]['PLAN_ID']}" == reason for _, reason in stones)
    e = err(rs.heartbeats.receive_hb, lease(B))
    assert e.name == "OB_SERVER_ALREADY_DELETED" and "may never rejoin" in str(e)
    # Its server id under another (whitelisted) address is refused too.
    other = lease(D if z1 != D else "127.0.0.1:3001")
    other.server_id = rs.whitelist.get(B).id
    assert err(rs.heartbeats.receive_hb, other).name == "OB_SERVER_ALREADY_DELETED"
    assert rs.tenant_layer.pause.paused() == ""
    # A second FORCE DELETE of a buried server is refused; RECOVER again has nothing to do.
    assert err(sql, rs, f"ALTER SYSTEM FORCE DELETE SERVER '{B}'").name == (
        "OB_SERVER_ALREADY_DELETED"
    )
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{z1}', '{B}'")
    assert e.name == "OB_OP_NOT_ALLOW" and "no selected log stream lost its majority" in str(e)
    # The tombstones come back from the table at a load (take office, RELOAD SERVER).
    rs.whitelist.tombstones.replace_all([])
    sql(rs, "ALTER SYSTEM RELOAD SERVER")
    assert rs.whitelist.tombstones.keys() == {z1, B}
    # ADD SERVER of a buried address that left the whitelist is refused before any RPC.
    rs.whitelist.remove(B)
    e = err(sql, rs, f"ALTER SYSTEM ADD SERVER '{B}' ZONE 'z2'")
    assert e.name == "OB_SERVER_ALREADY_DELETED" and "may never rejoin" in str(e)


class ChangingReports:
    """A heartbeat requester that, at its second request, has C report one more entry."""

    def __init__(self, rs: RootService, agents: FakeAgents) -> None:
        self.rs, self.agents, self.calls = rs, agents, 0

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        self.calls += 1
        if self.calls == 2:
            reps = [
                obrpc_pb2.ReplicaInfo(**{**_fields(r), "log_end_index": r.log_end_index + 1})
                for r in self.agents.replicas[C].values()
            ]
            feed(self.rs, self.agents, C, reps)
        return 0


def _fields(r: obrpc_pb2.ReplicaInfo) -> dict[str, Any]:
    return {f.name: v for f, v in r.ListFields()}


def test_recover_refused_when_a_report_changed_since_the_plan(rs: RootService) -> None:
    _, z1, agents = cluster(rs, ["z1", B], {})
    rs.lost_servers.removal.heartbeats = ChangingReports(rs, agents)
    e = err(sql, rs, f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{z1}', '{B}'")
    assert e.name == "OB_STATE_NOT_MATCH" and "reports changed since plan" in str(e)
    (job,) = [j for j in jobs(rs) if j["job_type"] == "RECOVER_LS"]
    assert job["job_status"] == "FAILED"
    assert json.loads(job["extra_info"])["stage"] == "failed"
    assert rs.whitelist.tombstones.keys() == set()
    assert server_row(rs, B)["status"] != "DELETING"
    assert rs.tenant_layer.pause.paused() == ""


def test_force_delete_with_a_majority_left(rs: RootService) -> None:
    tid, z1, agents = cluster(rs, ["z1"], {})
    resp = sql(rs, f"ALTER SYSTEM FORCE DELETE SERVER '{z1}'")
    assert "removed from 2 log stream(s)" in resp.info
    for ls in (1001, 1002):
        view = rs.tenant_layer.reports.views()[(tid, ls)]
        # the leader was the lost server: B (z2, the next primary-zone priority) leads
        assert view.leader == B
        assert list(view.replicas[B].member_list) == [B, C]
        assert list(report_of(agents, C, (tid, ls)).member_list) == [B, C]
    assert server_row(rs, z1)["status"] == "DELETING"
    assert rs.whitelist.tombstones.get(z1) is not None
    assert [j["job_status"] for j in jobs(rs) if j["job_type"] == "DELETE_SERVER"] == ["INPROGRESS"]
    assert len(events(rs, "force_delete_server")) == 1
    assert err(rs.heartbeats.receive_hb, lease(z1)).name == "OB_SERVER_ALREADY_DELETED"


def test_a_new_leader_ends_what_the_old_one_left(rs: RootService) -> None:
    tid, z1, agents = cluster(rs, ["z1", B], {})
    lost = rs.lost_servers
    plan = lost.recover([z1, B], dry_run=True).plan
    # One run died before its commit point, another right after it (buried, no LS yet).
    early = lost._stage(None, plan, "planned", 10, "recover_ls_plan")
    late = lost._stage(None, plan, "planned", 10, "recover_ls_plan")
    lost.burial.bury([z1, B], "test", "test", stage=(late, 40, lost._info(plan, "buried")))
    assert report_of(agents, C, (tid, 1001)).role != obrpc_pb2.LEADER
    lost._checked_epoch = 0  # as a new term
    assert lost.run_once() == 2
    by_id = {j["job_id"]: j for j in jobs(rs)}
    assert by_id[early]["job_status"] == "FAILED"
    assert by_id[early]["return_code"] == ObError("OB_CANCELED").code
    assert by_id[late]["job_status"] == "SUCCESS"
    for ls in (1001, 1002):
        r = report_of(agents, C, (tid, ls))
        assert r.role == obrpc_pb2.LEADER and list(r.member_list) == [C]
    assert lost.run_once() == 0  # once per term


def test_the_highest_log_end_outlives_the_reports_that_showed_it(rs: RootService) -> None:
    tid, z1, _ = cluster(rs, ["z1", B], {"z1": 120, B: 95, C: 90})
    marks = rs.tenant_layer.log_marks
    assert marks.run_once() == 2  # one row per LS, at the dead leader's 120
    assert marks.run_once() == 0  # nothing rose
    with rs.store.engine.connect() as conn:
        got = conn.execute(
            sa.text("SELECT ls_id, log_end_index, svr_port FROM __all_ls_log_mark ORDER BY ls_id")
        ).all()
    assert [tuple(r) for r in got] == [(ls, 120, int(z1.rsplit(":", 1)[1])) for ls in (1001, 1002)]
    # A new leader never saw the dead leader's reports: the table still tells.
    rs.tenant_layer.reports.forget_server(z1)
    rs.tenant_layer.reports.forget_server(B)
    text = f"ALTER SYSTEM RECOVER LS TENANT t1 LS 1002 FROM LOST SERVERS '{z1}', '{B}' DRY RUN"
    (row,) = rows_of(sql(rs, text))
    assert (row["LS_ID"], row["HIGHEST_LOG_END"], row["LOST_ENTRIES"]) == (1002, 120, 30)
    assert row["TENANT_ID"] == tid
