"""SUSPECT servers: ``__all_server.suspect_end_time`` and the
``SUSPECT_END_TIME`` column of ``DBA_OB_SERVERS``.

A server whose lease expired and came back gets no new leaders and no copies until
``suspect_end_time`` (microseconds since the epoch; 0: not SUSPECT), longer with every repeat
(rootservice/servers/suspect_policy.py). The column is written by the RS leader when the
period starts and cleared when it ends, so a new leader resumes it and operators see it. The
view shows it as a UTC timestamp, NULL when the server is not SUSPECT.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _usec_to_time(expr: str) -> str:
    # As migration 0001's (migrations cannot import one another): NULL for 0.
    if op.get_context().dialect.name == "postgresql":
        conv = f"(to_timestamp({expr} / 1000000.0) AT TIME ZONE 'UTC')"
    else:
        conv = (
            f"strftime('%Y-%m-%d %H:%M:%S', {expr} / 1000000, 'unixepoch')"
            f" || '.' || printf('%06d', {expr} % 1000000)"
        )
    return f"CASE WHEN {expr} IS NULL OR {expr} = 0 THEN NULL ELSE {conv} END"


def _servers_view(suspect: bool) -> str:
    extra = f",\n               {_usec_to_time('s.suspect_end_time')} AS SUSPECT_END_TIME"
    return f"""
        CREATE VIEW dba_ob_servers AS
        SELECT s.svr_ip AS SVR_IP, s.svr_port AS SVR_PORT, s.id AS ID, s.zone AS ZONE,
               s.inner_port AS SQL_PORT,
               CASE WHEN s.with_rootserver = 1 THEN 'YES' ELSE 'NO' END AS WITH_ROOTSERVER,
               s.status AS STATUS,
               {_usec_to_time("s.start_service_time")} AS START_SERVICE_TIME,
               {_usec_to_time("s.stop_time")} AS STOP_TIME,
               {_usec_to_time("s.block_migrate_in_time")} AS BLOCK_MIGRATE_IN_TIME,
               s.gmt_create AS CREATE_TIME, s.gmt_modified AS MODIFY_TIME,
               s.build_version AS BUILD_VERSION,
               {_usec_to_time("s.last_offline_time")} AS LAST_OFFLINE_TIME{extra if suspect else ""}
        FROM __all_server s
        """


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.add_column(
            sa.Column("suspect_end_time", sa.BigInteger, nullable=False, server_default="0")
        )
    op.execute(_servers_view(suspect=True))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.drop_column("suspect_end_time")
    op.execute(_servers_view(suspect=False))
