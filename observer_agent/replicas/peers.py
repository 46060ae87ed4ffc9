"""The other agents a replica talks to (``ReplicaService``, agent to agent: followers fetch
their leader's log, copies stream a member's data file; docs/design/migration.md)."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from obcommon.proto import obrpc_pb2_grpc
from obcommon.security.tls import TransportSecurity
from observer_agent.replicas.copy_http import BulkHttp
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S


class PeerChannels:
    """One gRPC channel per peer ``ip:port``, opened on first use and kept until
    :meth:`close`, and :attr:`http`, the HTTP(S) client of the copies' bulk path.
    No HTTP proxy: peers are addressed directly."""

    def __init__(self, security: TransportSecurity) -> None:
        """No channel yet; channels are opened through ``security`` (the node certificate)."""
        self.security = security
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._generation = security.generation()
        self._closing: set[asyncio.Task[None]] = set()
        self.http = BulkHttp(security)

    def stub(self, peer: str) -> obrpc_pb2_grpc.ReplicaServiceStub:
        """A ``ReplicaService`` stub to ``peer`` (``ip:port``). Must run on the event loop.
        After a certificate rotation, channels are reopened (the old ones closed in the
        background) so that new connections present the new pair."""
        generation = self.security.generation()
        if generation != self._generation:
            self._generation = generation
            stale, self._channels = list(self._channels.values()), {}
            for old in stale:
                task = asyncio.get_running_loop().create_task(old.close(grace=None))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        ch = self._channels.get(peer)
        if ch is None:
            ch = self.security.aio_channel(peer)
            self._channels[peer] = ch
        return obrpc_pb2_grpc.ReplicaServiceStub(ch)

    async def close(self) -> None:
        """Close every channel, each bounded in time; never raises. A later :meth:`stub`
        opens new ones (on the loop running then)."""
        await self.http.close()
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.close(grace=None), CLOSE_TIMEOUT_S)
