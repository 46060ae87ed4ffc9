"""Integration test of the agents' parameters by zone and server: real ``rootservice`` and
``observer-agent`` processes on SQLite and PostgreSQL. A statement with one bad item changes
nothing; a per-zone ``syslog_level`` and a per-server copy limit reach the running agents
with their next lease answers (no restart), and GV$OB_PARAMETERS shows each server's value."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_cluster import Cluster
from tests.support.cluster import ProcSet, wait_until

pytestmark = pytest.mark.integration

APPLIED_DEBUG = "parameter syslog_level = DEBUG from the RS applied"
APPLIED_INFO = "parameter syslog_level = INFO from the RS applied"
DEBUG_LINE = "lease renewed by"


@pytest.fixture
def cluster(procs: ProcSet, tmp_path: Any, db_url: str) -> Cluster:
    return Cluster(procs, tmp_path, db_url)


def values(c: Cluster, name: str) -> dict[str, tuple[str, str]]:
    rows = c.ok(
        "SELECT SVR_IP, SVR_PORT, VALUE, ISDEFAULT FROM GV$OB_PARAMETERS "
        f"WHERE NAME = '{name}' ORDER BY SVR_PORT"
    )
    return {f"{ip}:{port}": (value, isdefault) for ip, port, value, isdefault in rows}


def test_zone_and_server_parameters_reach_running_agents(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    a1, a2, a3 = c.bootstrap()  # z1, z2, z3
    a4 = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(a4) == "ACTIVE", 20, message="a4 ACTIVE")
    pids = {a: p.pid for a, p in c.agents.items()}
    everyone = {a: ("INFO", "YES") for a in (a1, a2, a3, a4)}
    assert values(c, "syslog_level") == everyone

    # One bad item (a word syslog_level does not have) refuses the whole statement.
    resp = c.sql(
        f"ALTER SYSTEM SET syslog_level = 'DEBUG' ZONE 'z1', "
        f"migration_max_bytes_per_second = '2M' SERVER '{a2}', syslog_level = 'LOUD' ZONE 'z3'"
    )
    assert resp.error.name == "OB_INVALID_CONFIG" and "LOUD" in resp.error.message
    # A cluster parameter with TENANT: no tenant parameter has that name.
    resp = c.sql("ALTER SYSTEM SET syslog_level = 'DEBUG' TENANT = sys")
    assert resp.error.name == "OB_ERR_SYS_CONFIG_UNKNOWN"
    assert values(c, "syslog_level") == everyone
    assert set(values(c, "migration_max_bytes_per_second").values()) == {("0", "YES")}

    c.ok(
        f"ALTER SYSTEM SET syslog_level = 'DEBUG' ZONE 'z1', "
        f"migration_max_bytes_per_second = '2M' SERVER '{a2}'"
    )
    assert values(c, "syslog_level") == {
        a1: ("DEBUG", "NO"),
        a2: ("INFO", "YES"),
        a3: ("INFO", "YES"),
        a4: ("DEBUG", "NO"),
    }
    assert values(c, "migration_max_bytes_per_second")[a2] == ("2M", "NO")
    # Both z1 agents take DEBUG and log at it; a2 takes its copy limit from an answer sent
    # after the statement, and that answer brought no log level.
    for a in (a1, a4):
        wait_until(
            lambda a=a: (
                DEBUG_LINE in c.agents[a].log_text().split(APPLIED_DEBUG, 1)[-1]
                and APPLIED_DEBUG in c.agents[a].log_text()
            ),
            20,
            message=f"{a} logging at DEBUG",
        )
    wait_until(
        lambda: "copy bandwidth limit from RS" in c.agents[a2].log_text(),
        20,
        message="a2 took its copy limit",
    )
    for a in (a2, a3):
        text = c.agents[a].log_text()
        assert "syslog_level" not in text and DEBUG_LINE not in text, a

    # The server's own value wins over its zone's.
    c.ok(f"ALTER SYSTEM SET syslog_level = 'INFO' SERVER = '{a4}'")
    wait_until(lambda: APPLIED_INFO in c.agents[a4].log_text(), 20, message="a4 back at INFO")
    assert values(c, "syslog_level")[a4] == ("INFO", "YES")
    assert values(c, "syslog_level")[a1] == ("DEBUG", "NO")
    # Taken by the running processes: none was restarted.
    assert {a: p.pid for a, p in c.agents.items()} == pids
    assert all(p.alive for p in c.agents.values())
