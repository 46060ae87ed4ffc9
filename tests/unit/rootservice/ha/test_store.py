"""MetaStore's bounds: ``txn``'s ``wait_s`` (a bounded transaction, its wait for the write
lock included: the audit record of a statement on a slow database, test_db_faults), and a
read made under the write lock, bounded like a fenced write so that a leader cut off from
its database does not keep every writer waiting for the engine's default 30 s per wait."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import rootservice.auth.audit as audit_mod
from obcommon.clock import FakeClock
from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.db.engine import IO_TIMEOUT_S, make_engine
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from tests.support.harness import make_rs
from tests.support.pgserver import PgServer
from tests.support.tcp_proxy import TcpProxy

LEASE_US = 1_000_000


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    try:
        yield r
    finally:
        r.shutdown()


def _held(rs: RootService) -> tuple[threading.Event, threading.Thread]:
    """Another thread holds the write lock until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with rs.store.write_lock:
            taken.set()
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(30)
    return release, t


def test_a_bounded_transaction_gives_up_on_a_held_lock_and_changes_nothing(
    rs: RootService,
) -> None:
    release, t = _held(rs)
    try:
        with pytest.raises(ObError) as e, rs.store.txn(fenced=False, wait_s=0.05):
            raise AssertionError("the body ran without the lock")
        assert e.value.name == "OB_TIMEOUT" and "busy for 0.05 s" in e.value.message
    finally:
        release.set()
        t.join(30)
    # The lock is free again and was not left taken by the refused call.
    with rs.store.txn(fenced=False, wait_s=5) as conn:
        assert conn is not None
    assert rs.store.write_lock.acquire(timeout=0)
    rs.store.write_lock.release()


def test_the_audit_record_gives_up_instead_of_holding_the_answer(
    rs: RootService, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = rs.audit.failures
    rs.audit.record("root", "127.0.0.1:1", "ALTER SYSTEM SET a = 1", "OK")
    assert rs.audit.failures == before
    monkeypatch.setattr(audit_mod, "AUDIT_WRITE_BOUND_S", 0.05)
    release, t = _held(rs)
    try:
        rs.audit.record("root", "127.0.0.1:1", "ALTER SYSTEM SET a = 2", "OK")
        assert rs.audit.failures == before + 1
    finally:
        release.set()
        t.join(30)


def _store_in_office(engine: sa.Engine, clock: FakeClock) -> MetaStore:
    """A store whose term is supervised and in office with epoch 1, its lease (1 s) renewed
    at the fake clock's monotonic 0, so trusted for another 0.8 s (the 1/5 margin)."""
    term = Term(clock, address=lambda: "127.0.0.1:1", lease_time=lambda: LEASE_US)
    term.supervise()
    term.begin(1, clock.monotonic_us())
    return MetaStore(engine, ("127.0.0.1", 1), term)


def test_a_read_is_bounded_like_a_fenced_write_only_under_the_write_lock(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        clock = FakeClock()
        store = _store_in_office(engine, clock)
        assert store.read_bound_s() is None  # not held: the engine's default bound
        with store.write_lock:
            assert store.read_bound_s() == pytest.approx(1.8)  # 0.8 s trusted + one lease
            with store.write_lock:  # re-entered: still held
                assert store.read_bound_s() == pytest.approx(1.8)
            assert store.write_lock.held()
            clock.advance(800_000)  # the trust is used up: one lease left
            assert store.read_bound_s() == pytest.approx(1.0)
        assert not store.write_lock.held() and store.read_bound_s() is None
        # Held by another thread: not this thread's read.
        done = threading.Event()
        taken = threading.Event()

        def hold() -> None:
            with store.write_lock:
                taken.set()
                done.wait(30)

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        assert taken.wait(30)
        try:
            assert not store.write_lock.held() and store.read_bound_s() is None
        finally:
            done.set()
            t.join(30)
        # Not supervised (rounds driven by hand): no term bound even under the lock.
        store.term.supervised = False
        with store.write_lock:
            assert store.read_bound_s() is None
    finally:
        engine.dispose()


def test_a_read_under_the_write_lock_on_a_blackholed_database_ends_on_the_term_bound(
    pg_server: PgServer,
) -> None:
    with TcpProxy(("127.0.0.1", pg_server.port)) as proxy:
        engine = make_engine(f"postgresql+psycopg://postgres@{proxy.address}/postgres")
        try:
            store = _store_in_office(engine, FakeClock())
            with store.read() as conn:  # a pooled connection, alive, before the cut
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
            proxy.cut("blackhole")
            failed: list[ObError] = []

            def locked_read() -> None:
                try:
                    with store.write_lock, store.read() as conn:
                        conn.execute(sa.text("SELECT 2"))
                except ObError as e:
                    failed.append(e)

            t = threading.Thread(target=locked_read, daemon=True)
            t.start()
            # The term bound (1.8 s) plus libpq's shortest connect_timeout for the fresh
            # connection the pre-ping's failure opens (2 s) is far below the engine's default
            # per-wait bound, which an unbounded read would sit out first.
            t.join(IO_TIMEOUT_S * 2 / 3)
            assert not t.is_alive(), "the read under the write lock outlived the term bound"
            assert failed and failed[0].name == "OB_ERR_SYS", failed
            # The lock was let go with the failed read.
            assert store.write_lock.acquire(timeout=0)
            store.write_lock.release()
            proxy.heal()
            with store.write_lock, store.read() as conn:
                assert conn.execute(sa.text("SELECT 3")).scalar() == 3
        finally:
            proxy.heal()
            engine.dispose()
