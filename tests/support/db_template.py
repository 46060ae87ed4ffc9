"""Migrated databases for in-process root services, copied instead of migrated.

Every unit test that builds a :class:`rootservice.app.RootService` (``make_rs``) gets a fresh
database, which ``RootService.open`` then migrates: 20-odd Alembic revisions, 0.1 s on
SQLite and 1-2 s on PostgreSQL on a loaded 2-core machine, paid by about a thousand tests.
:func:`fill_from_template` gives an *empty* database the contents of one migrated once per
process instead (a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL), so
``open`` finds it at the head revision. A database that already holds tables (seeded, or
left by an earlier RS of the test) is never touched, and nothing here runs for a test that
migrates a database itself.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

import psycopg
import sqlalchemy as sa
from psycopg import sql

from rootservice.db.engine import make_engine, upgrade

_lock = threading.Lock()
# One migrated SQLite file per process, and one template database per PostgreSQL server
# (host, port), both made on first use.
_sqlite_template: Path | None = None
_pg_templates: dict[tuple[str, int], str] = {}


def fill_from_template(db_url: str) -> bool:
    """Give the database at ``db_url`` (``sqlite:///path`` or ``postgresql+psycopg://``)
    the migrated schema by copying, when it is empty: an absent or zero-length SQLite file,
    a PostgreSQL database without a table in ``public`` (dropped and created again from the
    template, under the same name; nobody may be connected to it). Returns whether it did.
    Raises what the database raises."""
    url = sa.make_url(db_url)
    with _lock:
        if url.get_backend_name() == "sqlite":
            return _fill_sqlite(Path(url.database or ""))
        if url.get_backend_name() == "postgresql":
            return _fill_pg(url)
    return False


def _fill_sqlite(path: Path) -> bool:
    global _sqlite_template
    if not path.name or (path.exists() and path.stat().st_size > 0):
        return False
    if _sqlite_template is None:
        where = Path(tempfile.mkdtemp(prefix="ob-test-template-"))
        atexit.register(shutil.rmtree, where, True)
        template = where / "template.db"
        engine = make_engine(f"sqlite:///{template}")
        try:
            upgrade(engine)
        finally:
            # The last connection's close checkpoints the write-ahead log into the file.
            engine.dispose()
        assert not template.with_name("template.db-wal").exists(), "WAL not checkpointed"
        _sqlite_template = template
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite_template, path)
    return True


def _connect(url: sa.URL, dbname: str) -> psycopg.Connection:
    # Autocommit: CREATE / DROP DATABASE cannot run inside a transaction.
    return psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=dbname,
        autocommit=True,
    )


def _fill_pg(url: sa.URL) -> bool:
    name = url.database or ""
    with _connect(url, name) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'public'"
        ).fetchone()
        if row is None or row[0] > 0:
            return False
    key = (url.host or "", url.port or 5432)
    with _connect(url, "postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        for _ in range(2):
            template = _pg_templates.get(key) or _make_pg_template(admin, url)
            _pg_templates[key] = template
            try:
                admin.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
                return True
            except psycopg.errors.InvalidCatalogName:
                # A server started again from scratch on the same port: no template yet.
                del _pg_templates[key]
        raise AssertionError(f"no template database on {key} for {name}")


def _make_pg_template(admin: psycopg.Connection, url: sa.URL) -> str:
    template = f"obrs_template_{os.getpid()}"
    admin.execute(
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template))
    )
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
    engine = make_engine(url.set(database=template).render_as_string(False))
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return template
