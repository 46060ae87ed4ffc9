"""Read-only SELECT over the system tables and DBA_OB_* views (docs/design/servers.md#the-tables).

Runs an :class:`sql.ast.Query` that :mod:`sql.reads` parsed and checked (MySQL syntax, only
reads, only allowed functions): every table must be one of the :class:`Catalog`'s (else
MySQL's 1146), names are resolved case-insensitively and ``*`` expanded with sqlglot's
optimizer (``qualify``; an unknown column is MySQL's 1054), result types come from
``annotate_types``, and the tree is transpiled to the engine's dialect (SQLite or
PostgreSQL) with MySQL's meaning where it is cheap: LIKE is case-insensitive, ``DATABASE()``
is ``'oceanbase'``, MySQL's date and string functions that SQLite lacks are Python functions
registered on the connection. Nothing the operator typed is run except as the checked tree.

The statement runs in a read-only transaction (PostgreSQL ``SET TRANSACTION READ ONLY``;
SQLite ``PRAGMA query_only``) under a statement timeout (PostgreSQL ``statement_timeout``;
SQLite a progress handler) and returns at most ``max_rows`` rows (more: truncated, and the
caller says "result truncated").
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from obcommon.errors import ObError
from rootservice.db.catalog import Catalog, TableInfo
from rootservice.db.engine import db_error_summary
from rootservice.db.loose_group_by import any_value_of_ungrouped
from rootservice.db.view_orders import DEFAULT_ORDER
from sql import ast, reads
from sql.mysql_dialect import ObMySQL

SCHEMA = "oceanbase"


@dataclass
class QueryResult:
    """Column headers, MySQL type names (``BIGINT``, ``DOUBLE``, ``DECIMAL``, ``VARCHAR``,
    ``DATETIME``...), rows, and whether more than the limit matched (rows cut)."""

    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def _sqlglot_type(mysql_type: str) -> str:
    base = mysql_type.split("(")[0]
    return (
        {"int": "INT", "bigint": "BIGINT", "smallint": "SMALLINT", "tinyint": "TINYINT"}.get(
            base, "DOUBLE" if base == "double" else "DATETIME" if base == "datetime" else "TEXT"
        )
        if base != "decimal"
        else "DECIMAL"
    )


def _mysql_type_name(t: exp.DataType | None) -> str:
    if t is None:
        return "VARCHAR"
    this = t.this
    T = exp.DataType.Type
    if this in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.UTINYINT, T.USMALLINT, T.UINT, T.UBIGINT):
        return "BIGINT"
    if this in (T.DOUBLE, T.FLOAT):
        return "DOUBLE"
    if this == T.DECIMAL:
        return "DECIMAL"
    if this in (T.DATETIME, T.TIMESTAMP, T.DATETIME64, T.TIMESTAMPTZ):
        return "DATETIME"
    if this == T.DATE:
        return "DATE"
    return "VARCHAR"


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _row(r: Any) -> tuple[Any, ...]:
    # Most rows hold only plain values: convert the rare datetime / Decimal row by row
    # rather than calling _value on every cell (a 1,000-row DBA_OB_SERVERS is 14,000 cells).
    for v in r:
        if type(v) not in _PLAIN:
            return tuple(_value(x) for x in r)
    return tuple(r)


def _bad_field(e: Exception) -> ObError:
    text = str(e)
    # sqlglot: "Column 'x' could not be resolved" / "Unknown column: x".
    name = text.split("'")[1] if text.count("'") >= 2 else text
    return ObError("OB_ERR_BAD_FIELD_ERROR", name[:64], "field list")


def _resolve_tables(tree: exp.Expr, catalog: Catalog, conn: sa.Connection) -> dict[str, TableInfo]:
    """Check every table against the catalog (CTE names aside); lower-case every name."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    used: dict[str, TableInfo] = {}
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name in ctes and not table.text("db"):
            continue
        info = catalog.get(conn, name)
        used[name] = info
        # The schema is oceanbase or absent (checked by sql.reads): drop it for the engine.
        table.set("db", None)
    for ident in tree.find_all(exp.Identifier):
        ident.set("this", ident.this.lower())
        ident.set("quoted", False)
    return used


def _headers(tree: exp.Query) -> list[str | None]:
    """The result header of each outer projection as MySQL prints it (the alias, the column
    as written, else the expression's text); None for a star (expanded later)."""
    out: list[str | None] = []
    for p in tree.selects:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            out.append(None)
        elif isinstance(p, exp.Alias):
            out.append(p.alias)
        elif isinstance(p, exp.Column):
            out.append(p.name)
        elif p.meta.get(reads.TYPED):
            out.append(p.meta[reads.TYPED])
        elif isinstance(p, exp.CurrentSchema):
            out.append("DATABASE()")
        else:
            out.append(p.sql(ObMySQL))
    return out


