"""Helpers of the tenant-layer tests: a four-server cluster (A, D in z1, B in z2, C in z3)
on :func:`tests.support.harness.make_rs`, lease requests carrying replica reports, a tenant
made by SQL, and reports of every member of a tenant's log streams.

No agent runs: replica reports are fed through ``receive_hb`` the way agents send them, and
the RS's ApplyReplicas calls fail fast (nothing listens on the seeded addresses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from tests.support.harness import FAKE_START_US, ROOT, agent_now_us, make_rs

GIB = 1 << 30
A, B, C, D = "127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003", "127.0.0.1:3004"
ZONE = {A: "z1", B: "z2", C: "z3", D: "z1"}


def lease(server: str, replicas: list[obrpc_pb2.ReplicaInfo] | None = None, **res: Any) -> Any:
    """A lease request of ``server`` carrying ``replicas``; ``cpu`` / ``mem`` / ``log``
    override its capacity (8 cores, 16G memory, 64G log disk)."""
    req = obrpc_pb2.LeaseRequest(
        version=1,
        zone=ZONE[server],
        server=server,
        sql_port=int(server.rsplit(":", 1)[1]) + 1000,
        build_version="4.2.0.0-test",
        # FakeClock's start: the RS refuses times before 2000 or ahead of its clock.
        start_service_time=FAKE_START_US,
        current_server_time=agent_now_us(),
        cluster_id="c0ffee",
    )
    req.resource_info.cpu_total = res.get("cpu", 8)
    req.resource_info.mem_total = res.get("mem", 16 * GIB)
    req.resource_info.log_disk_total = res.get("log", 64 * GIB)
    req.replicas.extend(replicas or [])
    return req


def replica(
    key: tuple[int, int],
    leader: str,
    members: list[str],
    *,
    me: str,
    term: int = 1,
    end: int = 100,
    end_ts: int = 0,
    in_service: bool = True,
) -> obrpc_pb2.ReplicaInfo:
    """The report of ``me``'s replica of LS ``key`` led by ``leader`` (LEADER role when
    ``me`` is it) at ``term``, log ending at index ``end`` / time ``end_ts``."""
    return obrpc_pb2.ReplicaInfo(
        tenant_id=key[0],
        ls_id=key[1],
        unit_id=1,
        role=obrpc_pb2.LEADER if leader == me else obrpc_pb2.FOLLOWER,
        member_list=sorted(members),
        replica_type="FULL",
        paxos_replica_number=len(members),
        data_size=1 << 20,
        required_size=(1 << 20) + 4096,
        in_service=in_service,
        term=term,
        leader=leader,
        log_end_index=end,
        log_end_ts=end_ts,
    )


def sql(rs: RootService, text: str) -> Any:
    """Run a statement; raise its refusal as ``ObError``."""
    resp = execute_sql(rs, text, ROOT)
    if resp.error.code:
        raise ObError(resp.error.name, detail=resp.error.message)
    return resp


def rows(rs: RootService, query: str) -> list[dict[str, Any]]:
    """The rows of a raw SQL query on the RS's database."""
    with rs.store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.text(query)).mappings()]


def make_tenant_rs(db_url: str, tmp_path: Path) -> RootService:
    """An RS with short tenant timings and the four servers heartbeating (no replicas)."""
    r = make_rs(
        db_url,
        tmp_path,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
    )
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    return r


def make_tenant(rs: RootService, ls_count: int = 2, primary: str = "z1") -> int:
    """Unit u1, pool p1 (one unit in each of z1..z3) and tenant t1; returns its id. The
    tenant has no leader (no agent answers), so CREATE TENANT ends in OB_TIMEOUT."""
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 2, MEMORY_SIZE '4G', LOG_DISK_SIZE '12G'")
    sql(rs, "CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    # No agent answers ApplyReplicas here, so the tenant is created but has no leader yet.
    with pytest.raises(ObError) as e:
        sql(
            rs,
            f"CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE '{primary}', "
            f"LS_COUNT {ls_count}",
        )
    assert e.value.name == "OB_TIMEOUT"
    return int(rows(rs, "SELECT tenant_id FROM __all_tenant")[0]["tenant_id"])


def members_of(rs: RootService, tenant_id: int, ls_id: int) -> list[str]:
    """The planned members of one LS (re-read)."""
    return sorted(
        rs.tenant_layer.balancer_view.topology(force=True).plans[(tenant_id, ls_id)].members
    )


def report_all(
    rs: RootService,
    tenant_id: int,
    leader: dict[int, str] | None = None,
    lag: dict[str, int] | None = None,
    skip: tuple[str, ...] = (),
) -> None:
    """Every member reports every LS; ``leader`` by ls_id (default the z1 member), ``lag``
    microseconds behind the leader's log by server."""
    plans = rs.tenant_layer.balancer_view.topology(force=True).plans
    now = rs.clock.now_us()
    per_server: dict[str, list[obrpc_pb2.ReplicaInfo]] = {}
    for (t, ls), plan in plans.items():
        if t != tenant_id:
            continue
        members = sorted(plan.members)
        lead = (leader or {}).get(ls) or next(m for m in members if ZONE[m] == "z1")
        for m in members:
            behind = (lag or {}).get(m, 0)
            per_server.setdefault(m, []).append(
                replica((t, ls), lead, members, me=m, end_ts=now - behind)
            )
    for server in (A, B, C, D):
        if server not in skip:
            rs.heartbeats.receive_hb(lease(server, per_server.get(server, [])))


def err(fn: Any, *args: Any) -> ObError:
    """The ObError ``fn(*args)`` raises (AssertionError if none)."""
    try:
        fn(*args)
    except ObError as e:
        return e
    raise AssertionError("no error")
