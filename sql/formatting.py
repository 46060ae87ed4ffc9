"""How ``obadmin`` prints answers, as the mysql client does: a ``+---+`` bordered table (or the
vertical ``*** 1. row ***`` form of a ``\\G`` statement) and ``N rows in set`` / ``Empty set``
for result sets, ``Query OK, N rows affected`` otherwise; JSON (one document per statement,
for every kind of reply) and CSV for scripts (docs/design/statements.md).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from tabulate import tabulate

from obcommon.errors import error_from_proto
from obcommon.proto import obrpc_pb2
from sql.client import Value, result_rows

FORMATS = ("table", "json", "csv")


def _text(value: int | float | str) -> str:
    return str(value)  # floats print as repr: shortest text that reads back the same


def _plural(n: int, word: str) -> str:
    # The mysql client says "1 row in set" but "0 rows affected".
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as the mysql client prints it: bordered table (NULL for nulls, numbers
    right-aligned, headers left-aligned) followed by ``N rows in set``; ``Empty set`` when
    there are no rows."""
    if not rows:
        return "Empty set"
    width = len(columns)
    aligns = []
    for i in range(width):
        values = [r[i] for r in rows if i < len(r) and r[i] is not None]
        numeric = bool(values) and all(isinstance(v, int | float) for v in values)
        aligns.append("right" if numeric else "left")
    cells = [[None if v is None else _text(v) for v in row] for row in rows]
    table = tabulate(
        cells,
        headers=list(columns),
        # "pretty" draws the mysql client's +---+ rules (none between rows) and, unlike the
        # other formats, pads headers by exactly one blank; alignment is set explicitly below.
        tablefmt="pretty",
        missingval="NULL",
        disable_numparse=True,  # '007' stays a string, not 7
        preserve_whitespace=True,
        colalign=aligns,
        headersglobalalign="left",
    )
    return f"{table}\n{_plural(len(rows), 'row')} in set"


def format_vertical(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as the mysql client prints a ``\\G`` statement: for each row a
    ``*************************** N. row ***************************`` line, then one
    ``name: value`` line per column with the names right-aligned; ``N rows in set`` after;
    ``Empty set`` when there are no rows."""
    if not rows:
        return "Empty set"
    width = max((len(c) for c in columns), default=0)
    lines: list[str] = []
    for n, row in enumerate(rows, start=1):
        lines.append(f"{'*' * 27} {n}. row {'*' * 27}")
        for name, value in zip(columns, row, strict=False):
            lines.append(f"{name.rjust(width)}: {'NULL' if value is None else _text(value)}")
    lines.append(f"{_plural(len(rows), 'row')} in set")
    return "\n".join(lines)


def format_json(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as a JSON array of objects, column -> value (ints stay ints, NULL is
    null), on one line: with ``--format json`` every statement prints one JSON document per
    line (JSON lines)."""
    objects = [dict(zip(columns, row, strict=False)) for row in rows]
    return json.dumps(objects, ensure_ascii=False)


def error_json(code: int, sqlstate: str, name: str, message: str) -> str:
    """An error as one JSON line: ``{"error": {"code": 4630, "sqlstate": "HY000", "name":
    "OB_SERVER_NOT_IN_WHITE_LIST", "message": "..."}}``; ``code`` is the number the mysql
    client shows (positive)."""
    doc = {"error": {"code": abs(code), "sqlstate": sqlstate, "name": name, "message": message}}
    return json.dumps(doc, ensure_ascii=False)


def format_csv(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as CSV (RFC 4180 quoting by the csv module): a header line, then one line
    per row. NULL is an empty field, as PostgreSQL's CSV output writes it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else _text(v) for v in row])
    return out.getvalue().rstrip("\n")


def format_ok(resp: obrpc_pb2.SqlResponse) -> str:
    """A statement without result set: ``Query OK, N rows affected`` then the ``info`` line."""
    text = f"Query OK, {_plural(resp.affected_rows, 'row')} affected"
    return f"{text}\n{resp.info}" if resp.info else text


def format_response(resp: obrpc_pb2.SqlResponse, fmt: str = "table", vertical: bool = False) -> str:
    """The text obadmin prints for one response, without a trailing newline.

    With ``fmt`` ``json`` every reply is one JSON line: a result set an array of objects
    (:func:`format_json`), an OK reply ``{"affected_rows": N, "info": "..."}``, an error
    :func:`error_json`. Otherwise an error gives its ``ObError.to_sql_text()`` line (to go to
    stderr), a result set is rendered as ``fmt`` (``table``, or the vertical form when
    ``vertical``: a ``\\G`` statement; ``csv``), anything else is ``Query OK...``.
    Raises ``ValueError`` for an unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}, expected one of {', '.join(FORMATS)}")
    err = error_from_proto(resp.error)
    if err is not None:
        if fmt == "json":
            return error_json(err.code, err.sqlstate, err.name, err.message)
        return err.to_sql_text()
    if not resp.is_result_set:
        if fmt == "json":
            doc = {"affected_rows": resp.affected_rows, "info": resp.info}
            return json.dumps(doc, ensure_ascii=False)
        return format_ok(resp)
    columns, rows = list(resp.columns), result_rows(resp)
    if fmt == "json":
        return format_json(columns, rows)
    if fmt == "csv":
        return format_csv(columns, rows)
    if vertical:
        return format_vertical(columns, rows)
    return format_table(columns, rows)
