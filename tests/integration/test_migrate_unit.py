"""Integration test of units moved by hand with real agents on SQLite and PostgreSQL:
ALTER SYSTEM MIGRATE UNIT to a new server of the same zone (the MIGRATE_UNIT job to SUCCESS,
the replicas copied there, data intact), then a move back cancelled mid-way (the unit stays,
the partial copies go, the job CANCELED); ALTER RESOURCE UNIT refused when it outgrows a
server; ALTER TENANT PRIMARY_ZONE moving the leaders (its job to SUCCESS). The plans are the
balancer's own (pandas, ``balancer_planner = 'local'``, as DELETE SERVER's on PostgreSQL).
Also: a partial replica that no plan wants, left on a server, is dropped by the RS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from observer_agent.fence import load_token
from tests.integration.test_delete_server import members_ok
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until
from tests.support.timescale import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FLAGS = {**RS_FLAGS, "balancer_interval": "1s", "balancer_planner": "local"}


@pytest.fixture
def tc(procs: ProcSet, tmp_path: Path, db_url: str) -> TenantCluster:
    return TenantCluster(procs, tmp_path, db_url)


def unit_row(c: TenantCluster) -> tuple[str, str | None, str]:
    """(server, migrating from or None, MANUAL_MIGRATE) of the z1 unit."""
    [(ip, port, from_ip, from_port, manual)] = c.ok(
        "SELECT svr_ip, svr_port, migrate_from_svr_ip, migrate_from_svr_port, manual_migrate "
        "FROM DBA_OB_UNITS WHERE zone = 'z1'"
    )
    return f"{ip}:{port}", (f"{from_ip}:{from_port}" if from_ip else None), manual


def job(c: TenantCluster, job_id: int) -> tuple[str, int, int | None, str]:
    [(status, progress, code, info)] = c.ok(
        "SELECT job_status, progress, result_code, extra_info FROM DBA_OB_ROOTSERVICE_JOBS "
        f"WHERE job_id = {job_id}"
    )
    return status, progress, code, info or ""


def newest_job(c: TenantCluster, job_type: str) -> int:
    return int(
        c.ok(f"SELECT max(job_id) FROM DBA_OB_ROOTSERVICE_JOBS WHERE job_type = '{job_type}'")[0][0]
    )


def test_migrate_unit_by_hand_cancel_resize_and_primary_zone(tc: TenantCluster) -> None:
    c = tc
    # 1M data files are 4 chunks of 256K: with FAULT_COPY_SLOW_MS a copy stays visible.
    c.extra_flags = {"replica_size": "1M"}
    c.start_rs(**FLAGS)
    a1, a2, a3 = c.bootstrap()
    spare = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 15, message="spare ACTIVE")
    c.make_tenant(ls_count=2)
    host, _, _ = unit_row(c)
    other = spare if host != spare else a1
    [(unit_id,)] = c.ok("SELECT unit_id FROM DBA_OB_UNITS WHERE zone = 'z1'")
    wait_until(lambda: c.leaders_on(host) == 2, 20, message="leaders in z1")
    checksum = replica_report(host)[(1002, 1001)].data_checksum

    # --- refusals: another zone, a server not in the cluster; nothing changes ----------
    assert c.error(f"ALTER SYSTEM MIGRATE UNIT {unit_id} DESTINATION '{a2}'") == (
        "OB_NOT_SUPPORTED"
    )
    assert c.error(f"ALTER SYSTEM MIGRATE UNIT {unit_id} DESTINATION '127.0.0.1:1'") == (
        "OB_ENTRY_NOT_EXIST"
    )
    assert c.error(f"ALTER SYSTEM CANCEL MIGRATE UNIT {unit_id}") == "OB_ERR_UNEXPECTED"
    assert unit_row(c) == (host, None, "NO")

    # --- 1. MIGRATE UNIT to the other z1 server: the job reaches SUCCESS ---------------
    (c.data_dir(other) / "FAULT_COPY_SLOW_MS").write_text("300")
    c.ok(f"ALTER SYSTEM MIGRATE UNIT = {unit_id} DESTINATION = '{other}'")
    first = newest_job(c, "MIGRATE_UNIT")
    assert unit_row(c) == (other, host, "YES")
    wait_until(
        lambda: any(r.copy_from for r in replica_report(other).values()),
        60,
        message="a copy to the destination under way",
    )
    wait_until(lambda: job(c, first)[0] == "SUCCESS", 120, message="MIGRATE_UNIT job SUCCESS")
    (c.data_dir(other) / "FAULT_COPY_SLOW_MS").unlink()
    assert job(c, first)[1] == 100
    assert unit_row(c) == (other, None, "NO")
    members = [other, a2, a3]
    wait_until(lambda: members_ok(c, members, [1001, 1002]), 30, message="replicas moved")
    assert replica_report(other)[(1002, 1001)].data_checksum == checksum
    wait_until(lambda: replica_report(host) == {}, 30, message="source emptied")

    # --- 2. back to the first server, cancelled while its copies crawl ---------------
    (c.data_dir(host) / "FAULT_COPY_SLOW_MS").write_text("2000")
    c.ok(f"ALTER SYSTEM MIGRATE UNIT {unit_id} DESTINATION '{host}'")
    second = newest_job(c, "MIGRATE_UNIT")
    wait_until(
        lambda: any(r.copy_from for r in replica_report(host).values()),
        60,
        message="a copy back under way",
    )
    status, progress, _, info = job(c, second)
    assert (status, progress) == ("INPROGRESS", 0), info
    c.ok(f"ALTER SYSTEM CANCEL MIGRATE UNIT {unit_id}")
    # OceanBase's reverse: on its server again, moving from the server it was going to,
    # until nothing of it is left there.
    assert unit_row(c)[0] == other
    assert job(c, second)[:3] == ("CANCELED", 0, -4072)
    left: list[object] = []

    def host_clean() -> bool:
        reported = sorted(replica_report(host))
        files = sorted(p.name for p in (c.data_dir(host) / "replicas").glob("*"))
        left[:] = [reported, files]
        return not reported and not files

    try:
        wait_until(host_clean, 30, message="partial replicas dropped, their files removed")
    except AssertionError as e:
        raise AssertionError(f"{e}; still there (reported, files): {left}") from None
    wait_until(lambda: unit_row(c) == (other, None, "NO"), 30, message="reverse move ended")
    (c.data_dir(host) / "FAULT_COPY_SLOW_MS").unlink()
    wait_until(lambda: members_ok(c, members, [1001, 1002]), 30, message="members unchanged")
    events = [e for (e,) in c.ok("SELECT event FROM __all_rootservice_event_history")]
    assert events.count("migrate_unit") == 2 and "finish_migrate_unit" in events

    # --- 3. ALTER RESOURCE UNIT: growing beyond a server refused, shrinking allowed ----
    assert c.error("ALTER RESOURCE UNIT u1 MEMORY_SIZE '1000G'") == "OB_MACHINE_RESOURCE_NOT_ENOUGH"
    c.ok("ALTER RESOURCE UNIT u1 MEMORY_SIZE '1G', LOG_DISK_SIZE '2G'")
    assert c.ok("SELECT memory_size FROM DBA_OB_UNIT_CONFIGS WHERE name = 'u1'") == [[1 << 30]]

    # --- 4. ALTER TENANT PRIMARY_ZONE: the leaders go to z2, the job ends SUCCESS ------
    c.ok("ALTER TENANT t1 SET PRIMARY_ZONE = 'z2;z1'")
    pz = newest_job(c, "ALTER_TENANT_PRIMARY_ZONE")
    wait_until(lambda: c.leaders_on(a2) == 2, 30, message="leaders in z2")
    wait_until(lambda: job(c, pz)[:2] == ("SUCCESS", 100), 30, message="primary zone job")
    assert c.ok("SELECT primary_zone FROM DBA_OB_TENANTS WHERE tenant_name = 't1'") == [["z2;z1"]]


def test_a_partial_replica_nothing_wants_is_dropped(tc: TenantCluster) -> None:
    """A copy no plan names (as a stale re-send would leave one) is dropped by the RS's
    ``partial_replica_gc`` task: the spare server of z1 is told, with the RS's own fencing
    token, to copy a log stream it is no member of; the RS drops it and says so in its event
    history. With the task removed from the leader's schedule the replica stays."""
    c = tc
    c.start_rs(**FLAGS)
    c.bootstrap()
    spare = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 15, message="spare ACTIVE")
    c.make_tenant(ls_count=1)
    host, _, _ = unit_row(c)
    key = (1002, 1001)
    wait_until(lambda: c.leaders_on(host) == 1, 20, message="the leader in z1")
    led = replica_report(host)[key]
    # Slow, so that it is still being built when the RS looks.
    (c.data_dir(spare) / "FAULT_COPY_SLOW_MS").write_text("2000")
    token = load_token(c.data_dir(spare))
    spec = obrpc_pb2.ReplicaSpec(
        tenant_id=key[0],
        ls_id=key[1],
        unit_id=led.unit_id,
        replica_type="FULL",
        member_list=list(led.member_list),
        paxos_replica_number=len(led.member_list),
        leader=led.leader,
        term=led.term,
        copy_from=host,
    )
    with pki.channel(spare, Role.RS, "127.0.0.1:1") as ch:
        resp = obrpc_pb2_grpc.ObserverServiceStub(ch).ApplyReplicas(
            obrpc_pb2.ApplyReplicasRequest(
                rs_epoch=token.epoch, rs_incarnation=token.incarnation, upsert=[spec]
            ),
            timeout=scaled(5),
        )
    assert resp.error.code == 0, resp.error
    assert key in replica_report(spare)
    wait_until(lambda: key not in replica_report(spare), 30, message="the partial replica dropped")
    # The event is queued and written by the persistence queue, after the drop.
    wait_until(
        lambda: (
            c.ok(
                "SELECT value3 FROM __all_rootservice_event_history "
                "WHERE event = 'drop_partial_replica'"
            )
            == [[spare]]
        ),
        15,
        message="the drop_partial_replica event",
    )
    wait_until(
        lambda: not list((c.data_dir(spare) / "replicas").glob("*")), 30, message="files removed"
    )
    # The member in z1 is untouched.
    assert replica_report(host)[key].in_service
