"""With real processes: kill -9 of the RS under ten agents, restart on the
same port and database. Every agent comes back (ACTIVE in ``__all_server``) within a generous
bound, and no server is shown INACTIVE meanwhile: the restarted RS's take-office grace
(rootservice/servers/loader.py ``TakeOfficeGrace``) covers servers whose agents are still
backing off (obcommon/backoff.py). How fast they come back is a benchmark
(tests/bench/agent_reconnect.py), not asserted here."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_cluster import AGENT_FLAGS, Cluster, cluster
from tests.support.cluster import agent_cmd, wait_until
from tests.support.ports import free_port

__all__ = ["cluster"]

pytestmark = pytest.mark.integration

AGENTS = 10
OUTAGE_S = 4.0  # twice the test lease (2 s): every agent's lease lapses while the RS is away


def test_agents_come_back_after_rs_kill_9_without_going_inactive(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    # Started together, then waited for: ten start-ups in a row would take most of the test.
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(AGENTS)]
    for addr in addrs:
        name = f"agent-{addr.rsplit(':', 1)[1]}"
        c.zones[addr] = "z1"
        c.agents[addr] = c.procs.start(
            agent_cmd(c.rs_addr, addr, free_port(), "z1", c.tmp / name, **AGENT_FLAGS), name
        )
    for addr in addrs:
        c.agents[addr].wait_healthy(addr, timeout_s=60)
    first, *rest = addrs
    c.ok(f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{first}'")
    for addr in rest:
        c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE 'z1'")
    wait_until(
        lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs),
        30,
        message="all servers ACTIVE",
    )

    assert c.rs is not None
    c.rs.kill()
    time.sleep(OUTAGE_S)
    c.start_rs()

    seen_inactive: set[str] = set()

    def all_back() -> bool:
        st = c.statuses()
        seen_inactive.update(a for a in addrs if st.get(a) != "ACTIVE")
        return all(st.get(a) == "ACTIVE" for a in addrs) and c.metrics()["alive"] == AGENTS

    wait_until(all_back, 30, 0.2, message="every agent back after the RS restart")
    # A while longer: past the take-office grace, nobody may expire either.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        all_back()
        time.sleep(0.2)
    assert seen_inactive == set(), f"shown INACTIVE after the RS restart: {seen_inactive}"
    for addr in addrs:
        assert c.agents[addr].alive, c.agents[addr].log_tail()
    # Agents whose lease stream broke waited a jittered fraction of the backoff's base (an
    # agent the RS had only reached by RequestHeartbeat before the kill had no stream yet).
    assert any("reconnecting in" in c.agents[a].log_text() for a in addrs)
    # Stopped together: one after the other would take ten polite stops.
    for addr in addrs:
        c.agents[addr].popen.terminate()
    for addr in addrs:
        c.agents[addr].wait(15)