def _text_vs_literals(node: exp.Expr) -> bool:
    """Whether ``node`` compares a text column with string literals only (``status !=
    'active'``, ``zone IN ('z1', 'z2')``)."""
    if isinstance(node, exp.In):
        lhs, rhs = node.this, list(node.expressions)
        if not rhs or node.args.get("query") is not None:
            return False
    else:
        lhs, rhs = node.this, [node.expression]
        if isinstance(lhs, exp.Literal):
            lhs, rhs = node.expression, [lhs]
    return (
        isinstance(lhs, exp.Column)
        and lhs.type is not None
        and lhs.type.is_type(*exp.DataType.TEXT_TYPES)
        and all(isinstance(r, exp.Literal) and r.is_string for r in rhs)
    )


def _case_insensitive(node: exp.Expr) -> exp.Expr:
    """``node`` compared as MySQL's default collation does, without regard to case (OceanBase's
    tools write ``status != "active"`` of a column that holds ``ACTIVE``)."""
    lits = node.expressions if isinstance(node, exp.In) else [node.this, node.expression]
    for lit in lits:
        if isinstance(lit, exp.Literal):
            lit.replace(exp.Literal.string(lit.this.lower()))
    col = next(c for c in [node.this, node.expression] if isinstance(c, exp.Column))
    col.replace(exp.Lower(this=col.copy()))
    return node


