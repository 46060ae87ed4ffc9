"""Root services seen: ``__all_rootservice_member``.

Every RS's election round (leader and standbys, :mod:`rootservice.ha.election`) records its
RPC address and the database's clock in this table, so that the status API
(``/api/v1/rootservices``) can list the standbys seen within the last lease period beside
the leader of ``__all_service_epoch``. One row per address, updated in place.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__all_rootservice_member",
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("last_seen_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )


def downgrade() -> None:
    op.drop_table("__all_rootservice_member")
