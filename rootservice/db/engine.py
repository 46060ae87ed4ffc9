"""Engine creation and schema migration for SQLite (embedded default) and PostgreSQL.

``make_engine(url)`` returns an engine tuned for the RS: SQLite in WAL mode with a busy
timeout and foreign keys on, PostgreSQL through psycopg 3 with a short connect timeout so an
unreachable database fails fast. ``upgrade(engine)`` applies the Alembic migrations in
``migrations/``; it is the only way the schema is created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent
# pg_advisory_xact_lock key serialising schema migrations (an arbitrary constant).
MIGRATION_LOCK_ID = 46304630


def make_engine(url: str, *, connect_timeout_s: int = 5) -> sa.Engine:
    """Create an engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    SQLite files' parent directories are created. Raises ``sqlalchemy.exc.ArgumentError``
    for a malformed URL; connection errors surface on first use.
    """
    u = sa.make_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        engine = sa.create_engine(u, **kwargs)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            # pysqlite's own transaction handling defers BEGIN; take it over so that
            # BEGIN IMMEDIATE serialises writers instead of failing on lock upgrade.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            # Readers (connections marked read_only) need no lock in WAL mode; writers take
            # it up front so two writers queue instead of failing on lock upgrade.
            if conn.get_execution_options().get("read_only"):
                conn.exec_driver_sql("BEGIN")
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if u.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": connect_timeout_s}
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = 5
        kwargs["max_overflow"] = 5
    return sa.create_engine(u, **kwargs)


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` pointing at ``migrations/``.

    When ``connection`` is given it is handed to ``migrations/env.py`` (as
    ``cfg.attributes["connection"]``) so the migration runs inside the caller's transaction.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` in one transaction per run."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two RS processes starting together on an empty database must not both create
            # the tables; the lock is released at commit.
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        command.upgrade(alembic_config(conn), revision)


def downgrade(engine: sa.Engine, revision: str = "base") -> None:
    """Walk migrations back down to ``revision`` (``base`` drops everything)."""
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at, or None when it has no schema."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision id in ``migrations/`` (where :func:`upgrade` goes), or None if none."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def db_error_summary(exc: BaseException) -> str:
    """First line of a driver error, without SQLAlchemy's background link."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return (text[0] if text else type(orig).__name__)[:300]


def set_local(conn: sa.Connection, settings: dict[str, str]) -> None:
    """Set PostgreSQL run-time parameters (``name -> value``, e.g. ``lock_timeout`` in ms) for
    the current transaction only (``set_config(name, value, true)``, i.e. ``SET LOCAL``).
    A no-op on other databases. Raises SQLAlchemy errors."""
    if conn.dialect.name != "postgresql":
        return
    for name, value in settings.items():
        conn.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
