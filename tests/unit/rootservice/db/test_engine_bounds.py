"""The engine's client-side bounds (issue 14 item 7) on a real PostgreSQL reached through the
fault proxy: a database that stops answering gives an error within :func:`io_deadline`, not
a hang, and the pool recovers after the heal; ``set_local`` sets several settings at once."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from rootservice.db.engine import io_deadline, make_engine, set_local
from tests.support.pgserver import PgServer
from tests.support.tcp_proxy import TcpProxy


def test_blackholed_database_fails_within_the_deadline_then_recovers(
    pg_server: PgServer,
) -> None:
    with TcpProxy(("127.0.0.1", pg_server.port)) as proxy:
        engine = make_engine(f"postgresql+psycopg://postgres@{proxy.address}/postgres")
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
            proxy.cut("blackhole")
            # The pooled connection's pre-ping gets no answer (closed at the deadline); the
            # fresh connection the pool then tries hangs in its start-up until
            # connect_timeout: an error either way, never a hang.
            with (
                pytest.raises(sa.exc.OperationalError),
                io_deadline(0.5),
                engine.connect() as conn,
            ):
                conn.execute(sa.text("SELECT 2"))
            proxy.heal()
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 3")).scalar() == 3
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
