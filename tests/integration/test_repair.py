"""With real processes: a replica whose files vanish from a live agent is
rebuilt by copy (same checksum as the leader's), and an agent restarted with a wiped data
directory is refused with the message that names the fix and never becomes the old server.
SQLite and PostgreSQL."""

from __future__ import annotations

import shutil

from obcommon.proto import obrpc_pb2
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report, tc
from tests.support.cluster import wait_until

__all__ = ["tc"]

KEY = (1002, 1001)


def test_lost_replica_rebuilt_and_wiped_agent_refused(tc: TenantCluster) -> None:
    c = tc
    c.start_rs(**RS_FLAGS)
    a1, a2, a3 = c.bootstrap()
    c.make_tenant(ls_count=1)
    wait_until(lambda: len(c.locations()) == 3, 20, message="3 replicas in the meta table")
    wait_until(lambda: c.leaders_on(a1) == 1, 20, message="the leader in z1")
    leader = replica_report(a1)[KEY]
    assert leader.role == obrpc_pb2.LEADER

    # 1. The replica's directory vanishes under the running agent of a2.
    shutil.rmtree(c.data_dir(a2) / "replicas" / "1002_1001")

    def rebuild_events() -> list[list[str]]:
        return c.ok(
            "SELECT value3, value5 FROM __all_rootservice_event_history "
            "WHERE module = 'disaster_recovery' AND event = 'rebuild_replica'"
        )

    def rebuilt() -> bool:
        # The old in-memory replica is reported until the agent notices: wait for the event.
        r = replica_report(a2).get(KEY)
        return bool(rebuild_events()) and r is not None and r.in_service and not r.copy_from

    wait_until(rebuilt, 60, message="the replica on a2 rebuilt by copy")
    assert rebuild_events() == [[a2, "replica missing on live server"]]
    r = replica_report(a2)[KEY]
    assert r.data_checksum == leader.data_checksum
    assert (c.data_dir(a2) / "replicas" / "1002_1001" / "data").stat().st_size == 256 * 1024
    assert sorted(replica_report(a1)[KEY].member_list) == sorted([a1, a2, a3])
    assert c.rs is not None and "rebuilding it by copy from" in c.rs.log_text()
    assert "its files vanished" in c.agents[a2].log_text()

    # 2. a3 restarted with a wiped data directory: refused, never the old server.
    c.agents[a3].stop()
    shutil.rmtree(c.data_dir(a3))
    c.restart_agent(a3)
    again = c.agents[a3]
    wait_until(
        lambda: "has no identity (wiped?)" in again.log_text(),
        30,
        message="the wiped agent refused with the fix",
    )
    assert "OB_STATE_NOT_MATCH" in again.log_text()
    assert f"DELETE SERVER '{a3}' then ADD SERVER it again" in again.log_text()
    wait_until(lambda: c.statuses()[a3] == "INACTIVE", 30, message="a3 not ACTIVE")
    assert not (c.data_dir(a3) / "identity.json").exists()
    assert replica_report(a3) == {}
    assert c.statuses()[a3] == "INACTIVE"
