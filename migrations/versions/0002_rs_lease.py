"""RS leader lease on the epoch row (docs/design/ha.md).

The ``rootservice_epoch`` row of ``__all_service_epoch`` becomes the election lease: who
holds it (``svr_ip`` / ``svr_port``, the holder's RPC address) and until when, measured by
the database's own clock (``lease_expire_time``, microseconds since the epoch). Keeping the
lease on the same row as the epoch means the fencing check (``FOR SHARE`` on that row) and a
take-over (``UPDATE`` of that row) serialise on one row lock.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_COLUMNS = ("svr_ip", "svr_port", "lease_expire_time", "lease_renew_time")


def upgrade() -> None:
    # batch mode: SQLite cannot ALTER TABLE ... DROP COLUMN everywhere, and batch mode
    # is a no-op wrapper on PostgreSQL.
    with op.batch_alter_table("__all_service_epoch") as batch:
        batch.add_column(sa.Column("svr_ip", sa.String(46), nullable=False, server_default=""))
        batch.add_column(sa.Column("svr_port", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("lease_expire_time", sa.BigInteger, nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("lease_renew_time", sa.BigInteger, nullable=False, server_default="0")
        )
    # The row exists from the start, so two RS racing for an empty lease both lock and update
    # the same row (one waits for the other) instead of both inserting it.
    op.execute(
        "INSERT INTO __all_service_epoch (name, value) SELECT 'rootservice_epoch', 0"
        " WHERE NOT EXISTS"
        " (SELECT 1 FROM __all_service_epoch WHERE name = 'rootservice_epoch')"
    )


def downgrade() -> None:
    # Only the placeholder this upgrade may have inserted; a row with a real epoch stays, so
    # fencing keeps working after the downgrade.
    op.execute("DELETE FROM __all_service_epoch WHERE name = 'rootservice_epoch' AND value = 0")
    with op.batch_alter_table("__all_service_epoch") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