def _rewrite(tree: exp.Expr, dialect: str) -> exp.Expr:
    """MySQL meaning on the engine: DATABASE(), case-insensitive LIKE and comparisons of a
    text column with string literals, the functions the engine lacks (as calls of the ``ob_*``
    Python functions on SQLite), and a loose GROUP BY on PostgreSQL
    (:mod:`rootservice.db.loose_group_by`)."""

    def fix(node: exp.Expr) -> exp.Expr:
        if dialect == "postgres" and isinstance(node, exp.Select):
            any_value_of_ungrouped(node)  # MySQL's loose GROUP BY
            return node
        if isinstance(node, (exp.EQ, exp.NEQ, exp.In)) and _text_vs_literals(node):
            return _case_insensitive(node)
        if isinstance(node, exp.CurrentSchema):
            return exp.Literal.string(SCHEMA)
        if isinstance(node, exp.Like) and dialect == "postgres":
            return exp.ILike(**node.args)  # keeps NOT (negate) and ESCAPE
        if isinstance(node, (exp.CurrentTimestamp)) or (
            isinstance(node, exp.Anonymous) and node.name.lower() == "now"
        ):
            if dialect == "sqlite":
                # The database's clock (UTC), as PostgreSQL's below.
                return exp.Anonymous(this="DATETIME", expressions=[exp.Literal.string("now")])
            return exp.AtTimeZone(this=exp.CurrentTimestamp(), zone=exp.Literal.string("UTC"))
        if isinstance(node, exp.Anonymous) and node.name.lower() == "unix_timestamp":
            arg = node.expressions[0] if node.expressions else None
            if dialect == "sqlite":
                now = exp.Anonymous(this="DATETIME", expressions=[exp.Literal.string("now")])
                return exp.Anonymous(this="ob_unix_timestamp", expressions=[arg or now])
            if arg is not None:
                # MySQL keeps the argument's fractional seconds (a DATETIME(6) gives
                # microseconds: obagent reads a server's start time in microseconds so).
                return exp.Extract(this=exp.var("EPOCH"), expression=arg)
            now_utc = exp.AtTimeZone(this=exp.CurrentTimestamp(), zone=exp.Literal.string("UTC"))
            return exp.Cast(
                this=exp.Extract(this=exp.var("EPOCH"), expression=now_utc),
                to=exp.DataType.build("BIGINT"),
            )
        if isinstance(node, exp.SubstringIndex):
            if dialect == "sqlite":
                return exp.Anonymous(
                    this="ob_substring_index",
                    expressions=[node.this, node.args["delimiter"], node.args["count"]],
                )
            s, d, n = (
                node.this.sql("postgres"),
                node.args["delimiter"].sql("postgres"),
                node.args["count"].sql("postgres"),
            )
            parts = f"string_to_array({s}, {d})"
            return sqlglot.parse_one(
                f"CASE WHEN {n} >= 0 THEN array_to_string(({parts})[1:{n}], {d}) "
                f"ELSE array_to_string(({parts})[array_length({parts}, 1) + {n} + 1:], {d}) END",
                read="postgres",
            )
        if isinstance(node, exp.UnixToTime):
            if dialect == "sqlite":
                return exp.Anonymous(this="ob_from_unixtime", expressions=[node.this])
            return exp.AtTimeZone(
                this=exp.Anonymous(this="to_timestamp", expressions=[node.this]),
                zone=exp.Literal.string("UTC"),
            )
        if isinstance(node, exp.TimestampDiff):
            unit = node.text("unit").upper() or "SECOND"
            if dialect == "sqlite":
                return exp.Anonymous(
                    this="ob_timestampdiff",
                    expressions=[exp.Literal.string(unit), node.expression, node.this],
                )
            seconds = exp.Extract(
                this=exp.var("EPOCH"),
                expression=exp.Sub(this=node.this, expression=node.expression),
            )
            div = {"MICROSECOND": 1e-6, "SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}.get(
                unit, 86400 * 7 if unit == "WEEK" else 1
            )
            return exp.Cast(
                this=exp.Anonymous(
                    this="trunc",
                    expressions=[exp.Div(this=seconds, expression=exp.Literal.number(div))],
                ),
                to=exp.DataType.build("BIGINT"),
            )
        if dialect == "sqlite" and isinstance(node, (exp.DateAdd, exp.DateSub)):
            unit = node.text("unit").upper() or "DAY"
            amount = node.expression
            if isinstance(amount, exp.Interval):
                unit = amount.text("unit").upper() or unit
                amount = amount.this
            if isinstance(node, exp.DateSub):
                amount = exp.Neg(this=amount)
            return exp.Anonymous(
                this="ob_date_add", expressions=[node.this, amount, exp.Literal.string(unit)]
            )
        if dialect == "sqlite" and isinstance(node, (exp.Left, exp.Right, exp.Pad, exp.ConcatWs)):
            name = {exp.Left: "ob_left", exp.Right: "ob_right", exp.ConcatWs: "ob_concat_ws"}.get(
                type(node)
            )
            if isinstance(node, exp.Pad):
                name = "ob_lpad" if node.args.get("is_left") else "ob_rpad"
                args = [
                    node.this,
                    node.expression,
                    node.args.get("fill_pattern") or exp.Literal.string(" "),
                ]
            elif isinstance(node, exp.ConcatWs):
                args = list(node.expressions)
            else:
                args = [node.this, node.expression]
            return exp.Anonymous(this=name, expressions=args)
        if dialect == "sqlite" and isinstance(node, (exp.Floor, exp.Ceil)):
            return exp.Anonymous(
                this="ob_floor" if isinstance(node, exp.Floor) else "ob_ceil",
                expressions=[node.this],
            )
        return node

    # Children first, so that a replaced call keeps its already rewritten arguments.
    for node in reversed(list(tree.walk(bfs=False))):
        new = fix(node)
        if new is not node:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


def _parse_time(v: Any) -> dt.datetime | None:
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return dt.datetime.fromtimestamp(v, dt.UTC).replace(tzinfo=None)
    return dt.datetime.fromisoformat(str(v))


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f") if t.microsecond else t.strftime("%Y-%m-%d %H:%M:%S")


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None)
_UNIT_SECONDS = {
    "MICROSECOND": 1e-6,
    "SECOND": 1,
    "MINUTE": 60,
    "HOUR": 3600,
    "DAY": 86400,
    "WEEK": 604800,
}


def _timestampdiff(unit: str, a: Any, b: Any) -> int | None:
    ta, tb = _parse_time(a), _parse_time(b)
    if ta is None or tb is None:
        return None
    return int((tb - ta).total_seconds() / _UNIT_SECONDS.get(unit, 1))


def _date_add(t: Any, amount: Any, unit: str) -> str | None:
    base = _parse_time(t)
    if base is None or amount is None:
        return None
    return _fmt(base + dt.timedelta(seconds=float(amount) * _UNIT_SECONDS.get(unit, 86400)))


def _unix_timestamp(v: Any) -> int | float:
    """MySQL's UNIX_TIMESTAMP(t): whole seconds, with the fraction when ``t`` has one."""
    t = _parse_time(v)
    assert t is not None
    seconds = (t - _EPOCH).total_seconds()
    return seconds if t.microsecond else int(seconds)


