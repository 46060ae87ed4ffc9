"""The read statements of the admin language, parsed and checked with sqlglot.

Dashboards and the MySQL clients send MySQL's read statements: a full ``SELECT`` (joins,
GROUP BY / HAVING, subqueries, CTEs, UNION), ``SHOW [FULL] TABLES [FROM db] [LIKE 'p']``,
``SHOW DATABASES | SCHEMAS [LIKE 'p']``, ``SHOW [FULL] COLUMNS | FIELDS FROM t [FROM db]
[LIKE 'p']`` and ``DESC | DESCRIBE t``. :func:`is_read` recognises them by their first word;
:func:`parse_read` parses one with sqlglot (``read="mysql"``) and checks it:

* exactly one statement;
* only reads: every node of the tree is of a kind in :data:`_ALLOWED_NODES` (no INSERT /
  UPDATE / DELETE / MERGE / DDL, no ``INTO``, no ``FOR UPDATE`` / ``LOCK IN SHARE MODE``, no
  writable CTE, no ``SET``, no ``@@`` or ``@`` variables);
* only the functions of :data:`ALLOWED_FUNCTIONS` (anything else, e.g. ``pg_sleep``,
  ``sleep``, ``load_extension``, ``set_config``, ``benchmark``, is refused by name);
* tables in no schema or in ``oceanbase`` (``information_schema`` is the MySQL endpoint's
  business and is refused here with a message saying so); whether a table is one of the system
  tables and views is decided by the executor against the database's catalog
  (:mod:`rootservice.db.query_repo`), which this package may not import;
* at most :data:`MAX_NODES` nodes and :data:`MAX_DEPTH` levels.

Refusals (:class:`~obcommon.errors.ObError`): ``ER_PARSE_ERROR`` (1064, ``near '...'`` as
:mod:`sql.parser` words it) for a syntax error or several statements,
``ER_NOT_SUPPORTED_YET`` (1235, MySQL's "This version of MySQL doesn't yet support '%s'") for
a shape or a function that is not a read, ``OB_TABLE_NOT_EXIST`` (1146) for another schema.
"""

from __future__ import annotations

import functools
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from obcommon.errors import ObError
from sql import ast
from sql.mysql_dialect import ObMySQL

MAX_NODES = 5_000
"""Nodes a read statement's tree may have (a dashboard query has a few hundred)."""

MAX_DEPTH = 200
"""Levels a read statement's tree may have (sqlglot recurses over them)."""

SCHEMA = "oceanbase"
"""The one database the RS shows (``SELECT DATABASE()``, ``SHOW DATABASES``)."""

# The first word (after blanks, comments and opening parentheses) that makes a statement a
# read; SHOW is a read only for the objects below (SHOW PARAMETERS / GRANTS stay in the lark
# grammar).
_FIRST = re.compile(
    r"(?:\s+|--[ \t][^\n]*|--$|#[^\n]*|/\*.*?\*/|\()*"
    r"(?P<word>SELECT|WITH|DESC|DESCRIBE|SHOW)\b"
    r"(?P<rest>(?:\s+|/\*.*?\*/)+(?:FULL(?:\s+|/\*.*?\*/)+)?(?P<what>\w+))?",
    re.IGNORECASE | re.DOTALL,
)
_SHOW_READS = {"TABLES", "DATABASES", "SCHEMAS", "COLUMNS", "FIELDS"}

