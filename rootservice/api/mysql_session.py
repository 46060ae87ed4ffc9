"""The MySQL endpoint's session: which side answers a statement (:func:`route`:
mysql-mimic's session for client chatter, the RS for the rest), the server variables
clients read on connect, and :class:`RsSession`, which runs the RS's statements through
:func:`rootservice.api.dispatch.run_statement` on the admission threads.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import sqlglot
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.intercept import value_to_expression
from mysql_mimic.session import Session
from mysql_mimic.variables import GlobalVariables, SessionVariables
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.executor import execute as sqlglot_execute

from obcommon.errors import ObError
from rootservice.api.admin_servicer import admission_key
from rootservice.api.admission import Admission
from rootservice.api.dispatch import Forwarder, run_statement
from rootservice.api.statements import Result
from rootservice.app import RootService
from rootservice.auth.principal import Principal

__all__ = [
    "ALLOWED_DATABASES",
    "DATABASE",
    "LOCAL",
    "RS",
    "SERVER_VERSION",
    "VERSION_COMMENT",
    "RsSession",
    "route",
]

DATABASE = "oceanbase"
"""The one database of the endpoint (OceanBase's sys tenant database)."""
ALLOWED_DATABASES = frozenset({DATABASE, "information_schema"})

SERVER_VERSION = "5.7.25-OceanBase-v4 rootservice 0.1.0"
"""``@@version`` and the handshake's server version: MySQL 5.7 as OceanBase 4 announces
itself (clients pick their dialect from it), then what this is."""
VERSION_COMMENT = "OceanBase 4.0.0.0 (rootservice 0.1.0, an OceanBase-style RootService)"
"""``@@version_comment``: OceanBase's form, the version as the second word. obagent reads it
(``SHOW VARIABLES LIKE 'version_comment'``, oceanbase/obagent
monitor/plugins/common/ob_version_helper.go ParseVersionComment) and sends its OceanBase 4.x
queries only from 4.0.0.0 on; the first OceanBase version whose dialect this one speaks."""


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
        ``forwarder``, a standby forwards what needs the leader."""
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
