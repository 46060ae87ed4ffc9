"""The fencing token and the metadata server's identity in the lease row.

``__all_service_epoch`` gains, on the ``rootservice_epoch`` row:

- ``incarnation``: the random id the RS drew when it took office with the row's epoch;
  ``(value, incarnation)`` is the fencing token agents obey (0 on rows written before);
- ``pg_system_id`` / ``pg_timeline``: PostgreSQL's ``system_identifier``
  (``pg_control_system()``) and the timeline of the server the RS took office or renewed
  through (NULL on SQLite, and where the functions are not readable). A promoted standby has
  a higher timeline; an old primary restarted writable keeps its lower one, and an RS that
  has seen the higher timeline refuses to write through it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("__all_service_epoch") as batch:
        batch.add_column(
            sa.Column("incarnation", sa.BigInteger, nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("pg_system_id", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("pg_timeline", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("__all_service_epoch") as batch:
        batch.drop_column("pg_timeline")
        batch.drop_column("pg_system_id")
        batch.drop_column("incarnation")
