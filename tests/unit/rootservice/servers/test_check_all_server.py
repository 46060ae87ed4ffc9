"""CheckAllServerTask (SPEC.md section 6). Unit tests on an in-process RS with a FakeClock, on
SQLite and PostgreSQL."""

from __future__ import annotations

from rootservice.app import RootService
from tests.support.harness import (
    SEEDED,
    flush,
    heartbeat_all,
    server_row,
)

A, ZA = SEEDED[0]  # 127.0.0.1:3001 in z1
B, ZB = SEEDED[1]  # z2
C, ZC = SEEDED[2]  # z3
D, ZD = SEEDED[3]  # z1


def test_check_all_server_repairs_the_table(rs: RootService) -> None:
    import sqlalchemy as sa

    heartbeat_all(rs)
    flush(rs)
    assert rs.check_all_server.run_once() == 0
    with rs.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE __all_server SET status = 'INACTIVE', stop_time = 42 WHERE svr_port = 3001"
            )
        )
        conn.execute(sa.text("UPDATE __all_server SET zone = 'zz' WHERE svr_port = 3002"))
    # One row per page: pagination must visit every row exactly once.
    assert rs.check_all_server.run_once(page_size=1) == 2
    flush(rs)
    assert (server_row(rs, A)["status"], server_row(rs, A)["stop_time"]) == ("ACTIVE", 0)
    assert server_row(rs, B)["zone"] == ZB
