"""The MySQL endpoint's result encoding: ``ObError`` -> ERR packet with its own
code and SQLSTATE, OK packets with affected rows and info, and the RS's
:class:`rootservice.api.statements.Result` -> mysql-mimic's typed ``ResultSet``.

mysql-mimic builds these packets itself but falls short where noted on each function; the
layout is MySQL's (never raw bytes for what mysql-mimic writes itself).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from mysql_mimic import ResultColumn, ResultSet, packets
from mysql_mimic.types import ColumnType, str_fixed, str_len, uint_1, uint_2

from obcommon.errors import ObError
from rootservice.api.statements import Result

__all__ = [
    "MAX_ERROR_MESSAGE_BYTES",
    "column_type",
    "error_message",
    "error_packet",
    "ok_packet",
    "result_set",
]

MAX_ERROR_MESSAGE_BYTES = 512
"""MySQL's ``MYSQL_ERRMSG_SIZE``: clients keep at most this much of an error message."""

# --------------------------------------------------------------------------- packets


def error_message(err: ObError) -> str:
    """The message of ``err``'s error packet: :meth:`ObError.to_sql_text` without its
    ``ERROR n (SQLSTATE): `` prefix (an OB error keeps its name, as obadmin prints it)."""
    text = err.to_sql_text()
    return text.split(": ", 1)[1] if ": " in text else text


def error_packet(
    capabilities: Any,
    err: ObError | None = None,
    *,
    code: int = 0,
    sqlstate: str = "",
    msg: str = "",
) -> bytes:
    """An ERR packet with ``err``'s MySQL error number (``ObError.mysql_errno``), SQLSTATE and :func:`error_message` (or
    the given ``code`` / ``sqlstate`` / ``msg``), cut to :data:`MAX_ERROR_MESSAGE_BYTES`.

    Built here because mysql-mimic's ``make_error`` takes the SQLSTATE from a fixed table of
    a dozen codes (every OceanBase error would go out as HY000 and 1227 as HY000 instead of
    42000); the layout is the same (0xFF, code, ``#`` + SQLSTATE with CLIENT_PROTOCOL_41,
    message)."""
    if err is not None:
        code, sqlstate, msg = err.mysql_errno, err.sqlstate, error_message(err)
    parts = [uint_1(0xFF), uint_2(code)]
    if packets.Capabilities.CLIENT_PROTOCOL_41 in capabilities:
        parts.append(str_fixed(1, b"#"))
        parts.append(str_fixed(5, (sqlstate or "HY000").encode("ascii")[:5].ljust(5, b"0")))
    body = msg.encode("utf-8", "replace")[:MAX_ERROR_MESSAGE_BYTES]
    return b"".join([*parts, body])


def ok_packet(capabilities: Any, status_flags: Any, affected_rows: int, info: str) -> bytes:
    """An OK packet with ``affected_rows`` and ``info`` (the text ``mysql`` prints after
    "Query OK"). mysql-mimic's ``make_ok`` has no info field: its packet is extended with
    the info as a length-encoded string, as MySQL's ``net_send_ok`` writes it
    (``net_store_data``) and MariaDB's client reads it (a bare ``string<EOF>`` makes the
    ``mariadb`` CLI fail with 2027 "malformed packet")."""
    ok = packets.make_ok(
        capabilities=capabilities, status_flags=status_flags, affected_rows=affected_rows
    )
    return ok + str_len(info.encode("utf-8", "replace")) if info else ok


# --------------------------------------------------------------------------- results

_TYPE_NAMES: dict[str, ColumnType] = {
    "BIGINT": ColumnType.LONGLONG,
    "INT": ColumnType.LONG,
    "INTEGER": ColumnType.LONG,
    "MEDIUMINT": ColumnType.INT24,
    "SMALLINT": ColumnType.SHORT,
    "TINYINT": ColumnType.TINY,
    "BOOLEAN": ColumnType.TINY,
    "BOOL": ColumnType.TINY,
    "DOUBLE": ColumnType.DOUBLE,
    "FLOAT": ColumnType.FLOAT,
    "REAL": ColumnType.DOUBLE,
    "DECIMAL": ColumnType.NEWDECIMAL,
    "NUMERIC": ColumnType.NEWDECIMAL,
    "VARCHAR": ColumnType.VAR_STRING,
    "CHAR": ColumnType.STRING,
    "TEXT": ColumnType.BLOB,
    "LONGTEXT": ColumnType.BLOB,
    "BLOB": ColumnType.BLOB,
    "VARBINARY": ColumnType.VAR_STRING,
    "DATETIME": ColumnType.DATETIME,
    "TIMESTAMP": ColumnType.TIMESTAMP,
    "DATE": ColumnType.DATE,
    "TIME": ColumnType.TIME,
    "JSON": ColumnType.JSON,
    "NULL": ColumnType.NULL,
}


def column_type(type_name: str | None, values: Sequence[Any]) -> ColumnType:
    """The MySQL column type of a result column: ``type_name`` (``BIGINT``, ``DECIMAL(10,
    2)``, ``VARCHAR(64)``...) when given and known, else inferred from the first non-NULL
    value (bool -> TINY, int -> LONGLONG, float -> DOUBLE, Decimal -> NEWDECIMAL, datetime ->
    DATETIME, date -> DATE, bytes -> BLOB, else VAR_STRING; all NULL -> NULL)."""
    if type_name:
        t = _TYPE_NAMES.get(type_name.split("(", 1)[0].strip().upper())
        if t is not None:
            return t
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            return ColumnType.TINY
        if isinstance(v, int):
            return ColumnType.LONGLONG
        if isinstance(v, float):
            return ColumnType.DOUBLE
        if isinstance(v, Decimal):
            return ColumnType.NEWDECIMAL
        if isinstance(v, dt.datetime):
            return ColumnType.DATETIME
        if isinstance(v, dt.date):
            return ColumnType.DATE
        if isinstance(v, bytes):
            return ColumnType.BLOB
        return ColumnType.VAR_STRING
    return ColumnType.VAR_STRING if type_name else ColumnType.NULL


def _text(v: Any) -> Any:
    # MySQL's text protocol: booleans as 0/1, datetimes with a space, the rest as str().
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    return v


def result_set(result: Result) -> ResultSet:
    """``Result`` (a result set) -> mysql-mimic's ``ResultSet`` with a typed column per
    name (:func:`column_type`, from ``result.types`` when given)."""
    n = len(result.columns)
    types = result.types if result.types and len(result.types) == n else [None] * n
    columns = [
        ResultColumn(
            name,
            column_type(types[i], () if _known(types[i]) else [r[i] for r in result.rows]),
        )
        for i, name in enumerate(result.columns)
    ]
    return ResultSet(rows=[_text_row(r) for r in result.rows], columns=columns)


def _known(type_name: str | None) -> bool:
    return bool(type_name) and type_name.split("(", 1)[0].strip().upper() in _TYPE_NAMES  # type: ignore[union-attr]


_PLAIN = frozenset({int, float, str, type(None)})


def _text_row(r: tuple[Any, ...]) -> tuple[Any, ...]:
    # Most rows are plain values already: convert only a row holding a bool or datetime.
    for v in r:
        if type(v) not in _PLAIN:
            return tuple(_text(x) for x in r)
    return r
