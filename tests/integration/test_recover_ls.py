"""Integration test with real processes on PostgreSQL: three agents, a
tenant of three log streams with three replicas each, two agents (the leader's and one
follower's) killed. DELETE SERVER is refused naming the LS without a leader; FORCE DELETE of
the live server is refused; RECOVER LS's DRY RUN lists exactly the three LS with the survivor
and its log end and changes nothing; RECOVER LS applied with the RS killed at its commit point
(the survivor holding the call in flight): the job is left at its commit point, the next RS
resumes and finishes it, every LS led by the survivor, and the survivor took no new term
before the burial's commit. A removed agent restarted with its old data directory is refused
at lease time. Then five replicas of one LS, three lost, two survivors whose logs end apart
(one stopped fetching): the one with the longer log is chosen, leads, and the other follows
it.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.proto import obrpc_pb2
from observer_agent.replicas.faults import FAULT_REPLICATION_STOP_FILE
from rootservice.db.engine import make_engine
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support.cluster import ProcSet, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# The buried servers are emptied by the balancer once RECOVER ends: plans in pandas, not a
# SparkSession started inside the RS (test_delete_server.py does the same on PostgreSQL).
FLAGS = {**RS_FLAGS, "balancer_planner": "local"}

#: A call the survivor holds for the fault file's 8 s is still awaited by the RS.
SLOW_RPC = {**FLAGS, "rpc_timeout": "10s"}

LS_IDS = (1001, 1002, 1003)
TENANT = 1002
#: Bound of the waits on this slow, shared machine (they end on their condition).
WAIT_S = 120
RECOVER_JOB = (
    "SELECT job_status, extra_info FROM __all_rootservice_job WHERE job_type = 'RECOVER_LS'"
)
BURY_EVENT = (
    "SELECT event_time FROM __all_rootservice_event_history WHERE event = 'recover_ls_bury'"
)
LEADER_LINE = re.compile(
    r"^(\S+) INFO agent \S+ observer_agent: replica tenant \d+ ls (\d+): leader at term (\d+)",
    re.M,
)


def leader_lines(text: str) -> list[tuple[int, int, int]]:
    """(ls id, term, time in µs since the epoch) of every "leader at term" line of an agent's
    log."""
    out = []
    for m in LEADER_LINE.finditer(text):
        at = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        out.append((int(m.group(2)), int(m.group(3)), int(at.timestamp() * 1_000_000)))
    return out


def read_db(db_url: str, query: str) -> list[tuple[Any, ...]]:
    """``query``'s rows, read straight from the RS's database (no RS needed)."""
    eng = make_engine(db_url)
    try:
        with eng.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(query))]
    finally:
        eng.dispose()


def snapshot(c: TenantCluster, survivor: str) -> tuple[Any, ...]:
    """What a dry run must not change: the survivor's replicas (role, term, members), the
    servers' statuses, the jobs and the tombstones."""
    reps = replica_report(survivor)
    return (
        sorted((k, r.role, r.term, tuple(r.member_list), r.leader) for k, r in reps.items()),
        sorted(c.statuses().items()),
        c.ok("SELECT job_id, job_type, job_status FROM DBA_OB_ROOTSERVICE_JOBS ORDER BY job_id"),
        c.ok("SELECT svr_ip, svr_port FROM DBA_OB_SERVER_TOMBSTONES"),
    )


def _quietly(c: TenantCluster, text: str) -> None:
    """Run ``text``; the RS is killed under it, so its answer (or none) does not matter."""
    with contextlib.suppress(Exception):
        c.sql(text)


