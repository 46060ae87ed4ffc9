"""mysql_native_password verifiers: ``__all_user.native_passwd``.

The MySQL endpoint's ``mysql_native_password`` plugin checks the client's scramble against
``SHA1(SHA1(password))`` (as MySQL's ``mysql.user.authentication_string``), which cannot be
derived from the argon2 hash in ``passwd``. CREATE USER and ALTER USER ... IDENTIFIED BY
write it (hex, 40 characters); it is NULL for a user without a password and for users
created before this revision, who log in with ``caching_sha2_password`` (full
authentication over TLS, checked against ``passwd``) or their client certificate.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("__all_user") as batch:
        batch.add_column(sa.Column("native_passwd", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("__all_user") as batch:
        batch.drop_column("native_passwd")
