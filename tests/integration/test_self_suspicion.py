"""Self-suspicion of a real leader RS: a partition between the RS and most
agents while it keeps its database lease. One RS on SQLite, 8 real agents in 3 zones, a
short server_permanent_offline_time; 6 agents are SIGSTOPped (their connections stay open
but silent): the RS marks their leases expired, suspects itself (event, gauge) and declares
none permanently offline past the deadline; after SIGCONT they come back ACTIVE and the
suspicion ends. Then the other side of the boundary in the same cluster: one agent stopped
for good still goes permanently offline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.test_cluster import AGENT_FLAGS, Cluster
from tests.support.cluster import ProcSet, agent_cmd, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

OFFLINE_S = 6


def root_service_events(c: Cluster) -> list[str]:
    rows = c.ok(
        "SELECT event FROM __all_rootservice_event_history WHERE module = 'root_service' "
        "ORDER BY gmt_create"
    )
    return [r[0] for r in rows]


def permanent_offline(c: Cluster) -> set[str]:
    rows = c.ok(
        "SELECT value1 FROM __all_rootservice_event_history WHERE event = 'permanent_offline'"
    )
    return {r[0] for r in rows}


def test_partition_from_most_agents_holds_permanent_offline(procs: ProcSet, tmp_path: Path) -> None:
    c = Cluster(procs, tmp_path, f"sqlite:///{tmp_path}/rs.db")
    # The local planner: a permanent offline wakes the lost-replica checker, no JVM here.
    c.start_rs(balancer_planner="local")
    addrs = c.bootstrap(3)
    # Five more agents started together (one at a time is ~5 s each on a loaded machine).
    more = {f"127.0.0.1:{free_port()}": f"z{i % 3 + 1}" for i in range(5)}
    started = []
    for a, zone in more.items():
        c.zones[a] = zone
        name = f"agent-{a.rsplit(':', 1)[1]}"
        cmd = agent_cmd(c.rs_addr, a, free_port(), zone, tmp_path / name, **AGENT_FLAGS)
        started.append((a, c.procs.start(cmd, name)))
    for a, p in started:
        p.wait_healthy(a, timeout_s=30)
        c.agents[a] = p
        c.ok(f"ALTER SYSTEM ADD SERVER '{a}' ZONE '{more[a]}'")
        addrs.append(a)
    wait_until(lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs), 30, message="8 ACTIVE")
    c.ok(f"ALTER SYSTEM SET server_permanent_offline_time = '{OFFLINE_S}s'")
    assert c.metrics()["self_suspect"] is False

    silent, heard = addrs[:6], addrs[6:]
    for a in silent:
        c.agents[a].pause()
    paused_at = time.monotonic()
    try:
        wait_until(lambda: c.metrics()["self_suspect"], 20, message="RS suspects itself")
        # The event goes through the persistence queue (flushed every 100 ms): it follows
        # the gauge, it is not written with it.
        wait_until(
            lambda: "self_suspect" in root_service_events(c), 10, message="event self_suspect"
        )
        wait_until(
            lambda: all(c.statuses()[a] == "INACTIVE" for a in silent),
            10,
            message="the silent servers INACTIVE",
        )
        assert all(c.statuses()[a] == "ACTIVE" for a in heard)
        # Well past the permanent-offline deadline (last heartbeat + 6 s): still held.
        time.sleep(max(0.0, paused_at + OFFLINE_S + 3 - time.monotonic()))
        assert c.metrics()["self_suspect"] is True
        assert not permanent_offline(c) & set(silent)
    finally:
        for a in silent:
            c.agents[a].resume()
    wait_until(lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs), 30, message="all back")
    wait_until(lambda: not c.metrics()["self_suspect"], 10, message="suspicion ends")
    wait_until(
        lambda: root_service_events(c)[-2:] == ["self_suspect", "self_suspect_end"],
        10,
        message="events self_suspect then self_suspect_end",
    )
    assert not permanent_offline(c)

    # The other side: one server lost for good goes permanently offline as usual.
    lost = addrs[0]
    c.agents[lost].kill()
    wait_until(
        lambda: lost in permanent_offline(c),
        OFFLINE_S + 15,
        message="a lone lost server permanently offline",
    )
    assert c.metrics()["self_suspect"] is False
    assert root_service_events(c).count("self_suspect") == 1
