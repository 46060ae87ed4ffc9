"""ADD SERVER of an agent that was already running, on real processes and both databases.

The agent is started before the statement, so the RS refuses its lease requests
(``OB_SERVER_NOT_IN_WHITE_LIST``) and it backs off. ADD SERVER pulls one heartbeat from it
(``ObserverService.RequestHeartbeat``), which shows the server ACTIVE. The agent must then
renew its lease at once: the server stays ACTIVE lease after lease, never goes INACTIVE,
never comes back SUSPECT, and its ``start_service_time`` is set. Before the agent ended its
backoff on that request, it slept on (up to a minute): the server went INACTIVE one lease
after the ADD and came back SUSPECT when the sleep ended.

Every wait is on a condition (the agent's own counters of refused and accepted lease
renewals, read from its ``/metrics``); the order of the ADD, the first heartbeat and the
start of service is asserted from the event history and the row, never a duration.
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from tests.integration.test_cluster import AGENT_FLAGS, Cluster
from tests.support import pki
from tests.support.cluster import ProcSet, agent_cmd, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

#: Refusals before the ADD: without the fix the agent then sleeps 8 s x [0.8, 1] (heartbeat
#: 500 ms doubled four times), four of the test RS's 2 s leases.
REFUSALS = 5
#: Accepted renewals watched after the server is first ACTIVE: 16 x 500 ms is four leases.
RENEWALS = 16
NOT_IN_WHITE_LIST = "OB_SERVER_NOT_IN_WHITE_LIST"


def _agent_counters(http: str) -> tuple[int, int]:
    """``(accepted, refused as not in the whitelist)`` lease renewals, from the agent's
    ``/metrics`` over HTTPS with the test PKI's root client certificate (10 s bound)."""
    ctx = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
    d = pki.client_certs()
    ctx.load_cert_chain(d / cert_file(Role.CLIENT, "root"), d / key_file(Role.CLIENT, "root"))
    with urllib.request.urlopen(f"https://{http}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    accepted = refused = 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ob_agent_lease_renewals_accepted_total":
                accepted = int(s.value)
            elif (
                s.name == "ob_agent_lease_renewals_refused_total"
                and s.labels.get("reason") == NOT_IN_WHITE_LIST
            ):
                refused = int(s.value)
    return accepted, refused


def _server_events(c: Cluster, addr: str) -> list[tuple[str, int]]:
    """``(event, event_time)`` of the server module's events naming ``addr``, in order."""
    rows = c.ok(
        "SELECT event, event_time FROM __all_rootservice_event_history "
        f"WHERE module = 'server' AND name1 = 'server' AND value1 = '{addr}' ORDER BY id"
    )
    return [(str(e), int(t)) for e, t in rows]


def test_add_server_of_a_refused_running_agent_keeps_it_active_and_starts_service(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = Cluster(procs, tmp_path, db_url)
    c.start_rs()
    c.bootstrap(1)

    # The new agent runs before its ADD SERVER and is refused, again and again.
    addr = f"127.0.0.1:{free_port()}"
    http = f"127.0.0.1:{free_port()}"
    agent = procs.start(
        agent_cmd(
            c.rs_addr, addr, free_port(), "z1", c.data_dir(addr), http_addr=http, **AGENT_FLAGS
        ),
        "agent-new",
    )
    agent.wait_healthy(addr, timeout_s=30)
    c.agents[addr] = agent
    wait_until(
        lambda: _agent_counters(http)[1] >= REFUSALS,
        90,
        message=f"{REFUSALS} lease refusals of the agent not yet added",
        ignore=(OSError,),
    )
    assert _agent_counters(http)[0] == 0
    assert addr not in c.statuses()

    c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE 'z1'")
    port = addr.rsplit(":", 1)[1]
    row_sql = (
        "SELECT status, start_service_time, suspect_end_time FROM __all_server "
        f"WHERE svr_port = {port}"
    )
    view_sql = f"SELECT status FROM DBA_OB_SERVERS WHERE svr_port = {port}"

    def read() -> tuple[str, int, int, str]:
        [[status, start, suspect_end]] = c.ok(row_sql)
        [[shown]] = c.ok(view_sql)
        return str(status), int(start), int(suspect_end), str(shown)

    # The heartbeat ADD SERVER pulls makes the server ACTIVE (the row says INACTIVE until then).
    wait_until(lambda: read()[0] == "ACTIVE", 30, message="added server ACTIVE")
    accepted_at_active = _agent_counters(http)[0]

    # From then on, read the row and the view over the next leases: every read ACTIVE and
    # never SUSPECT, until the agent has renewed RENEWALS more times and started service.
    seen: list[tuple[str, int, int, str]] = []

    def watched() -> bool:
        seen.append(read())
        accepted = _agent_counters(http)[0]
        return accepted - accepted_at_active >= RENEWALS and seen[-1][1] != 0

    wait_until(
        watched,
        90,
        interval_s=0.1,
        message=f"{RENEWALS} renewals after ADD SERVER and start_service_time set",
    )
    transitions = [s for i, s in enumerate(seen) if i == 0 or s[0] != seen[i - 1][0]]
    assert all(s[0] == "ACTIVE" and s[3] == "ACTIVE" for s in seen), (
        f"not ACTIVE in every read after ADD SERVER (status changes: "
        f"{[(s[0], s[3]) for s in transitions]}); events {_server_events(c, addr)}"
    )
    assert all(s[2] == 0 for s in seen), f"SUSPECT after ADD SERVER: {seen}"

    # One online after the ADD and nothing else: no lease expiry, no SUSPECT.
    events = _server_events(c, addr)
    assert [e for e, _ in events] == ["add_server", "online"], events
    (_, added_at), (_, online_at) = events
    start_service_time = seen[-1][1]
    # Ordered by cause: the ADD, then the first heartbeat it pulled, then the start of
    # service (the agent starts only once a lease answer taught it its identity).
    assert added_at <= online_at <= start_service_time <= int(time.time() * 1e6)
    log = agent.log_text()
    assert "ending the backoff" in log and "start service at" in log
    assert log.index("ending the backoff") < log.index("start service at")
