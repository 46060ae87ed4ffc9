"""Integration tests of the tenant layer: real ``rootservice`` and ``observer-agent``
processes whose agents really host replicas (data file + log, replicated agent to agent),
on SQLite and PostgreSQL (issue "Tenants, units and log streams"; docs/design/servers.md, docs/design/statements.md and docs/design/migration.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obcommon.proto import obrpc_pb2
from tests.integration.test_cluster import AGENT_FLAGS, Cluster
from tests.support.agent_probe import heartbeat_as_rs
from tests.support.cluster import ProcSet, agent_cmd, wait_until
from tests.support.ports import free_port
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

# The log disk each agent reports is fixed (by default it is 30 % of the filesystem holding the
# data directory), so that the units the tests create fit whatever the test's temporary
# directory is on: a 24 GB tmpfs left 7.3 GB, too little for two 4 GB units.
REPLICA_FLAGS = {"replica_size": "256K", "log_interval": "100ms", "log_disk_size": "80G"}
RS_FLAGS = {
    "ls_check_interval": "300ms",
    "ls_log_sync_threshold": "1s",
    "stop_server_check_timeout": "2s",
    "leader_switch_timeout": "15s",
    "tenant_create_timeout": "20s",
}


class TenantCluster(Cluster):
    """:class:`Cluster` whose agents host replicas (small data files, a fast log)."""

    def start_agent(
        self,
        zone: str,
        addr: str | None = None,
        name: str | None = None,
        data: str | None = None,
        **extra: Any,
    ) -> str:
        """Start an agent hosting replicas; ``data`` names its data directory (default: the
        process name)."""
        if not hasattr(self, "started_with"):
            self.started_with = {}
        addr = addr or f"127.0.0.1:{free_port()}"
        self.zones[addr] = zone
        name = name or f"agent-{addr.rsplit(':', 1)[1]}"
        flags = {**AGENT_FLAGS, **REPLICA_FLAGS, **self.extra_flags, **extra}
        self.started_with.setdefault(addr, (zone, name, extra))
        p = self.procs.start(
            agent_cmd(self.rs_addr, addr, free_port(), zone, self.tmp / (data or name), **flags),
            name,
        )
        p.wait_healthy(addr, timeout_s=30)
        self.agents[addr] = p
        return addr

    started_with: dict[str, tuple[str, str, dict[str, Any]]]
    # Flags every agent of this cluster gets on top of REPLICA_FLAGS.
    extra_flags: dict[str, Any] = {}

    def restart_agent(self, addr: str) -> None:
        """Start the agent of ``addr`` again, same zone, data directory and flags."""
        zone, name, extra = self.started_with[addr]
        self.start_agent(zone, addr, f"{name}-again", data=name, **extra)

    def locations(self) -> list[tuple[int, str, str, str]]:
        """(ls_id, server, zone, role) of every row of DBA_OB_LS_LOCATIONS."""
        return [
            (ls, f"{ip}:{port}", zone, role)
            for ls, ip, port, zone, role in self.ok(
                "SELECT ls_id, svr_ip, svr_port, zone, role FROM DBA_OB_LS_LOCATIONS "
                "ORDER BY ls_id, zone"
            )
        ]

    def leaders_on(self, server: str) -> int:
        return sum(1 for _, s, _, role in self.locations() if s == server and role == "LEADER")

    def stop_time(self, server: str) -> int:
        port = server.rsplit(":", 1)[1]
        return int(self.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {port}")[0][0])

    def make_tenant(self, ls_count: int, primary: str = "z1", zones: int = 3) -> None:
        """Tenant t1 with one unit in each of zones z1..z``zones`` (a replica of every LS
        there), ``ls_count`` log streams, primary zone ``primary``."""
        self.ok("CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
        zone_list = ", ".join(f"'z{i}'" for i in range(1, zones + 1))
        self.ok(f"CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ({zone_list})")
        self.ok(
            f"CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE '{primary}', "
            f"LS_COUNT {ls_count}"
        )


def replica_report(agent: str) -> dict[tuple[int, int], Any]:
    """The agent's own replica report, asked over ObserverService.RequestHeartbeat."""
    # ObserverService answers RS certificates with the token the agent obeys only.
    req = heartbeat_as_rs(agent, timeout_s=scaled(5))
    return {(r.tenant_id, r.ls_id): r for r in req.replicas}


@pytest.fixture
def tc(procs: ProcSet, tmp_path: Path, db_url: str) -> TenantCluster:
    return TenantCluster(procs, tmp_path, db_url)


