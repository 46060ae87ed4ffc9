"""Alembic environment: runs migrations on the connection or URL handed in by
``rootservice.db.engine.upgrade`` (or the ``alembic`` command line with ``-x db_url=...``)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, render_as_batch=True)
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
        context.configure(connection=conn, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