# Function name (as MySQL spells it, lower case) -> the sqlglot node MySQL's parser gives it,
# or None when sqlglot leaves it anonymous. The allowlist.
ALLOWED_FUNCTIONS: dict[str, type[exp.Expr] | None] = {
    "count": exp.Count,
    "sum": exp.Sum,
    "avg": exp.Avg,
    "min": exp.Min,
    "max": exp.Max,
    "group_concat": exp.GroupConcat,
    "if": exp.If,
    "ifnull": exp.Coalesce,
    "coalesce": exp.Coalesce,
    "nullif": exp.Nullif,
    "concat": exp.Concat,
    "concat_ws": exp.ConcatWs,
    "upper": exp.Upper,
    "lower": exp.Lower,
    "length": exp.Length,
    "char_length": exp.Length,
    "substring": exp.Substring,
    "substring_index": exp.SubstringIndex,
    "left": exp.Left,
    "right": exp.Right,
    "trim": exp.Trim,
    "replace": exp.Replace,
    "locate": exp.StrPosition,
    "lpad": exp.Pad,
    "rpad": exp.Pad,
    "round": exp.Round,
    "floor": exp.Floor,
    "ceil": exp.Ceil,
    "abs": exp.Abs,
    "mod": exp.Mod,
    "greatest": exp.Greatest,
    "least": exp.Least,
    "now": None,
    "current_timestamp": exp.CurrentTimestamp,
    "date": exp.TsOrDsToDate,
    "date_format": exp.TimeToStr,
    "timestampdiff": exp.TimestampDiff,
    "datediff": exp.DateDiff,
    "unix_timestamp": None,
    "from_unixtime": exp.UnixToTime,
    "date_add": exp.DateAdd,
    "date_sub": exp.DateSub,
    "cast": exp.Cast,
    "database": exp.CurrentSchema,
}
_ALLOWED_FUNC_NODES = tuple({t for t in ALLOWED_FUNCTIONS.values() if t is not None})
_ALLOWED_ANONYMOUS = {n for n, t in ALLOWED_FUNCTIONS.items() if t is None}

# Every other kind of node a read may contain: query structure, names, literals, operators.
_ALLOWED_NODES: tuple[type[exp.Expr], ...] = (
    exp.Select,
    exp.Union,
    exp.Subquery,
    exp.With,
    exp.CTE,
    exp.From,
    exp.Join,
    exp.Where,
    exp.Group,
    exp.Having,
    exp.Order,
    exp.Ordered,
    exp.Limit,
    exp.Offset,
    exp.Distinct,
    exp.Table,
    exp.TableAlias,
    exp.Alias,
    exp.Column,
    exp.Identifier,
    exp.Star,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.Tuple,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Xor,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.EQ,
    exp.NEQ,
    exp.NullSafeEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.In,
    exp.Between,
    exp.Exists,
    exp.Case,
    exp.DataType,
    exp.DataTypeParam,
    exp.Interval,
    exp.Var,
    exp.Any,
    exp.All,
    # What sqlglot's MySQL parser wraps date arguments in (DATE_FORMAT, DATE, DATEDIFF).
    exp.TsOrDsToTimestamp,
    exp.TsOrDsToDate,
    exp.TimeStrToTime,
)

_REFUSAL = "statements other than a read-only SELECT over the system tables and views"


def is_read(text: str) -> bool:
    """Whether ``text`` is one of the read statements this module parses (by its first
    word: SELECT, WITH, ``(``, DESC, DESCRIBE, or SHOW [FULL] TABLES / DATABASES / SCHEMAS /
    COLUMNS / FIELDS)."""
    m = _FIRST.match(text)
    if m is None:
        return False
    if m["word"].upper() != "SHOW":
        return True
    return (m["what"] or "").upper() in _SHOW_READS


def _syntax_error(text: str, near: str = "", line: int = 1) -> ObError:
    return ObError(
        "ER_PARSE_ERROR",
        "check the manual that corresponds to your OceanBase version for the right syntax "
        f"to use near '{near[:80]}' at line {line}",
    )


def _error_line(e: ParseError) -> int:
    line = e.errors[0].get("line") if e.errors else None
    return line if isinstance(line, int) else 1


def _near(text: str, e: ParseError) -> str:
    # sqlglot reports the offending token's line and column (1-based).
    for err in e.errors:
        line, col = err.get("line"), err.get("col")
        if isinstance(line, int) and isinstance(col, int):
            lines = text.splitlines(keepends=True)
            if 1 <= line <= len(lines):
                start = sum(len(x) for x in lines[: line - 1])
                highlight = str(err.get("highlight") or "")
                pos = start + max(0, col - len(highlight))
                return text[pos:]
    return ""


def _refuse(what: str) -> ObError:
    return ObError("ER_NOT_SUPPORTED_YET", f"{what[:64]} ({_REFUSAL})")


def _check_bounds(tree: exp.Expr) -> None:
    # Iterative, so a deep tree cannot exhaust the Python stack here.
    count = 0
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            raise ObError(
                "ER_NOT_SUPPORTED_YET",
                f"a statement of more than {MAX_NODES} nodes or {MAX_DEPTH} levels",
            )
        for child in node.iter_expressions():
            stack.append((child, depth + 1))