def test_tenant_replicas_stop_moves_leaders_disk_error_and_delete_room(tc: TenantCluster) -> None:
    c = tc
    c.start_rs(**RS_FLAGS)
    a1, a2, a3 = c.bootstrap()
    # A second z1 server with 1G of memory: no room for a 2G unit.
    a4 = c.start_agent("z1", memory_limit="1G")
    c.ok(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(a4) == "ACTIVE", 15, message="a4 ACTIVE")

    c.make_tenant(ls_count=2)
    units = c.ok("SELECT zone, svr_ip, svr_port FROM DBA_OB_UNITS ORDER BY zone")
    assert [f"{ip}:{port}" for _, ip, port in units] == [a1, a2, a3]
    # Every replica exists on disk on the right server, with a data file and a log.
    for server in (a1, a2, a3):
        for ls in (1001, 1002):
            d = c.data_dir(server) / "replicas" / f"1002_{ls}"
            assert (d / "data").stat().st_size == 256 * 1024, d
    assert not (c.data_dir(a4) / "replicas").exists() or not any(
        (c.data_dir(a4) / "replicas").iterdir()
    )
    wait_until(lambda: len(c.locations()) == 6, 15, message="6 rows in __all_ls_meta_table")
    wait_until(lambda: c.leaders_on(a1) == 2, 15, message="both leaders in primary zone z1")
    assert c.ok("SELECT ls_id FROM DBA_OB_LS WHERE tenant_id = 1002") == [[1001], [1002]]
    # Followers replicate the leader's log: their applied positions advance and match.
    first = replica_report(a2)[(1002, 1001)]
    assert first.role == obrpc_pb2.FOLLOWER and first.leader == a1
    wait_until(
        lambda: replica_report(a2)[(1002, 1001)].log_end_index > first.log_end_index + 3,
        10,
        message="follower log advancing",
    )
    lead = replica_report(a1)[(1002, 1001)]
    assert lead.role == obrpc_pb2.LEADER and lead.data_checksum == first.data_checksum

    # OceanBase's views of the live cluster: GV$OB_SERVERS has what each agent reports (a4's
    # memory limit is its capacity; the units' configs are what is assigned), GV$OB_LOG_STAT
    # one row per replica, the followers in sync with their leader.
    def servers_view() -> dict[str, tuple[int, float, str]]:
        return {
            f"{ip}:{port}": (mem, cpu, health)
            for ip, port, mem, cpu, health in c.ok(
                "SELECT SVR_IP, SVR_PORT, MEM_CAPACITY, CPU_ASSIGNED_MAX, "
                "DATA_DISK_HEALTH_STATUS FROM GV$OB_SERVERS"
            )
        }

    wait_until(lambda: len(servers_view()) == 4, 15, message="GV$OB_SERVERS lists 4 servers")
    assert servers_view()[a4] == (1 << 30, 0, "NORMAL")
    assert servers_view()[a1][1:] == (1.0, "NORMAL")

    def log_stat() -> list[tuple[int, str, str, str]]:
        return [
            (ls, f"{ip}:{port}", role, in_sync)
            for ls, ip, port, role, in_sync in c.ok(
                "SELECT LS_ID, SVR_IP, SVR_PORT, ROLE, IN_SYNC FROM GV$OB_LOG_STAT "
                "WHERE TENANT_ID = 1002 ORDER BY LS_ID, SVR_PORT"
            )
        ]

    wait_until(
        lambda: len(log_stat()) == 6 and {r[3] for r in log_stat()} == {"YES"},
        15,
        message="GV$OB_LOG_STAT: 6 replicas in sync",
    )
    assert {(ls, s) for ls, s, role, _ in log_stat() if role == "LEADER"} == {
        (1001, a1),
        (1002, a1),
    }

    # STOP SERVER returns once leader_cnt is 0: no LEADER row left on a1 right away.
    c.ok(f"ALTER SYSTEM STOP SERVER '{a1}'")
    assert c.leaders_on(a1) == 0
    assert replica_report(a1)[(1002, 1001)].role == obrpc_pb2.FOLLOWER
    assert sum(1 for *_, role in c.locations() if role == "LEADER") == 2
    c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
    wait_until(lambda: c.leaders_on(a1) == 2, 20, message="leaders back in z1 after START")

    # A data-disk error on a1 runs STOP SERVER with its checks: leaders move away.
    (c.data_dir(a1) / "FAULT_DATA_DISK_ERROR").touch()
    wait_until(lambda: c.stop_time(a1) > 0, 20, message="a1 stopped for its disk error")
    wait_until(
        lambda: servers_view()[a1][2] == "ERROR", 20, message="GV$OB_SERVERS: a1's disk ERROR"
    )
    wait_until(lambda: c.leaders_on(a1) == 0, 20, message="leaders off the failed disk")
    # START SERVER is refused while the disk is bad, pointing at GV$OB_SERVERS.
    refused = c.sql(f"ALTER SYSTEM START SERVER '{a1}'")
    assert refused.error.name == "OB_OP_NOT_ALLOW", refused.error
    assert "Please check GV$OB_SERVERS" in refused.error.message
    assert c.stop_time(a1) > 0
    (c.data_dir(a1) / "FAULT_DATA_DISK_ERROR").unlink()
    wait_until(lambda: c.stop_time(a1) == 0, 20, message="a1 started after recovery")
    wait_until(
        lambda: servers_view()[a1][2] == "NORMAL", 20, message="GV$OB_SERVERS: a1's disk back"
    )
    wait_until(lambda: c.leaders_on(a1) == 2, 20, message="leaders back after recovery")

    # DELETE SERVER: a1's unit does not fit on a4 (1G), a2's zone has no other server.
    resp = c.sql(f"ALTER SYSTEM DELETE SERVER '{a1}'")
    assert resp.error.name == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert "memory: needs 2G, free 1G" in resp.error.message
    # Its dry run is refused with the very same error.
    explained = c.sql(f"EXPLAIN ALTER SYSTEM DELETE SERVER '{a1}'")
    assert (explained.error.name, explained.error.message) == (
        resp.error.name,
        resp.error.message,
    )
    assert c.error(f"ALTER SYSTEM DELETE SERVER '{a2}'") == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert c.statuses()[a1] == "ACTIVE"
    # With a roomy second server in z2, DELETE of a2 is accepted (the balancer then moves its unit).
    a5 = c.start_agent("z2")
    c.ok(f"ALTER SYSTEM ADD SERVER '{a5}' ZONE 'z2'")
    wait_until(lambda: c.statuses().get(a5) == "ACTIVE", 15, message="a5 ACTIVE")
    c.ok(f"ALTER SYSTEM DELETE SERVER '{a2}'")
    assert c.statuses()[a2] == "DELETING"


