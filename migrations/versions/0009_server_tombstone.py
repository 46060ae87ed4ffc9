"""Retired server identities: ``__all_server_tombstone`` and the
``DBA_OB_SERVER_TOMBSTONES`` view.

``ALTER SYSTEM FORCE DELETE SERVER`` and ``ALTER SYSTEM RECOVER LS ... FROM LOST SERVERS``
bury a server that is gone: one row per ``ip:port`` with the server id it had. Rows are never
deleted: an agent presenting that address or that server id is refused at lease time for
ever, and ADD SERVER of the address is refused (TiDB PD's tombstone stores, for the same
reason: a "dead" node that returns must not rejoin with its old replicas).

``__all_ls_log_mark`` keeps, per log stream, the highest log end index any replica ever
reported (with its term and server), so that RECOVER LS can tell what its survivor lacks
even after the replicas that had it died and the RS that saw them failed over.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _usec_to_time(expr: str) -> str:
    # As migration 0001's DBA_OB_SERVERS (migrations cannot import one another).
    if op.get_context().dialect.name == "postgresql":
        return f"(to_timestamp({expr} / 1000000.0) AT TIME ZONE 'UTC')"
    return (
        f"strftime('%Y-%m-%d %H:%M:%S', {expr} / 1000000, 'unixepoch')"
        f" || '.' || printf('%06d', {expr} % 1000000)"
    )


def upgrade() -> None:
    op.create_table(
        "__all_server_tombstone",
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("server_id", sa.BigInteger, nullable=False),
        sa.Column("zone", sa.String(128), nullable=False, server_default=""),
        sa.Column("deleted_at", sa.BigInteger, nullable=False),
        # FORCE DELETE SERVER, or RECOVER LS with its plan id.
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    op.create_table(
        "__all_ls_log_mark",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("log_end_index", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("term", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("svr_ip", sa.String(46), nullable=False, server_default=""),
        sa.Column("svr_port", sa.Integer, nullable=False, server_default="0"),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    op.execute(
        f"""
        CREATE VIEW dba_ob_server_tombstones AS
        SELECT t.svr_ip AS SVR_IP, t.svr_port AS SVR_PORT, t.server_id AS ID, t.zone AS ZONE,
               {_usec_to_time("t.deleted_at")} AS DELETE_TIME, t.reason AS REASON
        FROM __all_server_tombstone t
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_server_tombstones")
    op.drop_table("__all_ls_log_mark")
    op.drop_table("__all_server_tombstone")