def _check_node(node: exp.Expr) -> None:
    if isinstance(node, exp.Anonymous):
        name = str(node.name).lower()
        if name not in _ALLOWED_ANONYMOUS:
            raise _refuse(f"function {name}")
        return
    if isinstance(node, (*_ALLOWED_FUNC_NODES, *_ALLOWED_NODES)):
        if isinstance(node, exp.Select) and (node.args.get("locks") or node.args.get("into")):
            raise _refuse("SELECT ... FOR UPDATE / INTO")
        if isinstance(node, exp.Table):
            _check_schema(node)
        return
    if isinstance(node, exp.Func):
        raise _refuse(f"function {node.sql_name().lower()}")
    raise _refuse(type(node).__name__.upper())


def _check_schema(table: exp.Table) -> None:
    if table.args.get("catalog") is not None:
        raise ObError("OB_TABLE_NOT_EXIST", table.sql("mysql")[:64])
    db = table.text("db")
    if not db or db.lower() == SCHEMA:
        return
    if db.lower() == "information_schema":
        raise ObError(
            "ER_NOT_SUPPORTED_YET",
            "information_schema through this path (the MySQL endpoint answers it)",
        )
    raise ObError("OB_TABLE_NOT_EXIST", f"{db[:64]}.{table.name[:64]}")


def _check_query(tree: exp.Expr, text: str) -> ast.Query:
    _check_bounds(tree)
    for node in tree.walk():
        _check_node(node)
    if isinstance(tree, exp.Query):
        for p in tree.selects:
            typed = typed_text(text, p)
            if typed is not None:
                p.meta[TYPED] = typed
    return ast.Query(tree)


TYPED = "typed"
"""``meta`` key of an outer projection's text as the user typed it (:func:`typed_text`)."""


def typed_text(text: str, node: exp.Expr) -> str | None:
    """The slice of ``text`` that ``node`` was parsed from, for MySQL's result headers (MySQL
    names an unaliased expression column by its text as typed: ``count(*)``, not
    ``COUNT(*)``). sqlglot records where identifiers, literals and function names start
    and end, not keywords nor closing parentheses: the span runs from the first to the last
    recorded token, is extended over the parentheses it leaves open, and is kept only when
    it parses back to the same expression (else None: the caller prints sqlglot's SQL)."""
    spans = [(n.meta["start"], n.meta["end"]) for n in node.walk() if "start" in n.meta]
    if not spans or isinstance(node, (exp.Alias, exp.Column, exp.Star)):
        return None
    start = min(a for a, _ in spans)
    end = max(b for _, b in spans) + 1
    depth = text.count("(", start, end) - text.count(")", start, end)
    for _ in range(len(text)):
        if depth <= 0 or end >= len(text):
            break
        ch = text[end]
        end += 1
        depth += 1 if ch == "(" else -1 if ch == ")" else 0
    typed = text[start:end].strip()
    try:
        again = sqlglot.parse_one(f"SELECT {typed}", read="mysql")
    except (ParseError, TokenError, RecursionError, ValueError):
        return None
    if not isinstance(again, exp.Select) or len(again.selects) != 1:
        return None
    return typed if again.selects[0] == node else None


def _like(show: exp.Show) -> str | None:
    like = show.args.get("like")
    return None if like is None else like.name


def _db_of(show: exp.Show) -> str | None:
    db = show.args.get("db")
    return None if db is None else db.name


def _check_db(db: str | None) -> None:
    if db is not None and db.lower() != SCHEMA:
        raise ObError("ER_BAD_DB_ERROR", db[:64])


def _show(show: exp.Show) -> ast.Statement:
    what = show.name.upper()
    if what in ("DATABASES", "SCHEMAS"):
        return ast.ShowDatabases(like=_like(show))
    db = _db_of(show)
    if what == "TABLES":
        _check_db(db)
        return ast.ShowTables(full=bool(show.args.get("full")), like=_like(show))
    if what in ("COLUMNS", "FIELDS"):
        target = show.args.get("target")
        if target is None:
            raise _refuse(f"SHOW {what}")
        name = target.name
        if "." in name:  # SHOW COLUMNS FROM db.t
            db, name = name.split(".", 1)
        _check_db(db)
        return ast.Describe(table=name, full=bool(show.args.get("full")), like=_like(show))
    raise _refuse(f"SHOW {what}")


_FIELDS = re.compile(r"^(\s*SHOW\s+(?:FULL\s+)?)FIELDS\b", re.IGNORECASE)


