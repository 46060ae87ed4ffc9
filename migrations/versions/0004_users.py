"""Users and their global privileges: ``__all_user``, with ``root`` in it.

OceanBase keeps the sys tenant's users in ``__all_user``; here one row per user holds the
salted argon2 hash of its password (``passwd``; '' = no password: the user can only log in
with a client certificate) and one 0/1 column per global privilege. ``root`` (OceanBase's
``OB_SYS_USER_ID`` 200001) is inserted with no password and every privilege: it logs in
with ``client.root.crt`` until ``ALTER USER root IDENTIFIED BY`` gives it a password.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ROOT_USER_ID = 200001


def upgrade() -> None:
    user = op.create_table(
        "__all_user",
        sa.Column("user_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("user_name", sa.String(64), nullable=False, unique=True),
        sa.Column("passwd", sa.String(512), nullable=False, server_default=""),
        sa.Column("priv_select", sa.Integer, nullable=False, server_default="0"),
        sa.Column("priv_alter_system", sa.Integer, nullable=False, server_default="0"),
        sa.Column("priv_create_user", sa.Integer, nullable=False, server_default="0"),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    op.bulk_insert(
        user,
        [
            {
                "user_id": ROOT_USER_ID,
                "user_name": "root",
                "passwd": "",
                "priv_select": 1,
                "priv_alter_system": 1,
                "priv_create_user": 1,
            }
        ],
    )


def downgrade() -> None:
    op.drop_table("__all_user")
