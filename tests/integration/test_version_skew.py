"""The version skew rule with real processes: an RS of this release (0.2.0) on SQLite, a
bootstrapped agent, and one agent restarted as a newer, an older and this release
(``OB_TEST_REPORTED_RELEASE``, the hidden override of the release a process reports). The
refused ones get ``OB_VERSION_NOT_MATCH`` naming both releases and the rule in their log, an
event and a counter, and nothing else changes; the right one becomes ACTIVE. Then the
stopping notice (gated on the cluster version, which BOOTSTRAP set to 0.2.0) reaches the
event history on a clean stop, and END ROLLING UPGRADE has nothing to raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from obcommon import releases
from tests.integration.test_cluster import AGENT_FLAGS, Cluster
from tests.support.cluster import Proc, ProcSet, agent_cmd, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def start_agent(c: Cluster, addr: str, release: str | None) -> Proc:
    env = {releases.RELEASE_OVERRIDE_ENV: release} if release else {}
    p = c.procs.start(
        agent_cmd(c.rs_addr, addr, free_port(), "z1", c.tmp / "agent2", **AGENT_FLAGS),
        f"agent2-{release or 'current'}",
        env=env,
    )
    p.wait_healthy(addr, timeout_s=30)
    return p


def events(c: Cluster, event: str) -> list[list[object]]:
    return c.ok(
        "SELECT value1, value3, value4, value5, extra_info FROM "
        f"__all_rootservice_event_history WHERE event = '{event}' ORDER BY id"
    )


def test_agents_outside_the_skew_rule_are_refused_a_right_one_accepted(
    procs: ProcSet, tmp_path: Path
) -> None:
    c = Cluster(procs, tmp_path, f"sqlite:///{tmp_path}/rs.db")
    c.start_rs()
    [a1] = c.bootstrap(1)
    current = str(releases.current())
    assert c.ok("SELECT BUILD_VERSION FROM DBA_OB_SERVERS") == [[f"{current}_ob-rootservice-py"]]
    assert c.ok("SELECT SVR_PORT, BUILD_VERSION FROM DBA_OB_ROOTSERVICES") == [
        [int(c.rs_addr.rsplit(":", 1)[1]), current]
    ]
    param = c.ok("SHOW PARAMETERS LIKE 'min_observer_version'")
    # OceanBase's SHOW PARAMETERS columns: name 5th, value 7th.
    # In OceanBase's four numbers (0.2.0 -> 0.2.0.0).
    assert [param[0][4], param[0][6]] == ["min_observer_version", f"{current}.0"]

    addr = f"127.0.0.1:{free_port()}"
    cases = [
        ("0.3.0", "ahead of RS leader release 0.2.0"),
        ("0.1.0", "below the cluster version 0.2.0"),
    ]
    agent = start_agent(c, addr, cases[0][0])
    c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE 'z1'")
    for i, (release, reason) in enumerate(cases):
        if i:
            agent = start_agent(c, addr, release)
        wait_until(
            lambda a=agent: "OB_VERSION_NOT_MATCH" in a.log_text(),
            30,
            message=f"agent of {release} refused",
        )
        line = next(ln for ln in agent.log_text().splitlines() if "OB_VERSION_NOT_MATCH" in ln)
        for word in (f"release {release}", "release 0.2.0", reason, releases.SKEW_RULE):
            assert word in line, line
        wait_until(lambda n=i: len(events(c, "version_refused")) > n, 30, message="event")
        assert events(c, "version_refused")[i][:4] == [addr, release, current, current]
        assert c.statuses()[addr] == "INACTIVE"
        port = addr.rsplit(":", 1)[1]
        assert c.ok(f"SELECT build_version FROM __all_server WHERE svr_port = {port}") == [[""]]
        agent.stop()
    assert c.metrics()["lease_version_refused_total"] >= len(cases)
    assert len(events(c, "version_refused")) == len(cases)  # once per agent and release

    agent = start_agent(c, addr, None)
    wait_until(lambda: c.statuses().get(addr) == "ACTIVE", 30, message="current agent ACTIVE")
    assert "OB_VERSION_NOT_MATCH" not in agent.log_text()
    assert c.statuses()[a1] == "ACTIVE"

    # The gated stopping notice: the cluster version is 0.2.0, so a clean stop says so.
    assert agent.stop() == 0
    wait_until(lambda: events(c, "server_stopping"), 30, message="server_stopping event")
    assert [e[0] for e in events(c, "server_stopping")] == [addr]
    assert "told" in agent.log_text() and "is stopping" in agent.log_text()

    resp = c.sql("ALTER SYSTEM END ROLLING UPGRADE")
    assert resp.error.code == 0 and f"{current} already" in resp.info
