"""The MySQL endpoint's pure parts (rootservice.api.mysql_session, mysql_results and
mysql_server): which side answers a statement, ObError -> ERR packet (own code and
SQLSTATE), OK with info, and the column types of a result set."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from mysql_mimic.types import Capabilities, ColumnType, ServerStatus

from obcommon.errors import ObError
from rootservice.api.mysql_results import (
    column_type,
    error_message,
    error_packet,
    ok_packet,
    result_set,
)
from rootservice.api.mysql_session import LOCAL, RS, route
from rootservice.api.statements import Result

P41 = Capabilities.CLIENT_PROTOCOL_41


def test_route_keeps_client_chatter_local_and_sends_the_rest_to_the_rs() -> None:
    for sql in (
        "SELECT @@version_comment LIMIT 1",
        "select DATABASE()",
        "SELECT USER(), CONNECTION_ID()",
        "SELECT @@session.autocommit, @@max_allowed_packet",
        "SET NAMES utf8mb4",
        "set autocommit=1",
        "USE oceanbase",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "SHOW VARIABLES LIKE 'version%'",
        "SHOW SESSION VARIABLES",
        "SHOW WARNINGS",
        "/* c */ SELECT @@tx_isolation",
        "SELECT * FROM information_schema.tables",
        "DESC information_schema.columns",
    ):
        assert route(sql) == LOCAL, sql
    for sql in (
        "ALTER SYSTEM ADD SERVER '1.2.3.4:2882' ZONE 'z1'",
        "SELECT * FROM __all_server",
        "SELECT zone, count(*) FROM DBA_OB_SERVERS GROUP BY zone",
        "SELECT (SELECT count(*) FROM __all_server)",
        # No table, but nothing of the session's: the RS's checker answers (and refuses).
        "SELECT 1",
        "/* c */ SELECT 1 + 1",
        "SELECT pg_sleep(5)",
        "SELECT sleep(1)",
        "SELECT now()",
        "SHOW TABLES",
        "SHOW DATABASES",
        "SHOW GRANTS",
        "SHOW PARAMETERS LIKE 'lease_time'",
        "DESC __all_server",
        "CREATE USER u IDENTIFIED BY 'p'",
        "gibberish",
        "",
    ):
        assert route(sql) == RS, sql
    # An unqualified table is read in the session's database.
    assert route("SELECT * FROM tables", "information_schema") == LOCAL
    assert route("SELECT * FROM tables", "oceanbase") == RS


def test_error_packet_carries_the_obs_code_and_sqlstate() -> None:
    ob = ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail="server '1.2.3.4:5'")
    pkt = error_packet(P41, ob)
    assert pkt[0] == 0xFF and int.from_bytes(pkt[1:3], "little") == 4630
    assert pkt[3:9] == b"#HY000"
    assert pkt[9:].decode() == error_message(ob)
    assert error_message(ob).startswith("OB_SERVER_NOT_IN_WHITE_LIST: ")
    denied = ObError("ER_SPECIFIC_ACCESS_DENIED_ERROR", "ALTER SYSTEM")
    pkt = error_packet(P41, denied)
    assert int.from_bytes(pkt[1:3], "little") == 1227 and pkt[3:9] == b"#42000"
    assert pkt[9:].decode().startswith("Access denied; you need")  # MySQL's: no name
    # ob_errno.def's MySQL mapping where it has one (what clients test for: 1146 ...).
    for name, args, errno, state in [
        ("OB_TABLE_NOT_EXIST", ("oceanbase.t",), 1146, b"#42S02"),
        ("OB_ERR_BAD_FIELD_ERROR", ("x", "field list"), 1054, b"#42S22"),
        ("OB_INVALID_ARGUMENT", ("zone",), 1210, b"#HY000"),
        ("OB_NOT_SUPPORTED", ("x",), 1235, b"#0A000"),
        ("OB_TIMEOUT", (), 4012, b"#HY000"),  # no mapping: the OB code
    ]:
        e = ObError(name, *args)
        assert e.mysql_errno == errno
        pkt = error_packet(P41, e)
        assert (int.from_bytes(pkt[1:3], "little"), pkt[3:9]) == (errno, state), name
        assert e.code < 0 and abs(e.code) != errno or name == "OB_TIMEOUT"
    tls = error_packet(P41, ObError("ER_SECURE_TRANSPORT_REQUIRED"))
    assert int.from_bytes(tls[1:3], "little") == 3159 and tls[3:9] == b"#HY000"
    # Without CLIENT_PROTOCOL_41 there is no SQLSTATE; long messages are cut at 512 bytes.
    old = error_packet(Capabilities(0), code=1105, sqlstate="HY000", msg="x" * 2000)
    assert old[3:4] == b"x" and len(old) == 3 + 512


def test_ok_packet_has_affected_rows_and_info() -> None:
    st = ServerStatus(0)
    pkt = ok_packet(P41, st, 2, "server id(s) 3, 4")
    assert pkt[0] == 0 and pkt[1] == 2 and pkt.endswith(b"server id(s) 3, 4")
    bare = ok_packet(P41, st, 0, "")
    assert pkt[len(bare) :] == bytes([17]) + b"server id(s) 3, 4" and len(bare) == 7


def test_column_types_declared_or_inferred() -> None:
    assert column_type("BIGINT", []) is ColumnType.LONGLONG
    assert column_type("DECIMAL(10, 2)", []) is ColumnType.NEWDECIMAL
    assert column_type("VARCHAR(64)", []) is ColumnType.VAR_STRING
    assert column_type("DATETIME", []) is ColumnType.DATETIME
    assert column_type(None, [None, 5]) is ColumnType.LONGLONG
    assert column_type(None, [1.5]) is ColumnType.DOUBLE
    assert column_type(None, [Decimal("1.2")]) is ColumnType.NEWDECIMAL
    assert column_type(None, [dt.datetime(2026, 1, 2, 3, 4, 5)]) is ColumnType.DATETIME  # noqa: DTZ001 - naive as the tables
    assert column_type(None, ["a"]) is ColumnType.VAR_STRING
    assert column_type(None, [True]) is ColumnType.TINY
    assert column_type(None, [None]) is ColumnType.NULL
    rs = result_set(
        Result(
            columns=["n", "t", "s"],
            rows=[(1, dt.datetime(2026, 1, 2, 3, 4, 5), None)],  # noqa: DTZ001
            is_result_set=True,
            types=["BIGINT", "DATETIME", "VARCHAR"],
        )
    )
    assert [c.type for c in rs.columns] == [
        ColumnType.LONGLONG,
        ColumnType.DATETIME,
        ColumnType.VAR_STRING,
    ]
    assert list(rs.rows) == [(1, "2026-01-02 03:04:05", None)]


def _stream_with(data: bytes, max_payload_bytes: int) -> Any:
    import asyncio

    from rootservice.api.mysql_server import RsMysqlStream

    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return RsMysqlStream(reader, None, max_payload_bytes)  # type: ignore[arg-type]


def _packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def test_stream_reads_payloads_up_to_the_bound_and_closes_past_it() -> None:
    import asyncio

    from mysql_mimic.stream import ConnectionClosed

    async def read(data: bytes, bound: int) -> bytes:
        return await _stream_with(data, bound).read()  # type: ignore[no-any-return]

    body = b"\x03SELECT 1"
    assert asyncio.run(read(_packet(0, body), len(body))) == body  # at the bound
    with pytest.raises(ConnectionClosed):  # one byte past it: refused by the header
        asyncio.run(read(_packet(0, body), len(body) - 1))
    # A header announcing 16 MiB is refused before its body is read (none is sent here).
    with pytest.raises(ConnectionClosed):
        asyncio.run(read(b"\xff\xff\xff\x00", 4 * 1024 * 1024))
    with pytest.raises(ConnectionClosed):  # a connection that ends mid-packet
        asyncio.run(read(_packet(0, body)[:6], 1024))
