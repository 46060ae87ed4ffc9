"""LAGGING servers: ``__all_server.lagging_time`` and the ``LAGGING`` and
``LAGGING_TIME`` columns of ``DBA_OB_SERVERS``.

A server whose agent heartbeats but leaves an RS command unapplied for ``agent_lag_timeout``,
whose disk probe is slow, whose copy stalls or whose follower trails is LAGGING
(rootservice/servers/lag_policy.py) from ``lagging_time`` (microseconds since the epoch; 0:
not LAGGING). The RS leader writes it when the episode starts and clears it when it ends; a
new leader judges afresh and clears what it does not find. The view shows ``LAGGING``
YES / NO and the start as a UTC timestamp, NULL when not LAGGING.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
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


def _servers_view(lagging: bool) -> str:
    # 0011's MAINTENANCE_END_TIME stays in both directions (this revision follows it).
    extra = (
        ",\n               CASE WHEN s.lagging_time <> 0 THEN 'YES' ELSE 'NO' END AS LAGGING"
        f",\n               {_usec_to_time('s.lagging_time')} AS LAGGING_TIME"
    )
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
               {_usec_to_time("s.last_offline_time")} AS LAST_OFFLINE_TIME,
               {_usec_to_time("s.suspect_end_time")} AS SUSPECT_END_TIME,
               {_usec_to_time("s.maintenance_end_time")} AS MAINTENANCE_END_TIME{extra if lagging else ""}
        FROM __all_server s
        """


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.add_column(
            sa.Column("lagging_time", sa.BigInteger, nullable=False, server_default="0")
        )
    op.execute(_servers_view(lagging=True))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.drop_column("lagging_time")
    op.execute(_servers_view(lagging=False))
