"""load_server_manager (docs/design/servers.md#memory-and-the-table): what a load makes of the table rows. Unit tests on an
in-process RS with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.db import server_repo
from rootservice.servers.loader import TakeOfficeGrace, table_value
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from tests.support.harness import (
    LEASE,
    OFFLINE,
    SEEDED,
    ZA,
    A,
    B,
    C,
    D,
    flush,
    hb_status,
    heartbeat_all,
    make_rs,
    server_row,
)
from tests.support.server_parts import make_parts, seed


def test_load_never_makes_a_server_alive(rs: RootService) -> None:
    for server, _ in SEEDED:
        assert hb_status(rs, server) is HeartbeatStatus.LEASE_EXPIRED
    assert rs.whitelist.counts()["alive"] == 0
    flush(rs)
    assert server_row(rs, A)["status"] == "INACTIVE"


def test_load_turns_old_offline_rows_permanent_offline(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    now = rs.clock.now_us()
    with rs.store.engine.begin() as conn:
        import sqlalchemy as sa

        # Boundary of docs/design/servers.md#the-three-statuses: now - last_offline_time >= offline - lease.
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
        rs2.identity.bootstrapped = True
        rs2.office.do_restart()
        assert hb_status(rs2, A) is HeartbeatStatus.PERMANENT_OFFLINE
        assert hb_status(rs2, B) is HeartbeatStatus.LEASE_EXPIRED
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
    rs.server_loader.load(take_office=False)
    assert rs.whitelist.get(D) is None
    a = rs.whitelist.get(A)
    assert (
        a.stop_time == 99
        and a.hb_status is HeartbeatStatus.ALIVE
        and a.resource_info.cpu_total == 2
    )


# --- built from its collaborators, without RootService ------------------------------------


def test_loader_alone_takes_office_with_candidates_and_marks_with_rootserver(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    # A's row says alive (last_offline_time 0): a take-office load keeps it as a candidate.
    p.whitelist.clear()
    p.persist.clear()
    with p.store.txn() as conn:
        row = server_repo.load_servers(conn)[0]
        row["last_offline_time"] = 0
        server_repo.update_servers(conn, [row], p.clock.now_us())
    p.identity.self_server = B
    p.loader.load(take_office=True)
    assert p.grace.candidates == {A}
    assert p.grace.no_expire_until == p.clock.now_us() + LEASE
    assert p.grace.no_expire_until_mono == p.clock.monotonic_us() + LEASE
    assert p.whitelist.get(A).hb_status is HeartbeatStatus.LEASE_EXPIRED
    assert p.whitelist.get(B).with_rootserver and not p.whitelist.get(A).with_rootserver
    assert p.zones.exists(ZA) and p.whitelist.counts()["servers"] == len(SEEDED)
    # B's with_rootserver differs from its row: queued; the candidate's row is left alone.
    assert B in p.persist.pending_keys() and A not in p.persist.pending_keys()
    p.loader.load(take_office=False)
    assert p.grace.candidates == {A}


def test_table_value_compares_status_case_insensitively() -> None:
    assert table_value({"status": "active"}, "status") == "ACTIVE"
    assert table_value({"zone": "z1"}, "zone") == "z1"
    grace = TakeOfficeGrace()
    grace.begin(5, {"a", "b"}, 7)
    grace.keep_only(["b", "c"])
    assert grace.candidates == {"b"} and grace.no_expire_until_mono == 5
    assert grace.no_expire_until == 7
    grace.clear()
    assert grace.candidates == set()
