"""The test PostgreSQL really is PostgreSQL 15 on loopback, and survives a restart."""

from __future__ import annotations

import socket
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from rootservice.db.engine import make_engine
from tests.support import pgserver
from tests.support.pgserver import HOST, PgNotAvailable, PgServer, find_pg_bindir


def test_session_server_is_postgresql_15_on_loopback(pg_server: PgServer) -> None:
    with pg_server.connect() as conn:
        row = conn.execute("SELECT version(), inet_server_addr()").fetchone()
        assert row is not None
        version, addr = row
        listen = conn.execute("SHOW listen_addresses").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    assert version.startswith("PostgreSQL 15."), version
    # inet_server_addr() is NULL over a Unix socket: this proves a TCP connection to
    # 127.0.0.1, and listen_addresses that nothing else is bound.
    assert str(addr) == "127.0.0.1"
    assert listen == ("127.0.0.1",)
    assert fsync == ("off",)


def test_db_url_gives_a_fresh_empty_database(db_url: str) -> None:
    eng = make_engine(db_url)
    try:
        with eng.connect() as conn:
            if eng.dialect.name == "postgresql":
                assert (
                    conn.execute(sa.text("SELECT current_database()"))
                    .scalar_one()
                    .startswith("obrs_")
                )
                assert str(conn.execute(sa.text("SELECT inet_server_addr()")).scalar_one()) == HOST
            else:
                assert eng.dialect.name == "sqlite"
        assert sa.inspect(eng).get_table_names() == []
    finally:
        eng.dispose()


def test_databases_are_dropped_even_with_open_connections(pg_server: PgServer) -> None:
    pg_server.create_database("obrs_drop_me")
    held = pg_server.connect("obrs_drop_me")
    try:
        pg_server.drop_database("obrs_drop_me")  # WITH (FORCE) disconnects `held`
        with pg_server.connect() as conn:
            n = conn.execute(
                "SELECT count(*) FROM pg_database WHERE datname = 'obrs_drop_me'"
            ).fetchone()
        assert n == (0,)
    finally:
        held.close()


def test_restart_keeps_data_port_and_directory(pg_server: PgServer) -> None:
    # A private server: restarting the session one would cut every other test's pool.
    # (pg_server is requested for its skip/fail handling when PostgreSQL is missing.)
    server = PgServer(bindir=pg_server.bindir)
    try:
        port, data_dir = server.port, server.data_dir
        server.create_database("keep")
        with server.connect("keep") as conn:
            conn.execute("CREATE TABLE t (k int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t VALUES (1, 'before restart')")
            started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
        server.restart()
        assert (server.port, server.data_dir) == (port, data_dir)
        with server.connect("keep") as conn:
            assert conn.execute("SELECT v FROM t WHERE k = 1").fetchone() == ("before restart",)
            assert conn.execute("SELECT pg_postmaster_start_time()").fetchone() != started
    finally:
        server.stop()
    # stop() shut the server down and removed its files.
    assert not server.base_dir.exists()
    assert not server.running
    with pytest.raises(psycopg.OperationalError):
        server.connect()
    with socket.socket() as s:
        assert s.connect_ex((HOST, port)) != 0
    server.stop()  # idempotent: the fixture's finally and atexit may both call it


def test_find_pg_bindir_falls_back_to_newest_debian_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dirs = []
    for major in ("9.6", "13", "15"):
        bindir = tmp_path / major / "bin"
        bindir.mkdir(parents=True)
        for exe in ("initdb", "pg_ctl", "postgres"):
            (bindir / exe).write_text("#!/bin/sh\n")
            (bindir / exe).chmod(0o755)
        dirs.append(str(bindir))
    monkeypatch.setattr(pgserver.shutil, "which", lambda _name: None)
    monkeypatch.setattr(pgserver.glob, "glob", lambda _pattern: dirs)
    assert find_pg_bindir() == tmp_path / "15" / "bin"

    monkeypatch.setattr(pgserver.glob, "glob", lambda _pattern: [])
    with pytest.raises(PgNotAvailable, match="make setup"):
        find_pg_bindir()
