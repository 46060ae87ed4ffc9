"""The RS's MySQL-protocol endpoint (issue 11 item 1), on mysql-mimic, beside gRPC in the
RS's event loop on ``--mysql-addr`` (default ``127.0.0.1:2881``, OceanBase's SQL port).

What a client sends on connect and while browsing stays in mysql-mimic's session (``SET
NAMES`` / ``autocommit`` / ``@@`` variables, ``USE oceanbase``, ``SELECT`` without a table
such as ``SELECT @@version_comment`` / ``SELECT DATABASE()`` / ``SELECT 1``, BEGIN / COMMIT
/ ROLLBACK, ``SHOW VARIABLES [LIKE]``, ``SHOW WARNINGS``, ``information_schema`` queries);
every other statement goes to :func:`rootservice.api.dispatch.run_statement` on the
admission threads (:class:`rootservice.api.admission.Admission`, shared with gRPC), which
checks privileges, counts and audits it (:func:`route` decides).

Where mysql-mimic falls short, its classes are subclassed (never raw packets for what it
writes itself):

- errors: mysql-mimic maps a code to a SQLSTATE from a fixed table; :class:`RsConnection`
  sends each ``ObError`` with OceanBase's MySQL error number (``ObError.mysql_errno``: the
  MySQL mapping of ``ob_errno.def`` where there is one, ``ERROR 1146 (42S02)`` for
  OB_TABLE_NOT_EXIST, else the positive OB code, ``ERROR 4630 (HY000)``) and its SQLSTATE
  (:func:`error_packet`).
- OK packets: mysql-mimic sends a bare OK; :func:`ok_packet` adds ``affected_rows`` and the
  ``info`` text of :class:`rootservice.api.dispatch.Result`.
- logins: :mod:`rootservice.api.mysql_auth`; a refused login closes the connection (mysql-
  mimic would go on to the command phase), is counted (``logins_refused_total``) and
  audited as on the gRPC path.
- TLS: with the RS's ``rs.crt`` / ``rs.key`` and ``ca.crt`` (re-read on rotation), client
  certificate optional; required unless ``--insecure``: a plaintext login gets MySQL's 3159
  (``ER_SECURE_TRANSPORT_REQUIRED``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import re
import ssl
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, NoReturn

import sqlglot
from mysql_mimic import MysqlServer, ResultColumn, ResultSet, packets
from mysql_mimic import context as mimic_context
from mysql_mimic.auth import AuthInfo, AuthPlugin, AuthState, Success
from mysql_mimic.connection import Connection
from mysql_mimic.constants import KillKind
from mysql_mimic.control import TooManyConnections
from mysql_mimic.errors import ErrorCode, MysqlError, get_sqlstate
from mysql_mimic.intercept import value_to_expression
from mysql_mimic.results import ensure_result_set
from mysql_mimic.session import Session
from mysql_mimic.stream import ConnectionClosed, MysqlStream
from mysql_mimic.types import ColumnType, str_fixed, str_len, uint_1, uint_2
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables, SessionVariables
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.executor import execute as sqlglot_execute

from obcommon.errors import ObError
from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_pem
from rootservice.api.admin_servicer import admission_key
from rootservice.api.admission import Admission
from rootservice.api.dispatch import Forwarder, Result, run_statement
from rootservice.api.mysql_auth import (
    FAST_AUTH_SUCCESS,
    FastSuccess,
    LoginFacts,
    Refused,
    RsIdentityProvider,
    Sha2Cache,
)
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.auth.users import access_denied

log = logging.getLogger(__name__)

__all__ = [
    "RsConnection",
    "RsMysqlServer",
    "RsSession",
    "error_packet",
    "ok_packet",
    "result_set",
    "route",
    "start_mysql_server",
]

DATABASE = "oceanbase"
"""The one database of the endpoint (OceanBase's sys tenant database)."""
ALLOWED_DATABASES = frozenset({DATABASE, "information_schema"})

SERVER_VERSION = "5.7.25-OceanBase-v4 rootservice 0.1.0"
"""``@@version`` and the handshake's server version: MySQL 5.7 as OceanBase 4 announces
itself (clients pick their dialect from it), then what this is."""
VERSION_COMMENT = "OceanBase-style RootService (MySQL protocol)"

MAX_ERROR_MESSAGE_BYTES = 512
"""MySQL's ``MYSQL_ERRMSG_SIZE``: clients keep at most this much of an error message."""

# --------------------------------------------------------------------------- routing

# Statements mysql-mimic's session answers itself (the first keyword).
_LOCAL_WORDS = frozenset({"SET", "USE", "BEGIN", "START", "COMMIT", "ROLLBACK", "KILL"})
# SHOW forms answered from the session's variables (the word after SHOW [SESSION|GLOBAL]).
_LOCAL_SHOW = frozenset({"VARIABLES", "STATUS", "WARNINGS", "ERRORS"})
_COMMENT = re.compile(r"\s+|/\*.*?\*/|(?:--\s|#)[^\n]*(?:\n|$)", re.S)
_WORD = re.compile(r"[A-Za-z_@]+")
_INFO_SCHEMA = re.compile(r"\binformation_schema\b", re.I)
# What only the session can answer in a SELECT: @@ variables and mysql-mimic's information
# functions (mysql_mimic.session.mysql_function_mapping).
_SESSION_VALUE = re.compile(
    r"@@|\b(?:DATABASE|SCHEMA|CURRENT_SCHEMA|USER|CURRENT_USER|SESSION_USER|SYSTEM_USER"
    r"|CONNECTION_ID|VERSION|CURRENT_VERSION)\s*\(",
    re.I,
)

LOCAL = "local"
RS = "rs"


def _words(sql: str, n: int) -> list[str]:
    pos, out = 0, list[str]()
    while len(out) < n:
        m = _COMMENT.match(sql, pos)
        if m and m.end() > pos:
            pos = m.end()
            continue
        w = _WORD.match(sql, pos)
        if not w:
            break
        out.append(w.group(0).upper())
        pos = w.end()
    return out


def route(sql: str, database: str | None = None) -> str:
    """Who answers ``sql``: :data:`LOCAL` (mysql-mimic's session: SET, USE, transactions,
    KILL, ``SHOW [SESSION|GLOBAL] VARIABLES|STATUS|WARNINGS|ERRORS``, a SELECT of @@
    variables or session functions such as ``DATABASE()``, ``information_schema`` queries) or :data:`RS` (everything else, including what
    does not parse: the RS's parser answers with its own error). ``database`` is the
    session's current database."""
    words = _words(sql, 3)
    if not words:
        return RS
    first = words[0]
    if first in _LOCAL_WORDS:
        return LOCAL
    if first == "SHOW":
        rest = [w for w in words[1:] if w not in ("SESSION", "GLOBAL")]
        if rest and rest[0] in _LOCAL_SHOW:
            return LOCAL
        return LOCAL if _INFO_SCHEMA.search(sql) else RS
    if first in ("DESC", "DESCRIBE"):
        return LOCAL if _INFO_SCHEMA.search(sql) else RS
    if first not in ("SELECT", "WITH", "("):
        return RS
    if not _INFO_SCHEMA.search(sql) and (database or "").lower() != "information_schema":
        # The common case needs no parse: a SELECT is the session's only when it asks for
        # what the session knows (@@ variables, DATABASE(), USER()...); any other, with or
        # without a table, is the RS's, whose checker refuses what it must (pg_sleep...).
        return LOCAL if _SESSION_VALUE.search(sql) else RS
    try:
        parsed = sqlglot.parse_one(sql, read="mysql")
    except SqlglotError:
        return RS
    tables = list(parsed.find_all(exp.Table))
    if not tables:
        return LOCAL
    in_schema = [
        (t.db or (database or "")).lower() == "information_schema" for t in tables if t.name
    ]
    return LOCAL if in_schema and all(in_schema) else RS


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


# --------------------------------------------------------------------------- session


def _variables() -> GlobalVariables:
    schema = dict(SYSTEM_VARIABLES)
    schema["version"] = (str, SERVER_VERSION, False)
    schema["version_comment"] = (str, VERSION_COMMENT, False)
    schema["default_storage_engine"] = (str, "oceanbase", True)
    schema["default_tmp_storage_engine"] = (str, "oceanbase", True)
    schema["license"] = (str, "", False)
    schema["sql_mode"] = (str, "STRICT_ALL_TABLES", True)
    # What connectors read or set on connect (Connector/J, mysql-connector-python).
    schema["tx_isolation"] = (str, "READ-COMMITTED", True)
    schema["tx_read_only"] = (bool, False, True)
    schema["session_track_schema"] = (bool, False, True)
    schema["session_track_system_variables"] = (str, "", True)
    schema["session_track_transaction_info"] = (str, "OFF", True)
    schema["character_set_system"] = (str, "utf8", False)
    schema["query_cache_size"] = (int, 0, True)
    schema["query_cache_type"] = (str, "OFF", True)
    schema["have_ssl"] = (str, "YES", False)
    schema["require_secure_transport"] = (bool, True, False)
    return GlobalVariables(schema)


class RsSession(Session):
    """One client's session: mysql-mimic answers what :func:`route` calls local, the RS the
    rest (:meth:`run`). ``principal`` is set once the login succeeded."""

    def __init__(
        self,
        rs: RootService,
        admission: Admission,
        variables: GlobalVariables,
        forwarder: Forwarder | None = None,
    ) -> None:
        """A session of ``rs`` whose statements run on ``admission``'s threads; with
        ``forwarder``, a standby forwards what needs the leader (issue 11 item 3)."""
        super().__init__(SessionVariables(variables))
        self.rs = rs
        self.admission = admission
        self.forwarder = forwarder
        self.principal: Principal | None = None
        self.cert_user: str | None = None

    async def handle_query(self, sql: str, attrs: dict[str, str]) -> Any:  # type: ignore[override]
        """A ``Result`` (the RS's answer) or mysql-mimic's result. Raises ``ObError``."""
        if route(sql, self.database) == RS:
            return await self.run(sql)
        return await super().handle_query(sql, attrs)

    async def query(self, expression: exp.Expression, sql: str, attrs: dict[str, str]) -> Any:
        """What mysql-mimic's middlewares pass on (none answered it): the RS runs it."""
        return await self.run(sql)

    async def run(self, sql: str) -> Result:
        """:func:`rootservice.api.dispatch.run_statement` for this session's principal on an
        admission thread. Raises ``ObError`` (a refusal, or admission's
        ER_CON_COUNT_ERROR / ER_TOO_MANY_USER_CONNECTIONS: then counted in
        ``statements_throttled_total``)."""
        principal = self.principal
        if principal is None:  # pragma: no cover - the command phase follows a login
            raise ObError("ER_ACCESS_DENIED_ERROR", "", "", "NO")
        key = admission_key(self.cert_user, principal.user)
        work = functools.partial(
            run_statement,
            self.rs,
            sql.strip().rstrip(";"),
            principal,
            forwarder=self.forwarder,
            front_end="mysql",
        )
        try:
            return await self.admission.run(key, work)
        except ObError as e:
            if e.name in ("ER_CON_COUNT_ERROR", "ER_TOO_MANY_USER_CONNECTIONS"):
                self.rs.metrics.inc("statements_throttled_total")
            raise

    def _set_variable(self, setitem: exp.SetItem) -> None:
        # mysql-mimic takes only literals on the right of SET; drivers send expressions
        # (MariaDB Connector/J connects with `sql_mode = concat(@@sql_mode, ',STRICT...')`).
        # Its first middleware has already replaced the @@ variables by their values, so
        # sqlglot's own Python executor can fold what is left into one value.
        right = setitem.this.right if isinstance(setitem.this, exp.EQ) else None
        if right is not None and not isinstance(
            right, (exp.Literal, exp.Boolean, exp.Null, exp.Column, exp.Identifier, exp.Var)
        ):
            try:
                value = sqlglot_execute(exp.select(right.copy())).rows[0][0]
            except (SqlglotError, Exception) as e:  # noqa: BLE001 - any failure is the user's
                raise MysqlError(
                    f"cannot evaluate the value of SET: {e}"[:200],
                    code=ErrorCode.WRONG_VALUE_FOR_VAR,
                ) from None
            right.replace(value_to_expression(value))
        super()._set_variable(setitem)

    async def use(self, database: str) -> None:
        """USE: only ``oceanbase`` (and ``information_schema``); else MySQL's 1049."""
        if database.lower() not in ALLOWED_DATABASES:
            raise ObError("ER_BAD_DB_ERROR", database[:64])
        self.database = database.lower()

    async def schema(self) -> dict[str, Any]:
        """``information_schema``'s view of the system tables and views: ``{"oceanbase":
        {table: {column: mysql_type}}}`` from :meth:`rootservice.db.catalog.Catalog.tables`
        (read on an admission thread)."""
        catalog = self.rs.catalog

        def read() -> dict[str, Any]:
            with self.rs.store.read() as conn:
                infos = catalog.tables(conn)
            return {DATABASE: {t.name: {c.name: c.mysql_type for c in t.columns} for t in infos}}

        user = self.principal.user if self.principal else ""
        return await self.admission.run(admission_key(self.cert_user, user), read)


# --------------------------------------------------------------------------- connection


class LoginRefused(Exception):
    """The login was refused and the client told: close the connection."""


def _peer_addr(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if not peer:
        return ""
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


class RsConnection(Connection):
    """mysql-mimic's connection with the RS's logins (TLS required unless insecure, the
    client certificate, refusals that close the connection, counted and audited), its
    error packets (each ObError's code and SQLSTATE) and OK packets with info."""

    def __init__(
        self,
        *args: Any,
        rs: RootService,
        facts: LoginFacts,
        require_tls: bool,
        **kwargs: Any,
    ) -> None:
        """mysql-mimic's arguments plus the RS, the login facts shared with the identity
        provider and whether a plaintext login is refused."""
        super().__init__(*args, **kwargs)
        self.rs = rs
        self.facts = facts
        self.require_tls = require_tls
        self.facts.client_addr = _peer_addr(self.stream.writer)

    @property
    def rs_session(self) -> RsSession:
        """The session, typed."""
        assert isinstance(self.session, RsSession)
        return self.session

    # --- errors and OK packets ------------------------------------------------------------

    def ok_or_eof(
        self, affected_rows: int = 0, last_insert_id: int = 0, warnings: int = 0, flags: int = 0
    ) -> bytes:
        """The packet that ends a result set, with 0 affected rows whatever mysql-mimic
        counted: MySQL servers send 0 there, and MariaDB Connector/J 2.x reads the field as a
        length-encoded string, so a row count of 1..250 made it read past the packet
        (ArrayIndexOutOfBoundsException on its first query)."""
        return super().ok_or_eof(0, last_insert_id, warnings, flags)

    def error(self, **kwargs: Any) -> bytes:
        """mysql-mimic's error hook: an ``ObError`` message goes out with its own code and
        SQLSTATE; mysql-mimic's own errors with the SQLSTATE of their code."""
        msg = kwargs.get("msg", "")
        if isinstance(msg, ObError):
            return error_packet(self.capabilities, msg)
        code = int(kwargs.get("code", ErrorCode.UNKNOWN_ERROR))
        try:
            state = get_sqlstate(ErrorCode(code)).decode()
        except ValueError:
            state = "HY000"
        return error_packet(self.capabilities, code=code, sqlstate=state, msg=str(msg))

    async def write_ob_error(self, err: ObError) -> None:
        """Send ``err`` as an ERR packet."""
        await self.stream.write(error_packet(self.capabilities, err))

    # --- life cycle -----------------------------------------------------------------------

    async def _start(self) -> None:
        # mysql-mimic's _start, except that a refused login (already answered) or a broken
        # handshake closes the connection without a second error packet, and that the
        # database named in the handshake is checked as USE would.
        mimic_context.connection_id.set(self.connection_id)
        try:
            await self.connection_phase()
            await self.session.init(self)
        except LoginRefused:
            return
        except ObError as e:
            await self.write_ob_error(e)
            return
        except (ConnectionClosed, ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception as e:  # noqa: BLE001 - a broken handshake must not kill the server
            log.info("MySQL handshake from %s failed: %r", self.facts.client_addr, e)
            await self.stream.write(
                error_packet(self.capabilities, code=1043, sqlstate="08S01", msg="Bad handshake")
            )
            return
        try:
            await self.command_phase()
        except asyncio.CancelledError:
            if self._kill == KillKind.CONNECTION:  # type: ignore[has-type]
                await self.stream.write(
                    self.error(msg="Session was killed", code=ErrorCode.SESSION_WAS_KILLED)
                )
                self._kill = None
            else:
                raise
        finally:
            await self.session.close()

    # --- login ----------------------------------------------------------------------------

    def _tls_facts(self) -> None:
        ssl_object = self.stream.writer.transport.get_extra_info("ssl_object")
        self.facts.tls = ssl_object is not None
        self.facts.cert_user = None
        if ssl_object is None:
            return
        der = ssl_object.getpeercert(binary_form=True)
        if der:
            ident = identity_of_pem(ssl.DER_cert_to_PEM_cert(der).encode())
            if ident is not None and ident.role is Role.CLIENT:
                self.facts.cert_user = ident.name
            if ident is not None:
                self.facts.cert_serial = ident.serial
                # Closed when its certificate is revoked (issue 26 item 5).
                self.rs.cert_connections.add(ident.serial, self.stream.writer)

    async def authenticate(
        self,
        username: str,
        auth_response: bytes,
        client_plugin_name: str | None,
        connect_attrs: dict[str, str],
        auth_state: AuthState | None = None,
        server_plugin: AuthPlugin | None = None,
    ) -> None:
        """mysql-mimic's plugin negotiation (the handshake's plugin, the client's, or an
        AuthSwitch to the user's) with the RS's rules: TLS first unless insecure (3159),
        MySQL's 1045 for an unknown user, ``FAST_AUTH_SUCCESS`` before the OK of a
        caching_sha2 fast path; a refusal is counted, audited and raises
        :class:`LoginRefused` (mysql-mimic would go on to the command phase)."""
        self._tls_facts()
        if self.require_tls and not self.facts.tls:
            await self._refuse(username, ObError("ER_SECURE_TRANSPORT_REQUIRED"), audit=False)
        if self.facts.cert_serial in self.rs.peer_gate.revoked:
            revoked = access_denied(username, self.facts.client_addr, False)
            log.warning(
                "MySQL login from %s refused: certificate %s is revoked",
                self.facts.client_addr,
                self.facts.cert_serial,
            )
            await self._refuse(username, revoked, audit=True)
        provider = self.identity_provider
        assert isinstance(provider, RsIdentityProvider)
        try:
            user = await provider.get_user(username)
        except ObError as e:
            await self._refuse(username, e, audit=False)
        user_plugin = provider.get_plugin(user.auth_plugin or "") or provider.get_default_plugin()
        assert self.handshake_auth_plugin is not None
        auth_info = AuthInfo(
            username=username,
            data=auth_response,
            connect_attrs=connect_attrs,
            user=user,
            client_plugin_name=client_plugin_name,
            handshake_auth_data=self.handshake_auth_data,
            handshake_plugin_name=self.handshake_auth_plugin,
        )
        if (
            server_plugin is not None
            and auth_state is not None
            and server_plugin.client_plugin_name == client_plugin_name
            and server_plugin.name == user_plugin.name
        ):
            decision = await auth_state.asend(auth_info)
        elif user_plugin.client_plugin_name == client_plugin_name:
            decision, auth_state = await user_plugin.start(auth_info)
        else:
            decision, auth_state = await user_plugin.start()
            if isinstance(decision, bytes):
                await self.stream.write(
                    packets.make_auth_switch_request(
                        server_charset=self.server_charset,
                        plugin_name=user_plugin.client_plugin_name or user_plugin.name,
                        plugin_provided_data=decision,
                    )
                )
                auth_info = auth_info.copy(await self.stream.read())
                decision = await auth_state.asend(auth_info)
        while isinstance(decision, bytes):
            await self.stream.write(packets.make_auth_more_data(decision))
            auth_info = auth_info.copy(await self.stream.read())
            decision = await auth_state.asend(auth_info)
        if isinstance(decision, Success):
            database = self.session.database
            if database:
                try:
                    await self.rs_session.use(database)  # the handshake's database, as USE
                except ObError as e:
                    await self._refuse(username, e, audit=False)
            if isinstance(decision, FastSuccess):
                await self.stream.write(packets.make_auth_more_data(FAST_AUTH_SUCCESS))
            self.session.username = decision.authenticated_as
            session = self.rs_session
            session.principal = Principal(decision.authenticated_as, self.facts.client_addr)
            session.cert_user = self.facts.cert_user
            await self.stream.write(self.ok())
            return
        err = decision.error if isinstance(decision, Refused) else None
        if err is None:
            err = ObError("ER_ACCESS_DENIED_ERROR", username, self.facts.client_addr, "YES")
        await self._refuse(username, err, audit=err.name == "ER_ACCESS_DENIED_ERROR")

    async def _refuse(self, username: str, err: ObError, *, audit: bool) -> NoReturn:
        """Tell the client ``err``, count and audit a refused login (1045; as the gRPC path),
        then raise :class:`LoginRefused`."""
        await self.write_ob_error(err)
        if audit:
            rs, addr = self.rs, self.facts.client_addr
            rs.metrics.inc("logins_refused_total")
            record = functools.partial(
                rs.audit.record, username, addr, "(MySQL login)", err.name, event="login"
            )
            loop = asyncio.get_running_loop()
            # The audit writes a table row: off the event loop, not waited for.
            loop.run_in_executor(rs.executor, record)
        raise LoginRefused(err.name)

    async def handle_change_user(self, data: bytes) -> None:
        """COM_CHANGE_USER is refused (1235): a new login needs a new connection, so that a
        refused one always ends the connection."""
        raise MysqlError("COM_CHANGE_USER; reconnect instead", ErrorCode.NOT_SUPPORTED_YET)

    # --- statements -----------------------------------------------------------------------

    async def handle_init_db(self, data: bytes) -> None:
        """COM_INIT_DB (``mysql``'s ``use db``): as USE."""
        try:
            await self.session.use(packets.parse_com_init_db(self.client_charset, data))
        except ObError as e:
            await self.write_ob_error(e)
            return
        await self.stream.write(self.ok())

    async def query(self, sql: str, query_attrs: dict[str, str]) -> ResultSet:
        """A statement's result set for the prepared-statement path; an ``ObError`` goes out
        as mysql-mimic's error with the code and SQLSTATE kept (:meth:`error`)."""
        try:
            outcome = await self.session.handle_query(sql, query_attrs)
        except ObError as e:
            raise _ObMysqlError(e) from None
        if isinstance(outcome, Result):
            return result_set(outcome) if outcome.is_result_set else ResultSet([], [])
        return await ensure_result_set(outcome)

    async def handle_stmt_execute(self, data: bytes) -> None:
        """COM_STMT_EXECUTE: mysql-mimic's, except that a refused statement is answered
        without its ERROR log line (mysql-mimic logs every error at ERROR; a refusal is
        the client's error, counted and audited by run_statement, not the server's)."""
        try:
            await super().handle_stmt_execute(data)
        except _ObMysqlError as e:
            assert isinstance(e.msg, ObError)
            await self.write_ob_error(e.msg)

    async def handle_query(self, data: bytes) -> None:
        """COM_QUERY: the RS's answer (a result set, or OK with affected rows and info),
        mysql-mimic's for local statements, an ERR packet for every ``ObError``."""
        com_query = packets.parse_com_query(
            capabilities=self.capabilities, client_charset=self.client_charset, data=data
        )
        try:
            outcome: Any = await self.session.handle_query(com_query.sql, com_query.query_attrs)
        except ObError as e:
            await self.write_ob_error(e)
            return
        if isinstance(outcome, Result):
            if not outcome.is_result_set:
                await self.stream.write(
                    ok_packet(
                        self.capabilities, self.status_flags, outcome.affected_rows, outcome.info
                    )
                )
                return
            rs_ = result_set(outcome)
        else:
            rs_ = await ensure_result_set(outcome)
        if not rs_:
            await self.stream.write(self.ok())
            return
        await self.write_text_resultset(rs_)


class _ObMysqlError(MysqlError):
    """An ``ObError`` through mysql-mimic's command loop: its ``msg`` is the ObError, which
    :meth:`RsConnection.error` sends with its own code and SQLSTATE."""

    def __init__(self, err: ObError) -> None:
        super().__init__(err.message, ErrorCode.UNKNOWN_ERROR)
        self.msg = err  # type: ignore[assignment]


# --------------------------------------------------------------------------- server


class RsMysqlStream:
    """mysql-mimic's stream (delegated to: it is compiled with mypyc and cannot be
    subclassed) with a TLS upgrade that keeps bytes already read.

    Clients such as PyMySQL send the TLS ClientHello right behind the SSLRequest packet
    without waiting; the ``StreamReader`` has often read both, and mysql-mimic's
    ``start_tls`` (``loop.start_tls``) hands the socket to TLS without those bytes: the
    handshake then hangs until the client times out. This one builds asyncio's
    ``SSLProtocol`` as ``loop.start_tls`` does and feeds it the bytes left in the reader's
    buffer first (asyncio's private SSLProtocol of Python 3.11; pinned by requires-python)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_payload_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        """Wrap a mysql-mimic stream over ``reader`` / ``writer``; a client payload over
        ``max_payload_bytes`` closes the connection (:meth:`read`)."""
        self.inner = MysqlStream(reader, writer)
        self.reader = reader
        self.writer = writer
        self.max_payload_bytes = max_payload_bytes

    def __getattr__(self, name: str) -> Any:
        # Everything but read and start_tls is mysql-mimic's.
        return getattr(self.inner, name)

    async def read(self) -> bytes:
        """One client payload (its packets joined), as mysql-mimic's ``read`` but bounded:
        mysql-mimic has no ``max_allowed_packet`` and joins packets of any total size, so
        anyone, before logging in, could make the RS hold gigabytes. A payload announced
        over ``max_payload_bytes`` is refused by its header, before its body is read, and
        the connection closed (MySQL answers 1153 and closes too). Raises mysql-mimic's
        ``ConnectionClosed`` for that and for a connection that ends, ``MysqlError`` for a
        packet out of sequence."""
        data = bytearray()
        for _ in range(self.max_payload_bytes // 0xFFFFFF + 2):
            try:
                header = await self.reader.readexactly(4)
            except asyncio.IncompleteReadError:
                raise ConnectionClosed() from None
            word = int.from_bytes(header, "little")
            length, sequence_id = word & 0xFFFFFF, word >> 24
            expected = next(self.inner.seq)
            if sequence_id != expected:
                raise MysqlError(
                    f"Expected seq({expected}) got seq({sequence_id})",
                    ErrorCode.MALFORMED_PACKET,
                )
            if len(data) + length > self.max_payload_bytes:
                log.info(
                    "MySQL client sent a packet over %d bytes: connection closed",
                    self.max_payload_bytes,
                )
                raise ConnectionClosed()
            if length:
                try:
                    data += await self.reader.readexactly(length)
                except asyncio.IncompleteReadError:
                    raise ConnectionClosed() from None
            if length < 0xFFFFFF:
                return bytes(data)
        raise ConnectionClosed()  # pragma: no cover - the size check ends the loop first

    async def start_tls(self, ssl_context: ssl.SSLContext) -> None:
        """Upgrade the connection to TLS as the server side (see the class docstring)."""
        from asyncio import sslproto

        loop = asyncio.get_running_loop()
        transport: Any = self.writer.transport
        protocol = transport.get_protocol()
        pending: bytearray = self.reader._buffer  # type: ignore[attr-defined]  # noqa: SLF001
        leftover = bytes(pending)
        pending.clear()
        waiter = loop.create_future()
        ssl_protocol = sslproto.SSLProtocol(
            loop, protocol, ssl_context, waiter, server_side=True, call_connection_made=False
        )
        transport.pause_reading()
        transport.set_protocol(ssl_protocol)
        ssl_protocol.connection_made(transport)
        while leftover:
            buf = ssl_protocol.get_buffer(len(leftover))
            n = min(len(buf), len(leftover))
            buf[:n] = leftover[:n]
            ssl_protocol.buffer_updated(n)
            leftover = leftover[n:]
        transport.resume_reading()
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        new_transport = ssl_protocol._app_transport  # noqa: SLF001
        self.writer._transport = new_transport  # type: ignore[attr-defined]  # noqa: SLF001
        self.reader._transport = new_transport  # type: ignore[attr-defined]  # noqa: SLF001


class RsMysqlServer(MysqlServer):
    """mysql-mimic's server building :class:`RsConnection` / :class:`RsSession` and a login
    provider per connection, with a TLS context renewed when the RS's certificates change."""

    def __init__(
        self, rs: RootService, admission: Admission, forwarder: Forwarder | None = None
    ) -> None:
        """Serve MySQL clients of ``rs``; statements and logins run on ``admission``; a
        standby forwards statements that need the leader through ``forwarder``."""
        super().__init__()
        self.rs = rs
        self.admission = admission
        self.forwarder = forwarder
        self.sha2_cache = Sha2Cache()
        self.variables = _variables()
        self.require_tls = not rs.security.insecure
        self._generation = rs.security.generation()
        self._tls = rs.security.server_ssl_context()

    def current_tls(self) -> ssl.SSLContext | None:
        """The TLS context, rebuilt after a certificate rotation
        (:meth:`obcommon.security.tls.TransportSecurity.generation`)."""
        if self._tls is None:
            return None
        gen = self.rs.security.generation()
        if gen != self._generation:
            try:
                self._tls = self.rs.security.server_ssl_context()
                self._generation = gen
            except (OSError, ssl.SSLError) as e:
                log.warning("MySQL endpoint keeps its TLS certificate: %s", e)
        return self._tls

    async def _client_connected_cb(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # mysql-mimic's callback builds its own Connection class; this one builds ours, with
        # a login provider per connection (the plugins need the connection's TLS facts).
        # The statement bound plus room for the command byte and query attributes.
        stream = RsMysqlStream(reader, writer, self.rs.settings.max_statement_bytes + 64 * 1024)
        facts = LoginFacts()
        session = RsSession(self.rs, self.admission, self.variables, self.forwarder)
        provider = RsIdentityProvider(self.rs, self.admission, self.sha2_cache, facts)
        connection = RsConnection(
            stream=stream,  # type: ignore[arg-type]
            session=session,
            control=self.control,
            server_capabilities=self.capabilities,
            identity_provider=provider,
            ssl=self.current_tls(),
            rs=self.rs,
            facts=facts,
            require_tls=self.require_tls,
        )
        try:
            connection_id = await self.control.add(connection)
            connection.connection_id = connection_id
        except TooManyConnections:
            await stream.write(connection.error(msg="Too many connections", code=1040))
            writer.close()
            return
        try:
            await connection.start()
        except Exception:  # noqa: BLE001 - one connection's failure is logged, not raised
            log.exception("MySQL connection from %s failed", connection.facts.client_addr)
        finally:
            writer.close()
            await self.control.remove(connection_id)


async def start_mysql_server(
    rs: RootService,
    admission: Admission,
    addr: str | None = None,
    forwarder: Forwarder | None = None,
) -> RsMysqlServer:
    """Listen for MySQL clients on ``addr`` (default ``rs.settings.mysql_addr``) in the
    running event loop and record the bound port (:meth:`RootService.set_mysql_port`).
    Raises ``OSError`` when the address cannot be bound."""
    bind = addr or rs.settings.mysql_addr
    host, _, port = bind.rpartition(":")
    server = RsMysqlServer(rs, admission, forwarder)
    await server.start_server(host=host.strip("[]"), port=int(port))
    sockets = server.sockets()
    if sockets:
        rs.set_mysql_port(int(sockets[0].getsockname()[1]))
    log.info(
        "MySQL endpoint on %s (%s)",
        rs.mysql_addr,
        "TLS required" if server.require_tls else "INSECURE",
    )
    return server
