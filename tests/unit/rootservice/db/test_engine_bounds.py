"""The engine's client-side bounds on a real PostgreSQL reached through the
fault proxy: a database that stops answering gives an error within :func:`io_deadline`, not
a hang, a new connection's start-up included, and the pool recovers after the heal; the wait
for a free connection of a full pool ends at the deadline too; ``set_local`` sets several
settings at once."""

from __future__ import annotations

import threading

import psycopg
import pytest
import sqlalchemy as sa

from rootservice.db.engine import (
    MAX_OVERFLOW,
    POOL_SIZE,
    DatabaseTimeout,
    DeadlineQueuePool,
    connect_params_within,
    io_deadline,
    make_engine,
    set_local,
)
from tests.support.pgserver import PgServer
from tests.support.tcp_proxy import TcpProxy


def test_blackholed_database_fails_within_the_deadline_then_recovers(
    pg_server: PgServer,
) -> None:
    with TcpProxy(("127.0.0.1", pg_server.port)) as proxy:
        # A connect_timeout far longer than any deadline here: a fresh connection's start-up
        # must end on the deadline (at libpq's 2 s minimum), not on it.
        url = f"postgresql+psycopg://postgres@{proxy.address}/postgres"
        engine = make_engine(url, connect_timeout_s=600)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
                proxy.cut("blackhole")
                # A statement on an open connection: no answer, so the connection is closed
                # at the deadline and DatabaseTimeout (raised only by that bound) surfaces.
                with pytest.raises(sa.exc.OperationalError) as stmt_failed, io_deadline(0.5):
                    conn.execute(sa.text("SELECT 2"))
            assert isinstance(stmt_failed.value.orig, DatabaseTimeout), stmt_failed.value
            # The next checkout opens a fresh connection, which hangs in its start-up until
            # its connect_timeout, cut to the deadline: libpq's ConnectionTimeout. In a
            # thread, so that a start-up waiting the whole 600 s fails this test instead of
            # holding it.
            failed: list[BaseException] = []

            def connect() -> None:
                try:
                    with io_deadline(0.5), engine.connect() as conn:
                        conn.execute(sa.text("SELECT 3"))
                except sa.exc.OperationalError as e:
                    failed.append(e)

            t = threading.Thread(target=connect, daemon=True)
            t.start()
            t.join(60)
            assert not t.is_alive(), "the start-up of a new connection ignored the deadline"
            assert failed, "the connection through the blackhole did not fail"
            orig = failed[0].orig  # type: ignore[attr-defined]
            assert isinstance(orig, psycopg.errors.ConnectionTimeout), failed[0]
            proxy.heal()
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 4")).scalar() == 4
        finally:
            engine.dispose()


def test_the_wait_for_a_free_connection_ends_at_the_deadline(pg_server: PgServer) -> None:
    # A pool timeout far longer than any deadline here: a full pool's wait must end on the
    # deadline, not on it.
    engine = make_engine(pg_server.url("postgres"), pool_timeout_s=600)
    assert isinstance(engine.pool, DeadlineQueuePool)
    taken = [engine.connect() for _ in range(POOL_SIZE + MAX_OVERFLOW)]
    try:
        waited: list[BaseException] = []

        def checkout(seconds: float) -> None:
            try:
                with io_deadline(seconds), engine.connect():
                    raise AssertionError("a connection beyond the pool's limit")
            except sa.exc.TimeoutError as e:
                waited.append(e)

        t = threading.Thread(target=checkout, args=(0.3,), daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "the wait for a free connection ignored the deadline"
        assert len(waited) == 1 and "QueuePool limit" in str(waited[0]), waited
        # A deadline already passed: no wait at all, the same error.
        checkout(0.0)
        assert len(waited) == 2
        # The pool's wait is the deadline's rest inside one, the configured one outside.
        with io_deadline(0.1):
            assert engine.pool._timeout <= 0.1
        assert engine.pool._timeout == 600
    finally:
        for c in taken:
            c.close()
    # Freed: the next checkout gets one at once, inside a short deadline too.
    with io_deadline(5), engine.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    # Disposing inside a deadline keeps the configured timeout for the new pool.
    with io_deadline(0.1):
        engine.dispose()
    assert isinstance(engine.pool, DeadlineQueuePool) and engine.pool._timeout == 600
    engine.dispose()


def test_the_configured_pool_timeout_still_bounds_a_longer_deadline(pg_server: PgServer) -> None:
    engine = make_engine(pg_server.url("postgres"), pool_timeout_s=0.2)
    taken = [engine.connect() for _ in range(POOL_SIZE + MAX_OVERFLOW)]
    try:
        done = threading.Event()
        got: list[BaseException] = []

        def checkout() -> None:
            try:
                with io_deadline(600), engine.connect():
                    pass
            except sa.exc.TimeoutError as e:
                got.append(e)
            done.set()

        threading.Thread(target=checkout, daemon=True).start()
        assert done.wait(60), "a 600 s deadline replaced the pool's 0.2 s timeout"
        assert got and "QueuePool limit" in str(got[0]), got
    finally:
        for c in taken:
            c.close()
        engine.dispose()


def test_a_new_connection_gets_the_deadline_left_shared_by_its_hosts() -> None:
    one = {"host": "db1", "connect_timeout": 5}
    assert connect_params_within(one, None) is one  # no deadline: as configured
    assert connect_params_within(one, 5.0) is one  # the configured bound fits
    assert connect_params_within(one, 4.9)["connect_timeout"] == 4  # whole seconds, down
    assert connect_params_within(one, 1.0)["connect_timeout"] == 2  # libpq's minimum
    two = {"host": "db1,db2", "connect_timeout": 5}
    assert connect_params_within(two, 9.0)["connect_timeout"] == 4  # each host in turn
    assert connect_params_within(two, 10.0) is two
    unset = {"host": "db1"}  # libpq's default (no timeout): the deadline bounds it
    assert connect_params_within(unset, 30.0)["connect_timeout"] == 30
    with pytest.raises(DatabaseTimeout):
        connect_params_within(one, 0.0)


def test_set_local_sets_every_setting_in_one_statement(pg_server: PgServer) -> None:
    engine = make_engine(pg_server.url("postgres"))
    try:
        with engine.begin() as conn:
            set_local(conn, {"lock_timeout": "1234ms", "statement_timeout": "5678ms"})
            got = conn.execute(
                sa.text(
                    "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
                )
            ).one()
            assert tuple(got) == ("1234ms", "5678ms")
    finally:
        engine.dispose()


def test_the_servers_end_of_each_connection_is_bounded_too(pg_server: PgServer) -> None:
    # A backend whose client was cut off must give its locks up within the RS's own bounds,
    # not when the server's kernel gives the connection up; options of the URL are kept.
    own = "options=-c%20lock_timeout%3D4321ms"
    engine = make_engine(pg_server.url("postgres") + "?" + own)
    try:
        with engine.connect() as conn:
            got = conn.execute(
                sa.text(
                    "SELECT current_setting('tcp_user_timeout'),"
                    " current_setting('tcp_keepalives_idle'),"
                    " current_setting('tcp_keepalives_interval'),"
                    " current_setting('tcp_keepalives_count'),"
                    " current_setting('lock_timeout')"
                )
            ).one()
        assert tuple(got) == ("10000", "5", "2", "3", "4321ms")
    finally:
        engine.dispose()
