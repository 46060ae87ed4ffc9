"""Any RS answers: a standby forwards a statement that needs the leader to
the leader's ``AdminService.ExecuteSql`` and returns the leader's answer as its own, as
Doris FE followers forward to the master.

The standby calls with its own RS certificate (mutual TLS, ``rs.crt``) and names the client
it has already authenticated in the metadata :data:`FORWARDED_USER_KEY` /
:data:`FORWARDED_ADDR_KEY`; the leader's :class:`rootservice.api.admin_servicer.AdminServicer`
takes the identity from them only on an RS certificate (the standby vouches for the client).
In ``--insecure`` mode there is no certificate to vouch with: no forwarder is built and a
standby answers OB_RS_NOT_MASTER with the leader's address, as before.

Deadlines: connecting to the leader is bounded by ``rpc_timeout`` (nothing was sent: the
answer is OB_RS_NOT_MASTER with the hint), the statement itself by ``forward_timeout``
(after which the outcome on the leader is unknown: OB_TIMEOUT says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.tls import ChannelCache, TransportSecurity
from rootservice.api.dispatch import ForwardedResult, LeaderRefusal
from rootservice.app import RootService
from rootservice.auth.principal import Principal

FORWARDED_USER_KEY = "ob-forwarded-user"
FORWARDED_ADDR_KEY = "ob-forwarded-addr"
"""gRPC metadata a standby sends with a forwarded statement: the user it authenticated and
the client's ``host:port``. A value that is not printable ASCII travels as UTF-8 under the
same key with gRPC's ``-bin`` suffix (as ``ob-user`` does)."""


def _metadata_item(key: str, value: str) -> tuple[str, str | bytes]:
    if value.isascii() and value.isprintable():
        return key, value
    return key + "-bin", value.encode("utf-8")


def forwarded_metadata(principal: Principal) -> tuple[tuple[str, str | bytes], ...]:
    """The metadata naming ``principal`` on a forwarded call (see :data:`FORWARDED_USER_KEY`)."""
    return (
        _metadata_item(FORWARDED_USER_KEY, principal.user),
        _metadata_item(FORWARDED_ADDR_KEY, principal.client_addr),
    )


def _value(cell: obrpc_pb2.Cell) -> Any:
    kind = cell.WhichOneof("value")
    if kind is None or kind == "is_null":
        return None
    return getattr(cell, kind)


def from_response(resp: obrpc_pb2.SqlResponse, leader: str) -> ForwardedResult:
    """The leader's ``SqlResponse`` as a :class:`ForwardedResult` (the inverse of
    :func:`rootservice.api.dispatch.to_response`); raises :class:`LeaderRefusal` when it
    carries an error."""
    if resp.error.code:
        e = resp.error
        raise LeaderRefusal(e.code, e.name, e.sqlstate, e.message)
    return ForwardedResult(
        columns=list(resp.columns),
        rows=[tuple(_value(c) for c in row.cells) for row in resp.rows],
        affected_rows=resp.affected_rows,
        info=resp.info,
        is_result_set=resp.is_result_set,
        leader=leader,
    )


class GrpcForwarder:
    """:class:`rootservice.api.dispatch.Forwarder` over gRPC: one cached channel per leader
    address, opened through ``security`` (the RS's own certificate) and dropped when the
    certificates rotate or a call fails. ``connect_timeout_us()`` and ``timeout_us()`` are
    read at each call (ALTER SYSTEM SET applies at once), in microseconds."""

    def __init__(
        self,
        security: TransportSecurity,
        connect_timeout_us: Callable[[], int],
        timeout_us: Callable[[], int],
    ) -> None:
        """Forward through ``security`` (must be secure: in insecure mode nothing can vouch
        for the client, so there is no forwarder; raises ``ValueError``)."""
        if security.insecure:
            raise ValueError("no forwarding in insecure mode: nothing can vouch for the client")
        self.security = security
        self.connect_timeout_us = connect_timeout_us
        self.timeout_us = timeout_us
        self._channels = ChannelCache(security)

    def forward(self, leader: str, text: str, principal: Principal) -> ForwardedResult:
        """:meth:`rootservice.api.dispatch.Forwarder.forward`: ``ExecuteSql`` on ``leader``
        with :func:`forwarded_metadata`. Raises :class:`LeaderRefusal` (the leader's answer),
        ``ObError("OB_RS_NOT_MASTER")`` when no connection is made within
        ``connect_timeout_us`` or the call fails before reaching the leader, and
        ``ObError("OB_TIMEOUT")`` when the leader took the call but did not answer within
        ``timeout_us``."""
        # Held for the call: another statement's failed forward forgets the channel, and a
        # call started on a closed channel raises ValueError instead of an RPC error.
        with self._channels.use(leader) as ch:
            return self._forward_on(ch, leader, text, principal)

    def _forward_on(
        self, ch: grpc.Channel, leader: str, text: str, principal: Principal
    ) -> ForwardedResult:
        """:meth:`forward` on the held channel ``ch`` (same errors)."""
        try:
            grpc.channel_ready_future(ch).result(timeout=self.connect_timeout_us() / 1e6)
        except grpc.FutureTimeoutError:
            self.forget(leader)
            raise ObError(
                "OB_RS_NOT_MASTER", detail=f"the leader {leader} cannot be reached"
            ) from None
        try:
            resp = obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(
                obrpc_pb2.SqlRequest(statement=text),
                timeout=self.timeout_us() / 1e6,
                metadata=forwarded_metadata(principal),
            )
        except grpc.RpcError as e:
            self.forget(leader)
            code = e.code() if hasattr(e, "code") else None
            details = (e.details() if hasattr(e, "details") else "") or ""
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ObError(
                    "OB_TIMEOUT",
                    detail=f"the leader {leader} did not answer a forwarded statement within "
                    f"{self.timeout_us() // 1000} ms; it may have run there",
                ) from None
            name = code.name if code else "ERROR"
            raise ObError(
                "OB_RS_NOT_MASTER",
                detail=f"forwarding to the leader {leader} failed: {name}: {details[:200]}",
            ) from None
        return from_response(resp, leader)

    def forget(self, leader: str) -> None:
        """Close the cached channel to ``leader`` (a failed or stale leader)."""
        self._channels.forget(leader)

    def close(self) -> None:
        """Close every cached channel."""
        self._channels.close()


def forwarder_for(rs: RootService) -> GrpcForwarder | None:
    """``rs``'s :class:`GrpcForwarder` (its certificate; ``rpc_timeout`` to connect,
    ``forward_timeout`` for the answer), or None in insecure mode: a standby then answers
    OB_RS_NOT_MASTER with the leader's address, since without certificates nothing vouches
    for a forwarded identity (and the leader refuses one)."""
    if rs.security.insecure:
        return None
    return GrpcForwarder(
        rs.security, lambda: rs.settings.rpc_timeout, lambda: rs.settings.forward_timeout
    )
