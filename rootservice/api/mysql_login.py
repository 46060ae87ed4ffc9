"""Logins on the MySQL endpoint's connections: TLS required unless insecure
(3159), the client certificate's user and serial, a revoked certificate refused, mysql-
mimic's plugin negotiation with the RS's plugins (:mod:`rootservice.api.mysql_auth`), and
refusals that close the connection, counted (``logins_refused_total``) and audited as on
the gRPC path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from typing import Any, NoReturn

from mysql_mimic import packets
from mysql_mimic.auth import AuthInfo, AuthPlugin, AuthState, Success
from mysql_mimic.connection import Connection
from mysql_mimic.errors import ErrorCode, MysqlError

from obcommon.errors import ObError
from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_pem
from rootservice.api.mysql_auth import (
    FAST_AUTH_SUCCESS,
    FastSuccess,
    LoginFacts,
    Refused,
    RsIdentityProvider,
)
from rootservice.api.mysql_results import error_packet
from rootservice.api.mysql_session import RsSession
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.auth.users import access_denied

log = logging.getLogger(__name__)


class LoginRefused(Exception):
    """The login was refused and the client told: close the connection."""


def _peer_addr(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if not peer:
        return ""
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


class LoginConnection(Connection):
    """mysql-mimic's connection with the RS's logins: TLS required unless insecure, the
    client certificate, refusals that close the connection, counted and audited.
    :class:`rootservice.api.mysql_connection.RsConnection` adds the command phase."""

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

    async def write_ob_error(self, err: ObError) -> None:
        """Send ``err`` as an ERR packet."""
        await self.stream.write(error_packet(self.capabilities, err))

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
                # Closed when its certificate is revoked.
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
