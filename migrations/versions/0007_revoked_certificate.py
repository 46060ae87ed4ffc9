"""Revoked certificates: ``__all_revoked_certificate`` and the
``DBA_OB_REVOKED_CERTIFICATES`` view.

One row per revoked certificate, keyed by its serial number in lower-case hex (X.509 serials
are up to 20 octets, more than a BIGINT). Written by ``ALTER SYSTEM REVOKE CERTIFICATE`` and
``rootservice cert revoke``; every RS reads the whole table into its revocation list and
refuses those certificates on its gRPC, MySQL and HTTP endpoints; agents get the list with
their lease answers. Rows are never deleted: a revoked certificate stays revoked (issue a
new one).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
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
        "__all_revoked_certificate",
        sa.Column("serial", sa.String(64), primary_key=True),
        sa.Column("subject", sa.String(1024), nullable=False, server_default=""),
        sa.Column("common_name", sa.String(256), nullable=False, server_default=""),
        sa.Column("revoked_at", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
        sa.Column("revoked_by", sa.String(128), nullable=False, server_default=""),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    op.execute(
        f"""
        CREATE VIEW dba_ob_revoked_certificates AS
        SELECT r.serial AS SERIAL, r.common_name AS COMMON_NAME, r.subject AS SUBJECT,
               {_usec_to_time("r.revoked_at")} AS REVOKED_TIME, r.reason AS REASON,
               r.revoked_by AS REVOKED_BY
        FROM __all_revoked_certificate r
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_revoked_certificates")
    op.drop_table("__all_revoked_certificate")
