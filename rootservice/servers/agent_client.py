"""RS -> agent RPCs (``ObserverService``): request heartbeat, check server empty, apply
replicas.

Called from admin-operation threads, so it uses grpc's synchronous API with one cached
channel per agent address, secured by the RS's :class:`TransportSecurity` (mutual TLS with
``rs.crt``: the agents serve these calls to RS certificates only); the cache is dropped when
the certificates are rotated. Each call holds its channel (:meth:`ChannelCache.use`): one
dropped meanwhile (another thread's failed call, a rotation) is closed once no call uses it.
Every call has a deadline of ``rpc_timeout``; a failure becomes
``ObError(OB_SERVER_CONNECTION_ERROR)`` naming the server (docs/design/statements.md, ADD SERVER),
except ``UNIMPLEMENTED``: an agent of an older release without the RPC, ``OB_NOT_SUPPORTED``
(an old peer, never taken for a dead one).
An agent's own refusal (``OB_RS_NOT_MASTER`` to a deposed root service, in the trailing
metadata ``ob-code`` / ``ob-name``) is that error, naming the server and the call, and the
channel is kept.

``ApplyReplicas`` and ``RequestHeartbeat`` are commands: each carries a
``command_seq`` from the :class:`rootservice.servers.command_ledger.CommandLedger`, settled when
the call returns or fails short of its deadline; a call that runs out of time leaves it for
the agent's heartbeats to settle, or for the lag detector to find overdue. ``DumpStacks``
reads the agent's thread stacks for the detector's LAGGING event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc

from obcommon.clock import Clock, SystemClock
from obcommon.errors import ERRORS, ObError, RemoteObError
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.tls import ChannelCache, TransportSecurity
from rootservice.servers.command_ledger import CommandLedger


@dataclass(frozen=True)
class EmptyCheck:
    """What an agent says of itself: ``is_empty`` is False once it belongs to a cluster."""

    is_empty: bool
    zone: str
    server: str
    cluster_id: str
    server_id: int


class AgentClient:
    """Synchronous client of the agents' ``ObserverService``; ``timeout_us`` per call."""

    def __init__(
        self,
        timeout_us: int,
        security: TransportSecurity,
        incarnation: Callable[[], int] = lambda: 0,
        ledger: CommandLedger | None = None,
        clock: Clock | None = None,
    ) -> None:
        """No channel is opened yet; ``timeout_us`` (microseconds) is the deadline of every
        call; channels are opened through ``security``; ``incarnation()`` is sent with the
        epoch (the term's); commands are numbered in ``ledger`` (default: one
        of its own) at ``clock``'s monotonic time."""
        self.ledger = ledger if ledger is not None else CommandLedger()
        self.clock: Clock = clock or SystemClock()
        self.incarnation = incarnation
        self.timeout_us = timeout_us
        self.security = security
        self._channels = ChannelCache(security)
        self._stubs: dict[str, tuple[grpc.Channel, obrpc_pb2_grpc.ObserverServiceStub]] = {}

    def _stub(self, server: str, channel: grpc.Channel) -> obrpc_pb2_grpc.ObserverServiceStub:
        # A stub builds a callable per method: kept with its channel, made again only when
        # the cache hands out another channel (reopened, rotated, forgotten). ``channel`` is
        # the one the caller holds: the cache's current one may be closed under the call.
        kept = self._stubs.get(server)
        if kept is not None and kept[0] is channel:
            return kept[1]
        stub = obrpc_pb2_grpc.ObserverServiceStub(channel)
        self._stubs[server] = (channel, stub)
        return stub

    def check_server_empty(self, server: str, epoch: int) -> EmptyCheck:
        """Ask ``server`` ('ip:port') whether it is empty. Raises
        ``ObError(OB_SERVER_CONNECTION_ERROR)`` when it cannot be reached in time, and the
        agent's ``OB_RS_NOT_MASTER`` when it obeys a newer root service than ``epoch``."""
        try:
            with self._channels.use(server) as channel:
                r = self._stub(server, channel).CheckServerEmpty(
                    obrpc_pb2.CheckServerEmptyRequest(
                        rs_epoch=epoch, rs_incarnation=self.incarnation()
                    ),
                    timeout=self.timeout_us / 1e6,
                )
        except grpc.RpcError as e:
            raise self._refusal(server, "CheckServerEmpty", e) from None
        return EmptyCheck(r.is_empty, r.zone, r.server, r.cluster_id, r.server_id)

    def request_heartbeat(self, server: str, epoch: int) -> obrpc_pb2.LeaseRequest:
        """Ask ``server`` for a lease request now (the RS feeds it to receive_hb).
        Raises ``ObError(OB_SERVER_CONNECTION_ERROR)``, or the agent's ``OB_RS_NOT_MASTER``
        when it obeys a newer root service than ``epoch``."""
        seq = self.ledger.issue(server, epoch, self.clock.monotonic_us())
        try:
            with self._channels.use(server) as channel:
                r = self._stub(server, channel).RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(
                        rs_epoch=epoch, rs_incarnation=self.incarnation(), command_seq=seq
                    ),
                    timeout=self.timeout_us / 1e6,
                )
        except grpc.RpcError as e:
            self._failed(server, seq, e)
            raise self._refusal(server, "RequestHeartbeat", e) from None
        # Answered at once, applied past the agent's apply gate: its heartbeats settle it.
        return r

    def apply_replicas(
        self, server: str, request: obrpc_pb2.ApplyReplicasRequest, timeout_us: int | None = None
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """Send the desired state of some replicas to ``server`` ('ip:port'); the answer
        carries the agent's full replica report and, when the agent refused part of it, an
        error. ``timeout_us`` defaults to ``rpc_timeout`` (a new leader may need to catch up
        its log first, so leader switches pass a longer one). Raises
        ``ObError(OB_SERVER_CONNECTION_ERROR)`` when the agent cannot be reached in time."""
        timeout = (timeout_us or self.timeout_us) / 1e6
        seq = self.ledger.issue(server, request.rs_epoch, self.clock.monotonic_us())
        sent = obrpc_pb2.ApplyReplicasRequest()
        sent.CopyFrom(request)
        sent.command_seq = seq
        try:
            with self._channels.use(server) as channel:
                resp = self._stub(server, channel).ApplyReplicas(sent, timeout=timeout)
        except grpc.RpcError as e:
            self._failed(server, seq, e)
            raise self._refusal(server, "ApplyReplicas", e) from None
        self.ledger.settled(server, seq)
        return resp

    def dump_stacks(self, server: str, epoch: int) -> obrpc_pb2.DumpStacksResponse:
        """Every thread's Python stack of the agent at ``server``. Raises
        ``ObError(OB_SERVER_CONNECTION_ERROR)``."""
        try:
            with self._channels.use(server) as channel:
                return self._stub(server, channel).DumpStacks(
                    obrpc_pb2.DumpStacksRequest(rs_epoch=epoch, rs_incarnation=self.incarnation()),
                    timeout=self.timeout_us / 1e6,
                )
        except grpc.RpcError as e:
            raise self._refusal(server, "DumpStacks", e) from None

    def _refusal(self, server: str, rpc: str, e: grpc.RpcError) -> ObError:
        """The error of a failed call of ``rpc`` on ``server``. ``UNIMPLEMENTED`` is an agent of
        an older release that does not know the RPC: ``OB_NOT_SUPPORTED`` naming it, its
        channel kept (it answered, so it is up); nothing may take that for the agent being
        down (its lease is the heartbeats' business). Anything else is
        ``OB_SERVER_CONNECTION_ERROR`` and the channel is dropped: after a take-office with
        thousands of dead servers, cached channels would cost hundreds of MiB."""
        refused = agent_error(e)
        if refused is not None:
            # The agent answered with an OceanBase error (a fencing token it does not follow):
            # it is up, so its channel is kept.
            return RemoteObError(
                refused.code,
                refused.name,
                refused.sqlstate,
                f"{rpc} on server '{server}': {refused.message}",
            )
        if old_peer(e):
            return ObError(
                "OB_NOT_SUPPORTED",
                f"RPC {rpc} on server '{server}'",
                detail="the agent runs an older release that does not know it",
            )
        self.forget(server)
        return ObError("OB_SERVER_CONNECTION_ERROR", server, detail=_rpc_detail(e))

    def _failed(self, server: str, seq: int, e: grpc.RpcError) -> None:
        """A command's call failed: unless by its deadline (the agent may hold it, unapplied),
        it never reached the apply step."""
        code = e.code() if hasattr(e, "code") else None
        if code is not grpc.StatusCode.DEADLINE_EXCEEDED:
            self.ledger.settled(server, seq)

    def forget(self, server: str) -> None:
        """Close the cached channel of a server that left the whitelist (or failed), once
        the calls using it are done."""
        self._stubs.pop(server, None)
        self._channels.forget(server)

    def close(self) -> None:
        """Close every cached channel (those of calls in flight when they end); later calls
        open new ones."""
        self._stubs.clear()
        self._channels.close()


def agent_error(e: grpc.RpcError) -> ObError | None:
    """The OceanBase error an agent refused a call with (the ``ob-code`` / ``ob-name``
    trailing metadata of :func:`observer_agent.service.refuse_deposed`; the status message
    as the error's message, without its ``"<OB name>: "`` prefix), or None for any other
    failure."""
    meta = dict(e.trailing_metadata() or ()) if isinstance(e, grpc.Call) else {}
    ob_code, ob_name = meta.get("ob-code"), meta.get("ob-name")
    if not isinstance(ob_code, str) or not isinstance(ob_name, str):
        return None
    try:
        number = int(ob_code)
    except ValueError:
        return None
    if number >= 0 or not ob_name:
        return None
    known = ERRORS.get(ob_name)
    details = (e.details() if isinstance(e, grpc.Call) else None) or ""
    return RemoteObError(
        number,
        ob_name,
        known.sqlstate if known else "HY000",
        details.removeprefix(f"{ob_name}: ")[:400],
    )


def old_peer(e: grpc.RpcError) -> bool:
    """Whether a call failed with ``UNIMPLEMENTED``: the peer runs a release without the RPC
    (gRPC's answer to an unknown method), not a failure of the peer."""
    code = e.code() if hasattr(e, "code") else None
    return code is grpc.StatusCode.UNIMPLEMENTED


def _rpc_detail(e: grpc.RpcError) -> str:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    return f"{code.name if code else 'ERROR'}: {(details or '')[:200]}"
