"""``__all_schema_contract``: how far the schema was contracted (rootservice.db.schema_upgrade).

One row, ``contract_level`` 0: no migration of this project contracts the schema yet. A
contract migration raises it; an RS whose code reaches a lower level refuses to start on the
database instead of running on a schema it does not know.

Additive only (a new table): a 0.1.0 RS runs on it unchanged.

Revision ID: 0022
Revises: 0020
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table with its one row at level 0."""
    t = op.create_table(
        "__all_schema_contract",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("contract_level", sa.Integer, nullable=False, server_default="0"),
    )
    op.bulk_insert(t, [{"id": 1, "contract_level": 0}])


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("__all_schema_contract")
