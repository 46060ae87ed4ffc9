"""Versions: ``__all_cluster_version``, ``__all_rootservice_member.build_version`` and the
``DBA_OB_ROOTSERVICES`` view.

``__all_cluster_version`` holds the one row of the cluster version (OceanBase's
``min_observer_version``): ``version`` as text and ``version_code`` (major << 32 | minor << 16
| patch) that the RS compares when it raises it, so it only ever rises. A database that did
not have the table was written by release 0.1.0, the release before it: the row starts at
0.1.0. ALTER SYSTEM BOOTSTRAP of a new cluster, and finalizing an upgrade, raise it.

``__all_rootservice_member.build_version`` is what each RS's election round reports as its
release (NULL from a 0.1.0 RS, which does not know the column: its round updates only
``last_seen_time``). ``DBA_OB_ROOTSERVICES`` lists the members with it, the release a NULL
stands for spelled out.

Additive only (a new table, a nullable column, a new view): a 0.1.0 RS runs on it unchanged.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

#: The release that wrote every database older than this table.
FIRST_RELEASE = "0.1.0"
FIRST_RELEASE_CODE = 1 << 16

VIEW = "dba_ob_rootservices"


def upgrade() -> None:
    op.create_table(
        "__all_cluster_version",
        # Always 1: one row.
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("version_code", sa.BigInteger, nullable=False),
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    )
    op.execute(
        "INSERT INTO __all_cluster_version (id, version, version_code) "
        f"VALUES (1, '{FIRST_RELEASE}', {FIRST_RELEASE_CODE})"
    )
    with op.batch_alter_table("__all_rootservice_member") as batch:
        batch.add_column(sa.Column("build_version", sa.String(256), nullable=True))
    op.execute(
        f"""
        CREATE VIEW {VIEW} AS
        SELECT m.svr_ip AS SVR_IP, m.svr_port AS SVR_PORT,
               COALESCE(m.build_version, '{FIRST_RELEASE}') AS BUILD_VERSION,
               m.last_seen_time AS LAST_SEEN_TIME,
               m.gmt_create AS CREATE_TIME, m.gmt_modified AS MODIFY_TIME
        FROM __all_rootservice_member m
        """
    )


def downgrade() -> None:
    op.execute(f"DROP VIEW IF EXISTS {VIEW}")
    with op.batch_alter_table("__all_rootservice_member") as batch:
        batch.drop_column("build_version")
    op.drop_table("__all_cluster_version")
