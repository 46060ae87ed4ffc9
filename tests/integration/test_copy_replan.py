"""A copy stalled at its destination finishes elsewhere ("Done when": with the
agent's "stall copy" fault flag set, a stalled copy finishes elsewhere), with real processes:
``rootservice`` on both databases (the re-plan's unit move is a fenced transaction; the pandas
plans: the planner plays no part in it) and five ``observer-agent`` processes, z1 with two spare servers, one LS in z1/z2/z3,
``agent_lag_timeout`` 2 s.

Both spares receive ``FAULT_COPY_STALL`` before DELETE SERVER of z1's server; once the unit
plan has picked one of them (``migrate_unit``), the other's flag is removed. The copy to the
picked one stalls (``copy_stalled`` after 4 s), is sent again from another member, stalls
again, and the RS re-plans the unit to the other spare (``copy_replanned``): the job reaches
SUCCESS with the replica in service there and nothing left on the stalled server. Before the
re-plan the copy was resent to the same stalled destination for ever and the job never ended.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_delete_server import job
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support.cluster import ProcSet, wait_until

pytestmark = pytest.mark.integration

KEY = (1002, 1001)


def _events(c: TenantCluster, event: str) -> list[list[object]]:
    return c.ok(
        "SELECT value1, value2, value3, value4, value5, value6 "
        f"FROM __all_rootservice_event_history WHERE event = '{event}' ORDER BY id"
    )


def test_a_copy_stalled_at_its_destination_finishes_on_another_server(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(
        **RS_FLAGS,
        agent_lag_timeout="2s",
        balancer_interval="1s",
        balancer_planner="local",
    )
    z1, _, _ = c.bootstrap(3)
    spares = [c.start_agent("z1") for _ in range(2)]
    for s in spares:
        c.ok(f"ALTER SYSTEM ADD SERVER '{s}' ZONE 'z1'")
        (c.data_dir(s) / "FAULT_COPY_STALL").touch()
    wait_until(
        lambda: all(c.statuses().get(s) == "ACTIVE" for s in spares), 15, message="spares ACTIVE"
    )
    c.make_tenant(ls_count=1)
    wait_until(lambda: c.leaders_on(z1) == 1, 30, message="the LS led from z1")
    c.ok(f"ALTER SYSTEM DELETE SERVER '{z1}'")
    wait_until(lambda: _events(c, "migrate_unit"), 30, message="the unit plan")
    [[_, _, stalled, _, _, _]] = _events(c, "migrate_unit")
    [other] = [s for s in spares if s != stalled]
    (c.data_dir(other) / "FAULT_COPY_STALL").unlink()

    wait_until(lambda: job(c, z1)["status"] == "SUCCESS", 60, message="DELETE SERVER done")
    [[unit, came_from, went_to, source, ls, reason]] = _events(c, "copy_replanned")
    assert (came_from, went_to, source, ls) == (stalled, other, z1, "1002.1001"), reason
    assert "again after a resend from another member" in str(reason)
    # Twice (a third only when the round that re-plans came late): first resent, then moved.
    stalls = [e[2] for e in _events(c, "copy_stalled")]
    assert len(stalls) >= 2 and set(stalls) == {stalled}, stalls
    port = int(other.rsplit(":", 1)[1])
    assert c.ok("SELECT svr_port, migrate_from_svr_ip FROM DBA_OB_UNITS WHERE zone = 'z1'") == [
        [port, None]
    ]
    assert replica_report(other)[KEY].in_service
    wait_until(lambda: replica_report(stalled) == {}, 15, message="the partial replica dropped")
    assert int(str(unit)) > 0
