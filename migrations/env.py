"""Alembic environment: runs migrations on the connection or URL handed in by
``rootservice.db.engine.upgrade`` (or the ``alembic`` command line with ``-x db_url=...``).

The revision is kept in ``__all_schema_version``, not Alembic's default ``alembic_version``,
which is the previous release's stamp (rootservice.db.schema_version); a database only the
previous release migrated has its revision adopted first."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from alembic.script import ScriptDirectory

from rootservice.db import schema_version

config = context.config


def _configure(conn: sa.Connection) -> None:
    schema_version.adopt(conn, ScriptDirectory.from_config(config))
    context.configure(
        connection=conn, render_as_batch=True, version_table=schema_version.VERSION_TABLE
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("db_url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("no database: pass -x db_url=URL")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