def _substring_index(s: Any, delim: Any, count: Any) -> str | None:
    """MySQL's SUBSTRING_INDEX(s, delim, count): what precedes the count-th delimiter
    (from the right for a negative count); all of ``s`` when there are fewer."""
    if s is None or delim is None or count is None:
        return None
    s, delim, n = str(s), str(delim), int(count)
    if not delim or n == 0:
        return ""
    parts = s.split(delim)
    return delim.join(parts[:n] if n > 0 else parts[n:])


def _pad(left: bool) -> Callable[[Any, Any, Any], str | None]:
    def pad(s: Any, n: Any, fill: Any) -> str | None:
        if s is None or n is None or fill is None:
            return None
        s, n, fill = str(s), int(n), str(fill)
        if len(s) >= n or not fill:
            return s[:n]
        extra = (fill * n)[: n - len(s)]
        return extra + s if left else s + extra

    return pad


# MySQL's functions that SQLite 3.40 lacks, registered on each read connection (deterministic
# where MySQL's are; NULL in, NULL out).
_SQLITE_FUNCTIONS: dict[str, tuple[int, Callable[..., Any]]] = {
    "ob_unix_timestamp": (-1, lambda *a: None if a[0] is None else _unix_timestamp(a[0])),
    "ob_substring_index": (3, _substring_index),
    "ob_from_unixtime": (1, lambda v: None if v is None else _fmt(_parse_time(float(v)))),  # type: ignore[arg-type]
    "ob_timestampdiff": (3, _timestampdiff),
    "ob_date_add": (3, _date_add),
    "ob_left": (2, lambda s, n: None if s is None or n is None else str(s)[: max(0, int(n))]),
    "ob_right": (
        2,
        lambda s, n: None if s is None or n is None else (str(s)[-int(n) :] if int(n) > 0 else ""),
    ),
    "ob_lpad": (3, _pad(True)),
    "ob_rpad": (3, _pad(False)),
    "ob_concat_ws": (
        -1,
        lambda sep, *a: None if sep is None else str(sep).join(str(x) for x in a if x is not None),
    ),
    "ob_floor": (1, lambda v: None if v is None else math.floor(v)),
    "ob_ceil": (1, lambda v: None if v is None else math.ceil(v)),
}


