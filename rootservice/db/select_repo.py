"""Read-only SELECT over the system tables and DBA_OB_* views (SPEC.md section 4).

The query side of the admin language's SELECT (statement dispatch in
:mod:`rootservice.api.dispatch` opens the read connection). An ``ast.Select`` is compiled to a SQLAlchemy Core query with bound parameters: table and
column names are resolved case-insensitively against what the database reports, so nothing
the operator typed is ever spliced into SQL text. Unknown names get MySQL's errors
(``Table ... doesn't exist``, ``Unknown column``). Results are capped at
:data:`MAX_ROWS` rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db.catalog import Catalog
from rootservice.db.engine import db_error_summary
from sql import ast

MAX_ROWS = 100_000

# Rows come back in a stable order when the statement has no ORDER BY, as InnoDB returns
# them in primary-key order.
DEFAULT_ORDER = {
    "__all_server": ("svr_ip", "svr_port"),
    "__all_zone": ("zone", "name"),
    "__all_sys_parameter": ("name",),
    "__all_rootservice_job": ("job_id",),
    "__all_rootservice_event_history": ("id",),
    "__all_service_epoch": ("name",),
    "dba_ob_servers": ("svr_ip", "svr_port"),
    "dba_ob_zones": ("zone",),
    "__all_unit_config": ("unit_config_id",),
    "__all_resource_pool": ("resource_pool_id",),
    "__all_unit": ("unit_id",),
    "__all_tenant": ("tenant_id",),
    "__all_ls_status": ("tenant_id", "ls_id"),
    "__all_ls_meta_table": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "__all_space_usage": ("tenant_id", "svr_ip", "svr_port", "start_seq", "file_type"),
    "dba_ob_unit_configs": ("unit_config_id",),
    "dba_ob_resource_pools": ("resource_pool_id",),
    "dba_ob_units": ("unit_id",),
    "dba_ob_tenants": ("tenant_id",),
    "dba_ob_ls": ("tenant_id", "ls_id"),
    "dba_ob_ls_locations": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "dba_ob_rootservice_jobs": ("job_id",),
}


def _col(cols: dict[str, str], name: str, where: str) -> sa.ColumnClause[Any]:
    actual = cols.get(name.lower())
    if actual is None:
        raise ObError("OB_ERR_BAD_FIELD_ERROR", name[:64], where)
    return sa.column(actual)


def _expr(cols: dict[str, str], e: ast.Expr) -> sa.ColumnElement[bool]:
    if isinstance(e, ast.And):
        return sa.and_(_expr(cols, e.left), _expr(cols, e.right))
    if isinstance(e, ast.Or):
        return sa.or_(_expr(cols, e.left), _expr(cols, e.right))
    if isinstance(e, ast.Not):
        return sa.not_(_expr(cols, e.operand))
    c = _col(cols, e.column, "where clause")
    if isinstance(e, ast.IsNull):
        return c.is_not(None) if e.negated else c.is_(None)
    if isinstance(e, ast.Like):
        # MySQL's default collation makes LIKE case-insensitive; PostgreSQL's is not.
        return c.not_ilike(e.pattern) if e.negated else c.ilike(e.pattern)
    if isinstance(e, ast.In):
        values = [v for v in e.values if v is not None]
        return c.not_in(values) if e.negated else c.in_(values)
    if e.value is None:
        # col = NULL is never true in SQL; keep that meaning rather than turning it into IS NULL.
        return sa.false()
    ops = {
        "=": c.__eq__,
        "!=": c.__ne__,
        "<": c.__lt__,
        ">": c.__gt__,
        "<=": c.__le__,
        ">=": c.__ge__,
    }
    return ops[e.op](e.value)


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def run_select(
    conn: sa.Connection, catalog: Catalog, st: ast.Select
) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """Execute ``st`` on ``conn`` (a read connection); returns (column headers, rows,
    truncated). ``catalog`` resolves names (one per process: it caches what it read).

    Raises OB_TABLE_NOT_EXIST, OB_ERR_BAD_FIELD_ERROR, OB_INVALID_ARGUMENT (a comparison
    the database cannot evaluate, e.g. a string against an integer column on PostgreSQL)."""
    info = catalog.get(conn, st.table)
    actual = info.db_name
    cols = {c.db_name.lower(): c.db_name for c in info.columns}
    all_cols = list(cols.values())
    upper = st.table.startswith("dba_")
    if st.columns is None:
        selected: list[sa.ColumnClause[Any]] = [sa.column(c) for c in all_cols]
        headers = [c.upper() if upper else c for c in all_cols]
    else:
        selected = [_col(cols, c, "field list") for c in st.columns]
        headers = list(st.columns)
    q = sa.select(*selected).select_from(sa.table(actual, *[sa.column(c) for c in all_cols]))
    if st.where is not None:
        q = q.where(_expr(cols, st.where))
    if st.order_by:
        q = q.order_by(
            *[
                (
                    _col(cols, o.column, "order clause").desc()
                    if o.descending
                    else _col(cols, o.column, "order clause")
                )
                for o in st.order_by
            ]
        )
    else:
        q = q.order_by(*[sa.column(cols[c]) for c in DEFAULT_ORDER.get(st.table, ()) if c in cols])
    limit = MAX_ROWS + 1 if st.limit is None else min(st.limit, MAX_ROWS + 1)
    q = q.limit(limit).offset(st.offset or None)
    try:
        rows = [tuple(_value(v) for v in r) for r in conn.execute(q)]
    except (sa.exc.DataError, sa.exc.ProgrammingError) as e:
        raise ObError(
            "OB_INVALID_ARGUMENT", "the WHERE clause", detail=db_error_summary(e)
        ) from None
    truncated = len(rows) > MAX_ROWS
    return headers, rows[:MAX_ROWS], truncated
