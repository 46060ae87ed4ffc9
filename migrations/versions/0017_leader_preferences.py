"""Sticky leaders and the root-service handover.

``__all_ls_election_reference_info`` (OceanBase 4.x's table of that name, written by
``ALTER SYSTEM SWITCH REPLICA``; src/rootserver/ob_admin_switch_replica_role.cpp): per log
stream, the ``manual_leader_server`` set by SWITCH REPLICA LEADER (the leader coordinator
keeps the leader there while it can lead; '' = none) and the ``blacklist`` of servers SWITCH
REPLICA FOLLOWER keeps leaders off (``ip:port`` separated by ``;``). SWITCH REPLICA DEFAULT
clears the manual leader and takes the server off the blacklist. A table, not memory, so a
new RS leader keeps them.

``__all_service_epoch`` gains the designated successor of ``ALTER SYSTEM SWITCH ROOTSERVICE
LEADER``: ``successor_ip`` / ``successor_port`` ('' / 0 = none) and ``handover_expire_time``
(microseconds by the database's clock): until then only the successor may take office; the
next take-office clears them.

Revision ID: 0017
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__all_ls_election_reference_info",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("manual_leader_server", sa.String(64), nullable=False, server_default=""),
        sa.Column("blacklist", sa.String(4096), nullable=False, server_default=""),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    with op.batch_alter_table("__all_service_epoch") as batch:
        batch.add_column(
            sa.Column("successor_ip", sa.String(46), nullable=False, server_default="")
        )
        batch.add_column(
            sa.Column("successor_port", sa.Integer, nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("handover_expire_time", sa.BigInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("__all_service_epoch") as batch:
        batch.drop_column("handover_expire_time")
        batch.drop_column("successor_port")
        batch.drop_column("successor_ip")
    op.drop_table("__all_ls_election_reference_info")
