"""The RS's MySQL-protocol endpoint, on mysql-mimic, beside gRPC in the
RS's event loop on ``--mysql-addr`` (default ``127.0.0.1:2881``, OceanBase's SQL port):
the server's life cycle (:func:`start_mysql_server`, :class:`RsMysqlServer`, the TLS
context renewed on rotation) and the client stream (:class:`RsMysqlStream`).

What a client sends on connect and while browsing stays in mysql-mimic's session (``SET
NAMES`` / ``autocommit`` / ``@@`` variables, ``USE oceanbase``, ``SELECT`` without a table
such as ``SELECT @@version_comment`` / ``SELECT DATABASE()`` / ``SELECT 1``, BEGIN / COMMIT
/ ROLLBACK, ``SHOW VARIABLES [LIKE]``, ``SHOW WARNINGS``, ``information_schema`` queries);
every other statement goes to :func:`rootservice.api.dispatch.run_statement` on the
admission threads (:class:`rootservice.api.admission.Admission`, shared with gRPC), which
checks privileges, counts and audits it (:func:`rootservice.api.mysql_session.route`
decides).

Where mysql-mimic falls short, its classes are subclassed (never raw packets for what it
writes itself):

- errors: mysql-mimic maps a code to a SQLSTATE from a fixed table;
  :class:`rootservice.api.mysql_connection.RsConnection` sends each ``ObError`` with
  OceanBase's MySQL error number (``ObError.mysql_errno``: the MySQL mapping of
  ``ob_errno.def`` where there is one, ``ERROR 1146 (42S02)`` for OB_TABLE_NOT_EXIST, else
  the positive OB code, ``ERROR 4630 (HY000)``) and its SQLSTATE
  (:func:`rootservice.api.mysql_results.error_packet`).
- OK packets: mysql-mimic sends a bare OK; :func:`rootservice.api.mysql_results.ok_packet`
  adds ``affected_rows`` and the ``info`` text of :class:`rootservice.api.statements.Result`.
- logins: :mod:`rootservice.api.mysql_login` with the plugins of
  :mod:`rootservice.api.mysql_auth`; a refused login closes the connection (mysql-mimic
  would go on to the command phase), is counted (``logins_refused_total``) and audited as
  on the gRPC path.
- TLS: with the RS's ``rs.crt`` / ``rs.key`` and ``ca.crt`` (re-read on rotation), client
  certificate optional; required unless ``--insecure``: a plaintext login gets MySQL's 3159
  (``ER_SECURE_TRANSPORT_REQUIRED``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from mysql_mimic import MysqlServer
from mysql_mimic.control import TooManyConnections
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.stream import ConnectionClosed, MysqlStream
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables

from rootservice.api.admission import Admission
from rootservice.api.dispatch import Forwarder
from rootservice.api.mysql_auth import (
    LoginFacts,
    RsIdentityProvider,
    Sha2Cache,
)
from rootservice.api.mysql_connection import RsConnection
from rootservice.api.mysql_session import SERVER_VERSION, VERSION_COMMENT, RsSession
from rootservice.app import RootService

log = logging.getLogger(__name__)

__all__ = [
    "RsMysqlServer",
    "RsMysqlStream",
    "start_mysql_server",
]


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
    """mysql-mimic's server building :class:`rootservice.api.mysql_connection.RsConnection` /
    :class:`rootservice.api.mysql_session.RsSession` and a login
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
