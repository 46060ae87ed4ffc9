"""Stale replica rows: ``__all_ls_meta_table.stale`` and ``last_report_time``, the ``STALE``
and ``LAST_REPORT_TIME`` columns of ``DBA_OB_LS_LOCATIONS``, and ``CDB_OB_LS_LOCATIONS``.

A row is stale when it is not the replica's current state: its server's lease expired (the
row is its last report, kept while it cannot report), or it claims the leadership of a term
below its log stream's current leader term (a deposed leader that has not yet heard of the new
term). The RS leader's meta sync writes ``stale = 1`` with ``role`` FOLLOWER and
``last_report_time`` the server's last heartbeat (microseconds since the epoch) before the
row went stale; a fresh row has ``stale = 0`` and ``last_report_time = 0``.

The views show a row LEADER only when it is a fresh LEADER row and no row of its log stream
has a higher ``proposal_id`` (OceanBase's ``ObLSInfo::find_leader`` /
``ObLSInfo::is_strong_leader``, src/share/ls/ob_ls_info.cpp: the leader is the LEADER
replica at the highest proposal id), so a deposed leader's row is never shown beside the new
one. ``CDB_OB_LS_LOCATIONS`` has the same columns (OceanBase's CDB_ form has TENANT_ID, which
the RS's DBA_ form already carries: the RS sees every tenant).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

VIEW_NAMES = ("dba_ob_ls_locations", "cdb_ob_ls_locations")


def _usec_to_time(expr: str) -> str:
    # As migration 0001's (migrations cannot import one another): NULL for 0.
    if op.get_context().dialect.name == "postgresql":
        conv = f"(to_timestamp({expr} / 1000000.0) AT TIME ZONE 'UTC')"
    else:
        conv = (
            f"strftime('%Y-%m-%d %H:%M:%S', {expr} / 1000000, 'unixepoch')"
            f" || '.' || printf('%06d', {expr} % 1000000)"
        )
    return f"CASE WHEN {expr} IS NULL OR {expr} = 0 THEN NULL ELSE {conv} END"


# A fresh LEADER row at its log stream's highest proposal id (ties are one term's leader).
_LEADS = """m.role = 1 AND m.stale = 0 AND NOT EXISTS (
                   SELECT 1 FROM __all_ls_meta_table o
                   WHERE o.tenant_id = m.tenant_id AND o.ls_id = m.ls_id
                     AND o.proposal_id > m.proposal_id)"""


def _locations_view(name: str, stale: bool) -> str:
    leads = _LEADS if stale else "m.role = 1"
    extra = (
        ",\n               CASE WHEN m.stale = 1 THEN 'YES' ELSE 'NO' END AS STALE"
        f",\n               {_usec_to_time('m.last_report_time')} AS LAST_REPORT_TIME"
    )
    return f"""
        CREATE VIEW {name} AS
        SELECT m.gmt_create AS CREATE_TIME, m.gmt_modified AS MODIFY_TIME,
               m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, m.svr_ip AS SVR_IP,
               m.svr_port AS SVR_PORT, m.sql_port AS SQL_PORT, m.zone AS ZONE,
               CASE WHEN {leads} THEN 'LEADER' ELSE 'FOLLOWER' END AS ROLE,
               CASE WHEN {leads} THEN m.member_list ELSE NULL END AS MEMBER_LIST,
               m.paxos_replica_number AS PAXOS_REPLICA_NUMBER,
               'FULL' AS REPLICA_TYPE,
               CASE WHEN {leads} THEN m.learner_list ELSE NULL END AS LEARNER_LIST,
               CASE WHEN m.rebuild = 1 THEN 'TRUE' ELSE 'FALSE' END AS REBUILD,
               m.replica_status AS REPLICA_STATUS, m.unit_id AS UNIT_ID,
               m.data_size AS DATA_SIZE, m.required_size AS REQUIRED_SIZE{extra if stale else ""}
        FROM __all_ls_meta_table m
        """


def upgrade() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("__all_ls_meta_table") as batch:
        batch.add_column(sa.Column("stale", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("last_report_time", sa.BigInteger, nullable=False, server_default="0")
        )
    for name in VIEW_NAMES:
        op.execute(_locations_view(name, stale=True))


def downgrade() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("__all_ls_meta_table") as batch:
        batch.drop_column("last_report_time")
        batch.drop_column("stale")
    op.execute(_locations_view("dba_ob_ls_locations", stale=False))