def test_stop_refused_for_majority_and_lag_force_stop_and_isolate(tc: TenantCluster) -> None:
    c = tc
    c.start_rs(**RS_FLAGS)
    addrs = [c.start_agent(f"z{i}") for i in (1, 2, 3)]
    a1, a2, a3 = addrs
    c.ok(
        f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{a1}', ZONE 'z2' SERVER '{a2}', "
        f"REGION 'r2' ZONE 'z3' SERVER '{a3}'"
    )
    wait_until(lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs), 20, message="ACTIVE")
    c.make_tenant(ls_count=1, primary="z1")
    wait_until(lambda: c.leaders_on(a1) == 1, 15, message="leader in z1")

    # ISOLATE: region r1 = z1 + z2. With z2 stopped, z1 is its last running zone.
    c.ok("ALTER SYSTEM STOP ZONE 'z2'")
    resp = c.sql(f"ALTER SYSTEM ISOLATE SERVER '{a1}'")
    assert resp.error.name == "OB_OP_NOT_ALLOW" and "primary region r1" in resp.error.message
    c.ok("ALTER SYSTEM START ZONE 'z2'")

    # A follower that stops replicating falls out of sync: STOP of another member is refused
    # (after retrying stop_server_check_timeout), FORCE STOP is not.
    (c.data_dir(a2) / "FAULT_REPLICATION_STOP").touch()

    def lag_us() -> int:
        lead, follower = replica_report(a1)[(1002, 1001)], replica_report(a2)[(1002, 1001)]
        return int(lead.log_end_ts - follower.log_end_ts)

    wait_until(lambda: lag_us() > 1_500_000, 15, message="a2 over 1.5 s behind")
    resp = c.sql(f"ALTER SYSTEM STOP SERVER '{a3}'")
    assert resp.error.name == "OB_OP_NOT_ALLOW", resp.error.message
    assert "log in sync" in resp.error.message and a2 in resp.error.message
    assert c.stop_time(a3) == 0
    c.ok(f"ALTER SYSTEM FORCE STOP SERVER '{a3}'")
    assert c.stop_time(a3) > 0
    c.ok(f"ALTER SYSTEM START SERVER '{a3}'")
    (c.data_dir(a2) / "FAULT_REPLICATION_STOP").unlink()

    # a2 dies: stopping a3 would leave 1 of 3 members, even with FORCE.
    c.agents[a2].kill()
    wait_until(lambda: c.statuses().get(a2) == "INACTIVE", 15, message="a2 INACTIVE")
    resp = c.sql(f"ALTER SYSTEM FORCE STOP SERVER '{a3}'")
    assert resp.error.name == "OB_OP_NOT_ALLOW"
    assert "would keep 1 of 3 members" in resp.error.message
    assert c.stop_time(a3) == 0
