"""Integration tests, on real rootservice and observer-agent processes and on both
databases, of the log streams getting back to their replica count after servers were
removed as lost:

- RECOVER LS: three zones, a tenant of three log streams, the agents of two zones killed and
  recovered from. Until a server of those zones exists, every log stream has an
  ``ADD_REPLICA`` job that names it and why it waits, and one ``add_replica_waiting``
  event per reason; once a new server is added in each zone, every log stream is copied
  there and has three members in sync again, as ``DBA_OB_LS_LOCATIONS`` shows.
- FORCE DELETE SERVER of one lost server (the log streams keep their majority): it
  succeeds, the server is buried and out of every member list, and a server added in its
  zone gets the replicas back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from obcommon.proto import obrpc_pb2
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support.cluster import ProcSet, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

FLAGS = {**RS_FLAGS, "balancer_planner": "local", "balancer_interval": "1s"}

LS_IDS = (1001, 1002, 1003)
TENANT = 1002
#: Bound of each wait on this slow, shared machine; the waits end on their condition.
WAIT_S = 120


def members_of(c: TenantCluster) -> dict[int, list[str]]:
    """LS id -> the member list its LEADER row of DBA_OB_LS_LOCATIONS shows."""
    rows = c.ok(
        "SELECT ls_id, member_list FROM DBA_OB_LS_LOCATIONS "
        f"WHERE tenant_id = {TENANT} AND role = 'LEADER'"
    )
    return {int(ls): sorted(str(m).split(",")) if m else [] for ls, m in rows}


def locations_of(c: TenantCluster) -> dict[int, set[tuple[str, str]]]:
    """LS id -> {(server, replica status)} of its rows in DBA_OB_LS_LOCATIONS."""
    out: dict[int, set[tuple[str, str]]] = {}
    for ls, ip, port, status in c.ok(
        "SELECT ls_id, svr_ip, svr_port, replica_status FROM DBA_OB_LS_LOCATIONS "
        f"WHERE tenant_id = {TENANT}"
    ):
        out.setdefault(int(ls), set()).add((f"{ip}:{port}", str(status)))
    return out


def add_jobs(c: TenantCluster) -> dict[int, tuple[str, dict[str, Any]]]:
    """LS id -> (job status, extra_info) of its latest ADD_REPLICA job."""
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for status, info in c.ok(
        "SELECT job_status, extra_info FROM DBA_OB_ROOTSERVICE_JOBS "
        "WHERE job_type = 'ADD_REPLICA' ORDER BY job_id"
    ):
        d = json.loads(info)
        out[int(d["ls_id"])] = (str(status), d)
    return out


def waiting_events(c: TenantCluster) -> list[tuple[str, str]]:
    """(ls, reason) of every ``add_replica_waiting`` event."""
    rows = c.ok(
        "SELECT value2, value3 FROM __all_rootservice_event_history "
        "WHERE event = 'add_replica_waiting' ORDER BY gmt_create"
    )
    return [(str(ls), str(reason)) for ls, reason in rows]


def in_sync(servers: list[str], past: dict[int, int]) -> bool:
    """Every LS: one of ``servers`` leads with exactly ``servers`` as members, and every other
    reports it as its leader, is in service and has a log past ``past[ls]`` (the survivor's
    log end when the copies were asked for)."""
    reports = {s: replica_report(s) for s in servers}
    for ls in LS_IDS:
        reps = {s: reports[s].get((TENANT, ls)) for s in servers}
        leaders = [s for s, r in reps.items() if r is not None and r.role == obrpc_pb2.LEADER]
        if len(leaders) != 1:
            return False
        leader = leaders[0]
        lead = reps[leader]
        if lead is None or sorted(lead.member_list) != sorted(servers):
            return False
        for s, r in reps.items():
            if s == leader:
                continue
            if r is None or not r.in_service or r.leader != leader:
                return False
            if r.log_end_index <= past[ls]:
                return False
    return True


def add_server(c: TenantCluster, zone: str) -> str:
    """Start an agent in ``zone`` and ADD SERVER it; returns its address once ACTIVE."""
    addr = c.start_agent(zone)
    c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE '{zone}'")
    wait_until(lambda: c.statuses().get(addr) == "ACTIVE", 30, message=f"{addr} ACTIVE")
    return addr


def wait_restored(c: TenantCluster, servers: list[str], past: dict[int, int]) -> None:
    """Wait until every LS has ``servers`` as members, the followers in service past the
    ``past`` log ends, three NORMAL replicas in DBA_OB_LS_LOCATIONS and its ADD_REPLICA job
    SUCCESS."""
    names = ", ".join(servers)
    wait_until(
        lambda: in_sync(servers, past),
        WAIT_S,
        message=f"every LS: {names} members, the followers in service past the survivor's log end",
    )
    wait_until(
        lambda: (
            members_of(c) == {ls: sorted(servers) for ls in LS_IDS}
            and locations_of(c) == {ls: {(s, "NORMAL") for s in servers} for ls in LS_IDS}
        ),
        WAIT_S,
        message="DBA_OB_LS_LOCATIONS: three NORMAL replicas per LS, three members",
    )
    wait_until(
        lambda: {s for s, _ in add_jobs(c).values()} == {"SUCCESS"},
        WAIT_S,
        message="the ADD_REPLICA jobs SUCCESS",
    )


def test_recover_ls_then_new_servers_restore_three_replicas(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**FLAGS)
    a1, a2, a3 = c.bootstrap()
    c.make_tenant(ls_count=3)
    wait_until(lambda: c.leaders_on(a1) == 3, 30, message="3 leaders in primary zone z1")
    # The follower first, so that the survivor a3 is never elected with a2's vote.
    c.agents[a2].kill()
    wait_until(lambda: c.statuses().get(a2) == "INACTIVE", 30, message="a2 INACTIVE")
    c.agents[a1].kill()
    wait_until(lambda: c.statuses().get(a1) == "INACTIVE", 30, message="a1 INACTIVE")

    rows = c.ok(f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{a1}', '{a2}'")
    assert [r[1] for r in rows] == list(LS_IDS) and {r[4] for r in rows} == {a3}
    wait_until(
        lambda: members_of(c) == {ls: [a3] for ls in LS_IDS},
        WAIT_S,
        message="every LS led by a3 alone in DBA_OB_LS_LOCATIONS",
    )

    # No server of z1 / z2 can take a replica: every LS says so, in a job naming it.
    def waiting() -> bool:
        jobs = add_jobs(c)
        return sorted(jobs) == list(LS_IDS) and all(
            status == "INPROGRESS" and "z1" in info["waiting"] and "z2" in info["waiting"]
            for status, info in jobs.values()
        )

    wait_until(waiting, WAIT_S, message="an ADD_REPLICA job per LS saying why it waits")
    for _, info in add_jobs(c).values():
        assert info["tenant_id"] == TENANT and info["replicas"] == 1 and info["wanted"] == 3
        assert "no server" in info["waiting"], info
    wait_until(
        lambda: {ls for ls, _ in waiting_events(c)} == {f"{TENANT}.{ls}" for ls in LS_IDS},
        WAIT_S,
        message="one add_replica_waiting event per LS",
    )
    assert members_of(c) == {ls: [a3] for ls in LS_IDS}

    # A new server in each lost zone: the units move there and the replicas are copied.
    past = {ls: replica_report(a3)[(TENANT, ls)].log_end_index for ls in LS_IDS}
    a4 = add_server(c, "z1")
    a5 = add_server(c, "z2")
    wait_restored(c, [a3, a4, a5], past)
    wait_until(
        lambda: (
            c.ok("SELECT job_status FROM DBA_OB_ROOTSERVICE_JOBS WHERE job_type = 'DELETE_SERVER'")
            == [["SUCCESS"], ["SUCCESS"]]
        ),
        WAIT_S,
        message="the DELETE_SERVER jobs of the lost servers SUCCESS",
    )
    # Every balancer round of the wait saw the same reasons: each (LS, reason) said once.
    said = waiting_events(c)
    assert len(said) == len(set(said)), said
    assert {ls for ls, _ in said} == {f"{TENANT}.{ls}" for ls in LS_IDS}
    copies = c.ok(
        "SELECT value2, value3 FROM __all_rootservice_event_history WHERE event = 'add_replica'"
    )
    assert sorted(copies) == sorted([f"{TENANT}.{ls}", s] for ls in LS_IDS for s in (a4, a5)), (
        copies
    )


def test_force_delete_then_a_new_server_restores_the_replicas(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**FLAGS)
    a1, a2, a3 = c.bootstrap()
    c.make_tenant(ls_count=3)
    wait_until(lambda: c.leaders_on(a1) == 3, 30, message="3 leaders in primary zone z1")
    c.agents[a2].kill()
    wait_until(lambda: c.statuses().get(a2) == "INACTIVE", 30, message="a2 INACTIVE")

    c.ok(f"ALTER SYSTEM FORCE DELETE SERVER '{a2}'")
    # Buried: DELETING with a tombstone, out of every member list, a1 still leading.
    assert c.statuses()[a2] == "DELETING"
    ip, port = a2.rsplit(":", 1)
    assert c.ok("SELECT svr_ip, svr_port FROM DBA_OB_SERVER_TOMBSTONES") == [[ip, int(port)]]
    wait_until(
        lambda: members_of(c) == {ls: sorted([a1, a3]) for ls in LS_IDS},
        WAIT_S,
        message="every LS: members a1, a3",
    )
    wait_until(
        lambda: (
            sorted(add_jobs(c)) == list(LS_IDS)
            and all("z2" in info["waiting"] for _, info in add_jobs(c).values())
        ),
        WAIT_S,
        message="an ADD_REPLICA job per LS waiting for a server in z2",
    )
    past = {ls: replica_report(a1)[(TENANT, ls)].log_end_index for ls in LS_IDS}
    a4 = add_server(c, "z2")
    wait_restored(c, [a1, a3, a4], past)
    wait_until(
        lambda: a2 not in c.statuses(),
        WAIT_S,
        message="the buried server's row removed once emptied",
    )
