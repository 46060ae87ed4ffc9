"""The MySQL endpoint's connection: :class:`RsConnection`, mysql-mimic's
connection with the RS's logins (:class:`rootservice.api.mysql_login.LoginConnection`), its
error packets (each ObError's code and SQLSTATE), OK packets with info, and the command
phase handing statements to :class:`rootservice.api.mysql_session.RsSession`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mysql_mimic import ResultSet, packets
from mysql_mimic import context as mimic_context
from mysql_mimic.constants import KillKind
from mysql_mimic.errors import ErrorCode, MysqlError, get_sqlstate
from mysql_mimic.results import ensure_result_set
from mysql_mimic.stream import ConnectionClosed

from obcommon.errors import ObError
from rootservice.api.mysql_login import LoginConnection, LoginRefused
from rootservice.api.mysql_results import error_packet, ok_packet, result_set
from rootservice.api.statements import Result

log = logging.getLogger(__name__)


class RsConnection(LoginConnection):
    """mysql-mimic's connection with the RS's logins (TLS required unless insecure, the
    client certificate, refusals that close the connection, counted and audited), its
    error packets (each ObError's code and SQLSTATE) and OK packets with info."""

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