@contextmanager
def _read_only(conn: sa.Connection, timeout_us: int) -> Iterator[None]:
    """A read-only transaction with a statement timeout on ``conn``."""
    if conn.in_transaction():  # the catalog's first read autobegan one: end it
        conn.rollback()
    if conn.dialect.name == "postgresql":
        with conn.begin():
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))
            conn.execute(
                sa.text("SELECT set_config('statement_timeout', :v, true)"),
                {"v": str(max(1, timeout_us // 1000))},
            )
            yield
        return
    raw = conn.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection)
    for name, (n, fn) in _SQLITE_FUNCTIONS.items():
        raw.create_function(name, n, fn)
    deadline = time.monotonic() + timeout_us / 1e6
    # Called every 1000 virtual-machine steps; non-zero aborts the statement.
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    raw.execute("PRAGMA query_only = ON")
    try:
        with conn.begin():
            yield
    finally:
        raw.set_progress_handler(None, 0)
        raw.execute("PRAGMA query_only = OFF")


def _default_order(tree: exp.Expr, used: dict[str, TableInfo]) -> None:
    if not isinstance(tree, exp.Select) or tree.args.get("order") or tree.args.get("group"):
        return
    if tree.args.get("joins") or tree.args.get("distinct") or tree.find(exp.AggFunc):
        return
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or table.name not in used:
        return
    ref = table.alias_or_name
    keys = [exp.column(c, table=ref) for c in DEFAULT_ORDER.get(table.name, ())]
    if keys:
        tree.order_by(*keys, copy=False)


def run_query(
    conn: sa.Connection,
    catalog: Catalog,
    query: ast.Query,
    *,
    timeout_us: int,
    max_rows: int,
) -> QueryResult:
    """Run a checked read on ``conn`` (a read connection, no transaction begun) within
    ``timeout_us`` microseconds, returning at most ``max_rows`` rows.

    Raises ``ObError``: OB_TABLE_NOT_EXIST (1146) for a table that is not a system table or
    view, OB_ERR_BAD_FIELD_ERROR (1054) for an unknown column, OB_TIMEOUT when the timeout
    passes, OB_INVALID_ARGUMENT for what the database refuses to evaluate (e.g. comparing a
    string with an integer column on PostgreSQL)."""
    dialect = "postgres" if conn.dialect.name == "postgresql" else "sqlite"
    sql, columns, types = _compiled(conn, catalog, query, dialect)
    try:
        with _read_only(conn, timeout_us):
            # psycopg reads % as a placeholder even without parameters.
            cursor = conn.exec_driver_sql(sql.replace("%", "%%") if dialect == "postgres" else sql)
            fetched = cursor.fetchmany(max_rows + 1)
            cursor.close()
    except sa.exc.OperationalError as e:
        text = db_error_summary(e)
        if "interrupted" in text or "statement timeout" in text:
            raise ObError(
                "OB_TIMEOUT", detail="the SELECT ran longer than select_timeout"
            ) from None
        raise ObError("OB_INVALID_ARGUMENT", "the SELECT", detail=text) from None
    except sa.exc.DBAPIError as e:
        raise ObError("OB_INVALID_ARGUMENT", "the SELECT", detail=db_error_summary(e)) from None
    rows = [_row(r) for r in fetched[:max_rows]]
    return QueryResult(columns, types, rows, len(fetched) > max_rows)


PLAN_CACHE_SIZE = 256
"""Compiled reads kept per process (:func:`_compiled`): dashboards repeat the same few
queries, and checking names and types with sqlglot costs more than running them."""

_plans: OrderedDict[tuple[int, str, str], tuple[Catalog, str, list[str], list[str]]] = OrderedDict()
_plans_lock = threading.Lock()


def _compiled(
    conn: sa.Connection, catalog: Catalog, query: ast.Query, dialect: str
) -> tuple[str, list[str], list[str]]:
    """``(engine SQL, headers, types)`` of ``query``, from the cache when this catalog
    compiled the same text for the same engine before (the catalog never changes once read,
    so neither does the plan); the least recently used of :data:`PLAN_CACHE_SIZE` go."""
    key = (id(catalog), query.text, dialect)
    with _plans_lock:
        hit = _plans.get(key)
        if hit is not None and hit[0] is catalog:
            _plans.move_to_end(key)
            return hit[1], hit[2], hit[3]
    sql, columns, types = _compile(conn, catalog, query, dialect)
    with _plans_lock:
        _plans[key] = (catalog, sql, columns, types)
        _plans.move_to_end(key)
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return sql, list(columns), list(types)


def _compile(
    conn: sa.Connection, catalog: Catalog, query: ast.Query, dialect: str
) -> tuple[str, list[str], list[str]]:
    """Resolve, type and transpile ``query`` for ``dialect``; raises as :func:`run_query`."""
    tree = query.tree.copy()
    if not isinstance(tree, exp.Query):  # pragma: no cover - sql.reads gives only queries
        raise ObError("ER_NOT_SUPPORTED_YET", type(tree).__name__)
    for p, header in zip(tree.selects, _headers(tree), strict=True):
        if header is not None:
            p.meta["header"] = header
    used = _resolve_tables(tree, catalog, conn)
    schema: dict[str, object] = {
        name: {c.name.lower(): _sqlglot_type(c.mysql_type) for c in info.columns}
        for name, info in used.items()
    }
    try:
        tree = qualify(tree, schema=schema, dialect="mysql", quote_identifiers=False)
        tree = annotate_types(tree, schema=schema, dialect="mysql")
    except OptimizeError as e:
        raise _bad_field(e) from None
    except SqlglotError as e:
        raise ObError("ER_NOT_SUPPORTED_YET", str(e)[:64]) from None
    assert isinstance(tree, exp.Query)
    view_cols = {c.name.lower() for i in used.values() if i.kind == "VIEW" for c in i.columns}
    columns: list[str] = []
    types: list[str] = []
    for p in tree.selects:
        types.append(_mysql_type_name(p.type))
        header = p.meta.get("header") or p.unalias().meta.get("header")
        if header is None:  # expanded from * / t.*: the product's spelling
            name = p.alias_or_name
            header = name.upper() if name in view_cols else name
        columns.append(header)
    # Output names are positional: alias each projection _c<i> so duplicate headers and any
    # case survive every engine, and map them back to the headers.
    renamed: dict[str, str] = {}
    for i, p in enumerate(tree.selects):
        renamed.setdefault(p.alias_or_name, f"_c{i}")
        p.set("alias", exp.to_identifier(f"_c{i}"))
    order = tree.args.get("order")
    if order is not None:  # ORDER BY an output name follows its new alias
        for col in order.find_all(exp.Column):
            if not col.table and col.name in renamed:
                col.set("this", exp.to_identifier(renamed[col.name]))
    _default_order(tree, used)
    tree = _rewrite(tree, dialect)
    return tree.sql(dialect, identify=True), columns, types
