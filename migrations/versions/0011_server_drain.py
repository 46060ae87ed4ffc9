"""DRAIN SERVER and maintenance windows: ``__all_server_drain``, the
``DBA_OB_SERVER_DRAINS`` view, ``__all_server.maintenance_end_time`` and the
``MAINTENANCE_END_TIME`` column of ``DBA_OB_SERVERS``.

One ``__all_server_drain`` row per server ever drained (the last drain): its state
(DRAINING, FINISHED, TIMEOUT, CANCELED), its deadline, and the progress the RS leader writes
at least every 5 s (leaders left, copies left, the blocking log streams). A new RS leader
resumes the DRAINING rows. ``maintenance_end_time`` (microseconds since the epoch, 0: no
window) is the end of a ``STOP SERVER ... FOR MAINTENANCE`` window.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
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


def _servers_view(maintenance: bool) -> str:
    extra = f",\n               {_usec_to_time('s.maintenance_end_time')} AS MAINTENANCE_END_TIME"
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
               {_usec_to_time("s.suspect_end_time")} AS SUSPECT_END_TIME{extra if maintenance else ""}
        FROM __all_server s
        """


def _gmt() -> list[sa.Column]:
    return [
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    ]


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.add_column(
            sa.Column("maintenance_end_time", sa.BigInteger, nullable=False, server_default="0")
        )
    op.execute(_servers_view(maintenance=True))
    op.create_table(
        "__all_server_drain",
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("start_time", sa.BigInteger, nullable=False),
        sa.Column("deadline", sa.BigInteger, nullable=False),
        sa.Column("end_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("progress_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("leaders_left", sa.BigInteger, nullable=False, server_default="-1"),
        sa.Column("copies_left", sa.BigInteger, nullable=False, server_default="-1"),
        sa.Column("blockers", sa.String(4096), nullable=False, server_default=""),
        sa.Column("rs_svr", sa.String(64), nullable=False, server_default=""),
        *_gmt(),
    )
    op.execute(
        f"""
        CREATE VIEW dba_ob_server_drains AS
        SELECT d.svr_ip AS SVR_IP, d.svr_port AS SVR_PORT, d.status AS STATUS,
               {_usec_to_time("d.start_time")} AS START_TIME,
               {_usec_to_time("d.deadline")} AS DEADLINE,
               {_usec_to_time("d.end_time")} AS END_TIME,
               {_usec_to_time("d.progress_time")} AS PROGRESS_TIME,
               d.leaders_left AS LEADERS_LEFT, d.copies_left AS COPIES_LEFT,
               d.blockers AS BLOCKERS, d.rs_svr AS RS_SVR
        FROM __all_server_drain d
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_server_drains")
    op.drop_table("__all_server_drain")
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    with op.batch_alter_table("__all_server") as batch:
        batch.drop_column("maintenance_end_time")
    op.execute(_servers_view(maintenance=False))