CACHED_TEXT_CHARS = 4096
"""Reads up to this long are remembered (:func:`parse_read`): dashboards send the same few
texts again and again, and sqlglot's parse costs milliseconds. Longer ones are parsed every
time, so the cache (256 entries) stays under about 1 MiB of text."""


def parse_read(text: str) -> ast.Statement:
    """Parse and check one read statement (:func:`is_read` is true of it) into an
    :class:`ast.Query`, :class:`ast.ShowTables`, :class:`ast.ShowDatabases` or
    :class:`ast.Describe`. Raises ``ObError`` as the module docstring says. The result is
    shared between callers (the executor copies a Query's tree before changing it)."""
    if len(text) <= CACHED_TEXT_CHARS:
        return _parse_read_cached(text)
    return _parse_read(text)


@functools.lru_cache(maxsize=256)
def _parse_read_cached(text: str) -> ast.Statement:
    return _parse_read(text)


def _parse_read(text: str) -> ast.Statement:
    # sqlglot knows SHOW COLUMNS only; FIELDS is MySQL's synonym.
    text = _FIELDS.sub(r"\1COLUMNS", text, count=1)
    try:
        trees = [t for t in sqlglot.parse(text, read="mysql") if t is not None]
    except ParseError as e:
        near = _near(text, e)
        raise _syntax_error(text, near, _error_line(e)) from None
    except (TokenError, RecursionError, ValueError):
        raise _syntax_error(text) from None
    if len(trees) != 1:
        if not trees:
            raise ObError("ER_EMPTY_QUERY")
        second = trees[1].sql(ObMySQL)
        raise _syntax_error(text, second)
    tree = trees[0]
    if isinstance(tree, exp.Show):
        return _show(tree)
    if isinstance(tree, exp.Describe):
        table = tree.this
        if (
            not isinstance(table, exp.Table)
            or tree.args.get("kind")
            or tree.args.get("expressions")
        ):
            raise _refuse("this DESCRIBE")
        _check_db(table.text("db") or None)
        return ast.Describe(table=table.name)
    if not isinstance(tree, exp.Query):
        raise _refuse(type(tree).__name__.upper())
    return _check_query(tree, text)


#: SHOW PARAMETERS WHERE cond: the condition over SHOW PARAMETERS' columns (OceanBase's, then
#: ``range``), answered as a read of GV$OB_PARAMETERS so it is checked like any SELECT. The
#: rows the view computes (min_observer_version, the tenants' compatible) have no
#: __all_sys_parameter_info row: their source is the table they are read from.
_SHOW_PARAMETERS_WHERE = re.compile(
    r"\A\s*SHOW\s+PARAMETERS\s+WHERE\s+(?P<cond>.+?)\s*;?\s*\Z", re.I | re.S
)
_SHOW_PARAMETERS_SELECT = (
    "SELECT * FROM (SELECT g.ZONE AS zone, 'observer' AS svr_type, g.SVR_IP AS svr_ip, "
    "g.SVR_PORT AS svr_port, g.NAME AS name, g.DATA_TYPE AS data_type, g.VALUE AS value, "
    "g.INFO AS info, g.SECTION AS section, g.SCOPE AS scope, "
    "COALESCE(d.source, CASE WHEN g.NAME = 'min_observer_version' "
    "THEN '__all_cluster_version' ELSE '__all_sys_parameter' END) AS source, "
    "g.EDIT_LEVEL AS edit_level, g.DEFAULT_VALUE AS default_value, g.ISDEFAULT AS isdefault, "
    "COALESCE(d.value_range, '') AS `range` FROM GV$OB_PARAMETERS g "
    "LEFT JOIN __all_sys_parameter_info d ON d.name = g.NAME) AS p WHERE ({cond}) "
    "ORDER BY svr_ip, svr_port, name"
)


def show_parameters_where(text: str) -> ast.Statement | None:
    """``SHOW PARAMETERS WHERE cond`` as the checked read of GV$OB_PARAMETERS it stands for
    (the columns of SHOW PARAMETERS, the rows of the servers that have parameters); None
    when ``text`` is not that statement. Raises as :func:`parse_read`."""
    m = _SHOW_PARAMETERS_WHERE.match(text)
    if m is None:
        return None
    return parse_read(_SHOW_PARAMETERS_SELECT.format(cond=m["cond"]))
