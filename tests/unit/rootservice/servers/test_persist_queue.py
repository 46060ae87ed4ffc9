"""The persistence queue (docs/design/servers.md#memory-and-the-table). Unit tests on an in-process RS with a FakeClock, on
SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.db import lease_repo, server_repo
from rootservice.db.event_repo import Event
from rootservice.servers.status import AdminStatus
from tests.support.harness import (
    LEASE,
    SEEDED,
    ZA,
    A,
    B,
    error_name,
    events,
    flush,
    hb,
    heartbeat_all,
    server_row,
)
from tests.support.server_parts import RS_ADDR, make_parts, seed


def test_database_outage_heartbeats_continue_queue_catches_up(
    rs: RootService, tmp_path: Path
) -> None:
    from rootservice.db.engine import make_engine

    heartbeat_all(rs)
    flush(rs)
    good = rs.store.engine
    # A real unreachable database: nothing listens on 127.0.0.1:1.
    rs.store.engine = make_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_timeout_s=1
    )
    try:
        rs.clock.advance(LEASE)
        rs.heartbeats.receive_hb(hb(A, ZA, build_version="old"))
        assert rs.lease_checker.run_once() == 3  # B, C, D expire in memory
        assert rs.persist.run_once() == 0  # fails, keeps the work
        assert error_name(rs.server_admin.delete_servers, [A], None) == "OB_ERR_SYS"
        assert rs.whitelist.get(A).admin_status is AdminStatus.NORMAL
        rs.heartbeats.receive_hb(hb(A, ZA, build_version="newest"))
    finally:
        rs.store.engine.dispose()
        rs.store.engine = good
    flush(rs)
    assert server_row(rs, A)["build_version"] == "newest"
    assert server_row(rs, B)["status"] == "INACTIVE"
    assert len(events(rs, "lease_expire")) == 3


def test_event_queue_is_bounded_and_flushes_what_it_kept(rs: RootService) -> None:
    from rootservice.db.event_repo import Event
    from rootservice.servers.persist_queue import PersistQueue
    from rootservice.servers.whitelist import Whitelist

    q = PersistQueue(rs.store, rs.clock, Whitelist(), rs.metrics, max_events=3)
    for i in range(5):
        q.add_event(Event(rs.clock.now_us(), "test", f"e{i}"))
    assert q.depth() == 3 and rs.metrics.get("events_dropped_total") == 2
    assert q.run_once() == 3 and q.depth() == 0
    assert [e["event"] for e in events(rs) if e["module"] == "test"] == ["e2", "e3", "e4"]


# --- built from its collaborators, without RootService ------------------------------------


def test_queue_writes_the_current_row_and_keeps_work_after_a_failure(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    key = SEEDED[0][0]
    p.whitelist.with_server(key, lambda s: setattr(s, "build_version", "v1"))
    p.persist.mark(key)
    p.whitelist.with_server(key, lambda s: setattr(s, "build_version", "v2"))
    p.persist.add_event(Event(p.clock.now_us(), "test", "e"))
    assert p.persist.pending_keys() == {key} and p.persist.depth() == 2
    # Out of office: the fenced write is refused, nothing is lost.
    p.term.request_step_down("test")
    assert p.persist.run_once() == 0 and p.persist.depth() == 2
    assert p.metrics.get("persist_failures_total") == 1
    with engine.begin() as conn:
        old = lease_repo.read_lease(conn, lock=True)
        epoch = lease_repo.take_lease(conn, old, RS_ADDR, 0, LEASE)
    p.term.begin(epoch, p.clock.monotonic_us())
    assert p.persist.run_once() == 2 and p.persist.depth() == 0
    with engine.connect() as conn:
        rows = {f"{r['svr_ip']}:{r['svr_port']}": r for r in server_repo.load_servers(conn)}
    assert rows[key]["build_version"] == "v2"
    assert p.persist.name == "persist_queue"
    p.persist.mark(key)
    assert p.persist.clear() == 1 and p.persist.depth() == 0
