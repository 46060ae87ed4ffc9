"""DRAIN SERVER on real processes: ``rootservice`` and three
``observer-agent`` processes hosting a tenant's two log streams, on both databases (every
real-process test of the maintenance statements runs on both; the row and the resumption by a new leader
are also covered by tests/unit/rootservice/servers/test_drain.py).

One cluster, in order: a healthy drain returns with no leader left on the server in
``DBA_OB_LS_LOCATIONS`` (read right after its OK) and its row FINISHED; a second drain that would leave both log streams below their majority is refused
naming them; after START SERVER the leaders come back, one member (the preferred new leader)
is killed and a drain with TIMEOUT 5s fails at its timeout naming exactly the log streams
that member belongs to, while obadmin's shell printed a progress line every second and
another session saw the DRAINING row's progress rewritten at least three times with its
2 leaders left.

Then, on PostgreSQL with two RS: the RS leader killed (SIGKILL) mid-drain, the drain
finished by the new leader.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from sql.client import execute
from sql.shell import Shell
from tests.integration.test_cluster import AGENT_FLAGS
from tests.integration.test_ha import HaCluster
from tests.integration.test_ha import ha as ha  # the fixture
from tests.integration.test_tenants import REPLICA_FLAGS, RS_FLAGS, TenantCluster
from tests.support import pki
from tests.support.cluster import ProcSet, agent_cmd, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def _drain_row(c: TenantCluster, server: str) -> list[object]:
    ip, port = server.rsplit(":", 1)
    rows = c.ok(
        "SELECT STATUS, LEADERS_LEFT, COPIES_LEFT, PROGRESS_TIME, BLOCKERS FROM "
        f"DBA_OB_SERVER_DRAINS WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
    )
    return rows[0] if rows else []


def test_drain_progress_budget_and_timeout(procs: ProcSet, tmp_path: Path, db_url: str) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**RS_FLAGS)
    a1, a2, a3 = c.bootstrap(3)
    # z3 before z2: a3 is the first choice when a1's leaders leave.
    c.make_tenant(ls_count=2, primary="z1;z3;z2")
    wait_until(lambda: c.leaders_on(a1) == 2, 30, message="both leaders on a1")

    # 1. A healthy drain: no leader left on a1 in DBA_OB_LS_LOCATIONS when it returns (the
    #    very next read, no waiting: the drain answers once the view agrees).
    c.ok(f"ALTER SYSTEM DRAIN SERVER '{a1}' TIMEOUT 30s")
    status, leaders, copies, _, blockers = _drain_row(c, a1)
    assert (status, leaders, copies, blockers) == ("FINISHED", 0, 0, "")
    assert c.stop_time(a1) > 0
    assert c.leaders_on(a1) == 0

    # 2. The budget: a1 drained and a2 too would leave a3 alone in both log streams.
    resp = c.sql(f"ALTER SYSTEM DRAIN SERVER '{a2}'")
    assert resp.error.name == "OB_OP_NOT_ALLOW", resp.error.message
    assert "LS 1001 (tenant 1002)" in resp.error.message
    assert "LS 1002 (tenant 1002)" in resp.error.message
    assert c.stop_time(a2) == 0

    # 3. Back to a1; a3 (the preferred new leader) dies; the drain cannot finish.
    c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
    wait_until(lambda: c.leaders_on(a1) == 2, 30, message="leaders back on a1")
    #    Another session reads the progress row while the drain waits.
    c.agents[a3].kill()
    seen: list[list[object]] = []
    done = threading.Event()

    def watch() -> None:
        for _ in range(1000):
            if done.is_set():
                return
            row = _drain_row(c, a1)
            if row:
                seen.append(row)
            done.wait(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, err = io.StringIO(), io.StringIO()
    shell = Shell([c.rs_addr], "table", 60, out, err, pki.credentials())
    try:
        assert not shell.run_one(f"ALTER SYSTEM DRAIN SERVER '{a1}' TIMEOUT 5s")
    finally:
        done.set()
        watcher.join()
    # The DRAINING row was seen, its progress rewritten while the leaders stayed: the
    # periodic write moved PROGRESS_TIME (tests/unit/rootservice/servers/test_drain.py
    # checks its period on a fake clock). (-1, -1): the row as the statement wrote it,
    # before the first round counted. One LS may show 1 leader left for a moment: the RS
    # does not know a3 is dead until its lease expires, so a switch to it can be in
    # flight (a1 resigned, a3 unreachable, a1 reinstated) when a round counts - a
    # clean-clone run saw {(1, 0), (2, 0)}. Never 0: no leader can leave.
    draining = [r for r in seen if r[0] == "DRAINING" and r[1] != -1]
    assert draining, seen
    assert {(r[1], r[2]) for r in draining} <= {(1, 0), (2, 0)}, draining
    assert len({r[3] for r in draining if r[1] == 2}) >= 3, draining
    text = err.getvalue()
    assert "OB_WAIT_LEADER_SWITCH_TIMEOUT" in text or "4652" in text, text
    assert "LS 1001 (tenant 1002)" in text and "LS 1002 (tenant 1002)" in text, text
    progress = [line for line in text.splitlines() if line.startswith(f"drain {a1} DRAINING")]
    assert len(progress) >= 3, text
    status, leaders, _, _, blockers = _drain_row(c, a1)
    assert status == "TIMEOUT" and leaders == 2 and "LS 1001" in str(blockers)


def test_rs_killed_mid_drain_the_new_leader_finishes_it(ha: HaCluster) -> None:
    """Two RS on PostgreSQL. The preferred new leader a3 is down, so the drain of a1 waits;
    the RS leader is killed with SIGKILL mid-drain; a3 comes back and the new RS leader,
    resuming the DRAINING row with its deadline, finishes the drain."""
    c = ha
    c.start_all_rs(**RS_FLAGS)
    old = c.wait_leader()
    new = next(a for a in c.rs_addrs if a != old)
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    a1, a2, a3 = addrs

    def agent(zone: str, addr: str, run: int = 0) -> None:
        name = f"agent-{addr.rsplit(':', 1)[1]}"
        flags = {**AGENT_FLAGS, **REPLICA_FLAGS}
        p = c.procs.start(
            agent_cmd(c.rs_addrs, addr, free_port(), zone, c.tmp / name, **flags), f"{name}-{run}"
        )
        p.wait_healthy(addr, timeout_s=30)
        c.agents[addr] = p

    for i, a in enumerate(addrs, start=1):
        agent(f"z{i}", a)
    items = ", ".join(f"ZONE 'z{i}' SERVER '{a}'" for i, a in enumerate(addrs, start=1))
    c.ok(f"ALTER SYSTEM BOOTSTRAP REGION 'r1' {items}")
    wait_until(lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs), 20, message="ACTIVE")
    c.ok("CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
    c.ok("CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    c.ok("CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE 'z1;z3;z2', LS_COUNT 2")

    def leaders_on(server: str) -> int:
        ip, port = server.rsplit(":", 1)
        rows = c.ok(
            "SELECT COUNT(*) FROM DBA_OB_LS_LOCATIONS WHERE ROLE = 'LEADER' AND "
            f"SVR_IP = '{ip}' AND SVR_PORT = {port}"
        )
        return int(rows[0][0])

    def row() -> tuple[object, ...]:
        ip, port = a1.rsplit(":", 1)
        got = c.db(
            "SELECT status, leaders_left, rs_svr FROM __all_server_drain "
            "WHERE svr_ip = :ip AND svr_port = :port",
            ip=ip,
            port=int(port),
        )
        return got[0] if got else ()

    wait_until(lambda: leaders_on(a1) == 2, 30, message="both leaders on a1")
    c.agents[a3].kill()
    answers: list[object] = []
    stmt = threading.Thread(
        target=lambda: answers.append(
            execute([old], f"ALTER SYSTEM DRAIN SERVER '{a1}' TIMEOUT 60s", 70, pki.credentials())
        )
    )
    stmt.start()
    wait_until(lambda: row()[:2] == ("DRAINING", 2), 20, message="drain waiting on a1's leaders")
    c.rs[old].kill()
    c.wait_full_service(new)
    agent("z3", a3, run=1)
    wait_until(lambda: row()[0] == "FINISHED", 40, message="drain finished by the new leader")
    assert row() == ("FINISHED", 0, new)
    # FINISHED is written once the view agrees: no waiting for it.
    assert leaders_on(a1) == 0
    stmt.join(75)
    # The old leader's client lost its statement with the process.
    assert answers and answers[0].error.code != 0


def test_maintenance_window_holds_the_permanent_offline_clock(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    """STOP SERVER ... FOR MAINTENANCE 5s with ``server_permanent_offline_time`` 4s and the
    agent killed at once: INACTIVE within the window but neither permanently offline nor
    rebuilt there; at the end the event says the agent is down, and only then does the
    permanent-offline clock run (without the window it would have fired inside it)."""
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(
        **RS_FLAGS,
        server_permanent_offline_time="4s",
        balancer_planner="local",
        balancer_interval="1s",
        lost_replica_check_interval="1s",
    )
    a1, _, _ = c.bootstrap(3)
    c.make_tenant(ls_count=1, primary="z2")
    ip, port = a1.rsplit(":", 1)

    def events() -> list[tuple[int, str]]:
        return [
            (int(i), str(e))
            for i, e, v in c.ok(
                "SELECT id, event, value1 FROM __all_rootservice_event_history WHERE event IN "
                "('maintenance_end', 'permanent_offline', 'rebuild_replica', 'migrate_replica', "
                "'stop_server_for_maintenance') ORDER BY id"
            )
            if v == a1 or e in ("rebuild_replica", "migrate_replica")
        ]

    c.ok(f"ALTER SYSTEM STOP SERVER '{a1}' FOR MAINTENANCE 5s")
    [[end]] = c.ok(
        f"SELECT MAINTENANCE_END_TIME FROM DBA_OB_SERVERS WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
    )
    assert end is not None
    c.agents[a1].kill()
    wait_until(lambda: c.statuses()[a1] == "INACTIVE", 15, message="a1 INACTIVE")
    # Inside the window: nothing but the statement's own event, until the window ends.
    wait_until(lambda: any(e == "maintenance_end" for _, e in events()), 30, message="window over")
    ended = events()
    assert [e for _, e in ended] == ["stop_server_for_maintenance", "maintenance_end"], ended
    [[result]] = c.ok(
        "SELECT value3 FROM __all_rootservice_event_history WHERE event = 'maintenance_end'"
    )
    assert str(result).startswith("agent_down"), result
    # After the window the clock runs: permanently offline 4 s of downtime later.
    wait_until(
        lambda: any(e == "permanent_offline" for _, e in events()), 30, message="permanent offline"
    )
    [[maint_end]] = c.ok(
        f"SELECT MAINTENANCE_END_TIME FROM DBA_OB_SERVERS WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
    )
    assert maint_end is None and c.stop_time(a1) > 0


def test_zone_maintenance_ends_by_itself(procs: ProcSet, tmp_path: Path, db_url: str) -> None:
    """STOP ZONE ... FOR MAINTENANCE 3s with the zone's agent heartbeating throughout: the
    zone is stopped and its server carries the window's end; the leader leaves it at the
    statement; at the window's end the ticker ends the server's window (event
    ``maintenance_end`` ``started``) and starts the zone, with nobody saying START, and the
    leader, whose primary zone it is, comes back."""
    c = TenantCluster(procs, tmp_path, db_url)
    c.start_rs(**RS_FLAGS)
    _, _, a3 = c.bootstrap(3)
    c.make_tenant(ls_count=1, primary="z3")
    wait_until(lambda: c.leaders_on(a3) == 1, 30, message="the leader in z3")
    ip, port = a3.rsplit(":", 1)

    def zone_status() -> str:
        [[status]] = c.ok("SELECT status FROM DBA_OB_ZONES WHERE zone = 'z3'")
        return str(status)

    def window_end() -> object:
        [[end]] = c.ok(
            "SELECT MAINTENANCE_END_TIME FROM DBA_OB_SERVERS "
            f"WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
        )
        return end

    c.ok("ALTER SYSTEM STOP ZONE 'z3' FOR MAINTENANCE 3s")
    # The zone is stopped, not its server (STOP ZONE leaves ``stop_time`` alone); the window's
    # end is on the server.
    assert zone_status() == "INACTIVE" and window_end() is not None
    assert c.leaders_on(a3) == 0
    wait_until(lambda: zone_status() == "ACTIVE", 20, message="z3 started at the window's end")
    assert window_end() is None and c.stop_time(a3) == 0
    [[result]] = c.ok(
        "SELECT value3 FROM __all_rootservice_event_history WHERE event = 'maintenance_end' "
        f"AND value1 = '{a3}'"
    )
    assert str(result).startswith("started"), result
    wait_until(lambda: c.leaders_on(a3) == 1, 30, message="the leader back in z3")