def leads_alone(server: str) -> bool:
    """``server`` leads every LS with itself as the only member."""
    reps = replica_report(server)
    return all(
        (r := reps.get((TENANT, ls))) is not None
        and r.role == obrpc_pb2.LEADER
        and list(r.member_list) == [server]
        for ls in LS_IDS
    )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_recover_ls_after_losing_two_of_three(procs: ProcSet, tmp_path: Path, db_url: str) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**SLOW_RPC)
    a1, a2, a3 = c.bootstrap()
    c.make_tenant(ls_count=3)
    wait_until(lambda: c.leaders_on(a1) == 3, 20, message="3 leaders in primary zone z1")
    # The follower first: were the leader's lease to expire first, a3 would be elected
    # while a2 still counted for the majority.
    c.agents[a2].kill()
    wait_until(lambda: c.statuses().get(a2) == "INACTIVE", 15, message="a2 INACTIVE")
    c.agents[a1].kill()
    wait_until(lambda: c.statuses().get(a1) == "INACTIVE", 15, message="a1 INACTIVE")

    # DELETE SERVER names the LS without a leader.
    resp = c.sql(f"ALTER SYSTEM DELETE SERVER '{a1}'")
    assert resp.error.name == "OB_OP_NOT_ALLOW", resp.error
    assert f"log stream 1001 of tenant {TENANT} has no leader" in resp.error.message
    # FORCE DELETE of the live server is refused; of a1 it is too (every LS would be left
    # with 1 of 3 members), naming the LS and RECOVER LS.
    live = c.sql(f"ALTER SYSTEM FORCE DELETE SERVER '{a3}'")
    assert live.error.name == "OB_OP_NOT_ALLOW" and "heartbeats" in live.error.message
    minority = c.sql(f"ALTER SYSTEM FORCE DELETE SERVER '{a1}'")
    assert minority.error.name == "OB_OP_NOT_ALLOW" and "RECOVER LS" in minority.error.message

    # DRY RUN: exactly the three LS, survivor a3 with its log end; nothing changes.
    before = snapshot(c, a3)
    rows = c.ok(f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{a1}', '{a2}' DRY RUN")
    ends = {k[1]: r.log_end_index for k, r in replica_report(a3).items()}
    assert [r[1] for r in rows] == list(LS_IDS)
    for r in rows:
        tenant_id, ls, _plan, action, survivor, _term, end, highest, lost = r[:9]
        assert (tenant_id, action, survivor) == (TENANT, "RECOVER", a3)
        assert end == ends[ls] and highest >= end and lost == highest - end
        assert r[11] == a3  # MEMBERS_AFTER
    assert len({r[2] for r in rows}) == 1  # one plan id
    assert snapshot(c, a3) == before

    # Applied, and the RS killed at its commit point: a3 holds every ApplyReplicas 8 s (the
    # RS waits up to 3 rpc_timeouts, 30 s, for the survivor: a call it sent is applied while
    # it waits), the RS is killed once the lost servers are buried (its call to the survivor
    # in flight), and the next RS finishes the run from the plan in the job row.
    hold = c.data_dir(a3) / "FAULT_APPLY_HOLD_MS"
    hold.write_text("8000")
    text = f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{a1}', '{a2}'"
    runner = threading.Thread(target=lambda: _quietly(c, text), daemon=True)
    runner.start()
    wait_until(
        lambda: c.ok(
            "SELECT 1 FROM __all_rootservice_event_history WHERE event = 'recover_ls_bury'"
        ),
        WAIT_S,
        message="the lost servers buried",
    )
    assert c.rs is not None
    c.rs.kill()
    hold.unlink()
    runner.join(timeout=70)
    # The killed RS ended nothing: its job waits at the commit point, read from the tables
    # (what the survivor holds meanwhile is the fault file's doing: not asserted).
    assert [(st, json.loads(i)["stage"]) for st, i in read_db(db_url, RECOVER_JOB)] == [
        ("INPROGRESS", "buried")
    ]
    c.start_rs(**SLOW_RPC)
    rs = c.rs
    # The cause: the next RS resumed the run (its log says so, the job ends below).
    wait_until(
        lambda: "resumed after an RS failover" in rs.log_text(),
        WAIT_S,
        message="the next RS resumes the run",
    )
    wait_until(lambda: leads_alone(a3), WAIT_S, message="every LS led by the survivor")
    # The order: no member change reached the survivor before the commit point. Every
    # "leader at a new term" of a3 is logged after the burial's event, written in the
    # transaction that buries (one host, one clock). An RS that asked the survivor first
    # would have waited out the hold, and a3 would lead before the burial.
    [(bury_us,)] = read_db(db_url, BURY_EVENT)
    old_terms = {k[1]: term for k, _role, term, _, _ in before[0]}
    promoted = [
        (ls, term, at)
        for ls, term, at in leader_lines(c.agents[a3].log_text())
        if ls in old_terms and term > old_terms[ls]
    ]
    assert {ls for ls, _, _ in promoted} == set(LS_IDS), promoted
    assert all(at > bury_us for _, _, at in promoted), (bury_us, promoted)
    first = replica_report(a3)[(TENANT, 1001)].log_end_index
    wait_until(
        lambda: replica_report(a3)[(TENANT, 1001)].log_end_index > first,
        10,
        message="the survivor appends again",
    )
    wait_until(
        lambda: (
            c.ok("SELECT job_status FROM DBA_OB_ROOTSERVICE_JOBS WHERE job_type = 'RECOVER_LS'")
            == [["SUCCESS"]]
        ),
        10,
        message="the RECOVER_LS job SUCCESS",
    )
    events = {e for (e,) in c.ok("SELECT event FROM __all_rootservice_event_history")}
    assert {"recover_ls_plan", "recover_ls_check", "recover_ls_bury", "recover_ls_done"} <= events

    # a1 restarted with its old data directory: refused at lease time, never ACTIVE.
    c.restart_agent(a1)
    again = c.agents[a1]
    wait_until(
        lambda: "OB_SERVER_ALREADY_DELETED" in again.log_text(),
        20,
        message="the buried agent refused",
    )
    assert "may never rejoin" in again.log_text()
    assert c.statuses()[a1] == "DELETING"
    assert leads_alone(a3)


def _follower_of(server: str, leader: str) -> bool:
    """Every replica ``server`` reports follows ``leader`` and is in service."""
    reps = replica_report(server)
    return bool(reps) and all(r.leader == leader and r.in_service for r in reps.values())


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_recover_ls_survivor_with_the_longer_log_wins(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    """Five replicas of one LS, three lost, two survivors whose logs end apart: RECOVER LS
    picks the one with the longer log (DRY RUN shows it and its log end), it leads and the
    other follows it ("the survivor with the longer log wins")."""
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**FLAGS)
    a1, a2, a3, behind, ahead = c.bootstrap(5)
    # z4 before z5 in the primary zone: every rule after the log end (in service, zone
    # priority, address order aside) favours ``behind``, so only the log end picks ``ahead``.
    c.make_tenant(ls_count=1, primary="z1;z4", zones=5)
    key = (TENANT, LS_IDS[0])
    wait_until(lambda: c.leaders_on(a1) == 1, 20, message="the leader in primary zone z1")
    wait_until(
        lambda: _follower_of(behind, a1) and _follower_of(ahead, a1),
        20,
        message="z4 and z5 follow a1 in service",
    )
    # ``behind`` stops fetching; ``ahead`` goes on following a1 for a second of log.
    stop = c.data_dir(behind) / FAULT_REPLICATION_STOP_FILE
    stop.touch()
    wait_until(lambda: "followers stop fetching" in c.agents[behind].log_text(), 10)
    frozen = replica_report(behind)[key].log_end_index
    wait_until(
        lambda: replica_report(ahead)[key].log_end_index > frozen + 10,
        10,
        message="z5's log 10 entries past z4's",
    )
    # The followers first: with a1 killed first, four of five would elect a new leader.
    for lost in (a2, a3, a1):
        c.agents[lost].kill()
        wait_until(lambda s=lost: c.statuses().get(s) == "INACTIVE", 15, message=f"{lost} lost")
    behind_end = replica_report(behind)[key].log_end_index
    ahead_end = replica_report(ahead)[key].log_end_index
    assert behind_end == frozen and ahead_end > behind_end + 10

    # DRY RUN: the survivor is ``ahead`` with its own log end; nothing changes.
    lost_list = f"'{a1}', '{a2}', '{a3}'"
    before = snapshot(c, ahead)
    rows = c.ok(f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS {lost_list} DRY RUN")
    assert len(rows) == 1, rows
    tenant_id, ls, _plan, action, survivor, _term, end, highest, lost_n, new_term = rows[0][:10]
    assert (tenant_id, ls, action) == (*key, "RECOVER")
    assert (survivor, end) == (ahead, ahead_end), rows[0]
    assert highest >= ahead_end and lost_n == highest - ahead_end
    assert rows[0][11] == ",".join(sorted((behind, ahead)))  # MEMBERS_AFTER
    assert snapshot(c, ahead) == before

    # Applied: ``ahead`` leads both at the new term, ``behind`` (fetching again) follows it
    # past the survivor's log end. The statement answers once the view shows the survivor
    # leading; by then the reconciler may already have moved the leader to the primary zone
    # z4 (``behind``, in sync), so the survivor's term is read from the RS's log, and what is
    # waited for is one leader of both at that term or later with ``behind`` past
    # ``ahead``'s old log end (``ahead``'s log, not its own, is what it kept).
    stop.unlink()
    applied = c.ok(f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS {lost_list}")
    assert applied[0][4] == ahead and applied[0][9] == new_term, applied
    assert f"{ahead} leads at term {new_term} with" in c.rs.log_text(), c.rs.log_tail(20)
    members = sorted((behind, ahead))

    def recovered() -> bool:
        a = replica_report(ahead).get(key)
        b = replica_report(behind).get(key)
        if a is None or b is None or a.term != b.term or a.term < new_term:
            return False
        leader = a if a.role == obrpc_pb2.LEADER else b
        other = b if leader is a else a
        return (
            leader.role == obrpc_pb2.LEADER
            and other.role != obrpc_pb2.LEADER
            and sorted(leader.member_list) == members
            and other.leader == (ahead if leader is a else behind)
            and b.log_end_index > ahead_end
        )

    wait_until(recovered, 30, message="one leader of z4 and z5, z4 past z5's old log end")
