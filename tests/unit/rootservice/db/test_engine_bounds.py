"""The engine's client-side bounds on a real PostgreSQL reached through the
fault proxy: a database that stops answering gives an error within :func:`io_deadline`, not
a hang, and the pool recovers after the heal; ``set_local`` sets several settings at once."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from rootservice.db.engine import DatabaseTimeout, io_deadline, make_engine, set_local
from tests.support.pgserver import PgServer
from tests.support.tcp_proxy import TcpProxy


def test_blackholed_database_fails_within_the_deadline_then_recovers(
    pg_server: PgServer,
) -> None:
    with TcpProxy(("127.0.0.1", pg_server.port)) as proxy:
        # connect_timeout at libpq's minimum (2 s): the start-up of a fresh connection is
        # bounded by it, not by io_deadline (libpq counts whole seconds).
        url = f"postgresql+psycopg://postgres@{proxy.address}/postgres"
        engine = make_engine(url, connect_timeout_s=2)
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
            # connect_timeout: libpq's ConnectionTimeout, never a hang.
            with (
                pytest.raises(sa.exc.OperationalError) as connect_failed,
                io_deadline(0.5),
                engine.connect() as conn,
            ):
                conn.execute(sa.text("SELECT 3"))
            orig = connect_failed.value.orig
            assert isinstance(orig, psycopg.errors.ConnectionTimeout), connect_failed.value
            proxy.heal()
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 4")).scalar() == 4
        finally:
            engine.dispose()


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
