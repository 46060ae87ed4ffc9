"""load_server_manager (SPEC.md section 6): what a load makes of the table rows. Unit tests on an
in-process RS with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from rootservice.app import RootService
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from tests.support.harness import (
    LEASE,
    OFFLINE,
    SEEDED,
    flush,
    heartbeat_all,
    make_rs,
    server_row,
)

A, ZA = SEEDED[0]  # 127.0.0.1:3001 in z1
B, ZB = SEEDED[1]  # z2
C, ZC = SEEDED[2]  # z3
D, ZD = SEEDED[3]  # z1


def status(rs: RootService, server: str) -> HeartbeatStatus:
    s = rs.whitelist.get(server)
    assert s is not None
    return s.hb_status


def test_load_never_makes_a_server_alive(rs: RootService) -> None:
    for server, _ in SEEDED:
        assert status(rs, server) is HeartbeatStatus.LEASE_EXPIRED
    assert rs.whitelist.counts()["alive"] == 0
    flush(rs)
    assert server_row(rs, A)["status"] == "INACTIVE"


def test_load_turns_old_offline_rows_permanent_offline(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    now = rs.clock.now_us()
    with rs.store.engine.begin() as conn:
        import sqlalchemy as sa

        # Boundary of SPEC.md section 3: now - last_offline_time >= offline - lease.
        conn.execute(
            sa.text(
                "UPDATE __all_server SET last_offline_time = :t, status = 'inactive' WHERE svr_port = 3001"
            ),
            {"t": now - (OFFLINE - LEASE)},
        )
        conn.execute(
            sa.text("UPDATE __all_server SET last_offline_time = :t WHERE svr_port = 3002"),
            {"t": now - (OFFLINE - LEASE) + 1},
        )
        conn.execute(sa.text("UPDATE __all_server SET status = 'deleting' WHERE svr_port = 3003"))
    rs.shutdown()
    rs2 = make_rs(db_url, tmp_path / "x", seed=False)
    try:
        rs2.clock.set(now)
        rs2.bootstrapped = True
        rs2.do_restart()
        assert status(rs2, A) is HeartbeatStatus.PERMANENT_OFFLINE
        assert status(rs2, B) is HeartbeatStatus.LEASE_EXPIRED
        assert rs2.whitelist.get(C).admin_status is AdminStatus.DELETING
        assert rs2.whitelist.get(C).display_status().value == "DELETING"
    finally:
        rs2.shutdown()


def test_reload_drops_servers_absent_from_the_table_and_keeps_heartbeat_state(
    rs: RootService,
) -> None:
    import sqlalchemy as sa

    heartbeat_all(rs)
    flush(rs)
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM __all_server WHERE svr_port = 3004"))
        conn.execute(sa.text("UPDATE __all_server SET stop_time = 99 WHERE svr_port = 3001"))
    rs.reload_server()
    assert rs.whitelist.get(D) is None
    a = rs.whitelist.get(A)
    assert (
        a.stop_time == 99
        and a.hb_status is HeartbeatStatus.ALIVE
        and a.resource_info.cpu_total == 2
    )
