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

#: How long a channel replaced by a certificate rotation lets its calls in flight finish
#: (seconds): a copy's data stream or a log fetch started before the rotation completes on
#: it, and only a call still running this long after is cancelled (the copy then retries).
#: The old connections keep the old certificate meanwhile; a revoked one is refused by the
#: peer anyway. A channel with no call in flight closes at once.
ROTATION_GRACE_S = 3600.0


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
        After a certificate rotation, channels are reopened so that new connections present
        the new pair; the old ones close in the background once their calls in flight are
        done (at most :data:`ROTATION_GRACE_S` later)."""
        generation = self.security.generation()
        if generation != self._generation:
            self._generation = generation
            stale, self._channels = list(self._channels.values()), {}
            for old in stale:
                task = asyncio.get_running_loop().create_task(old.close(ROTATION_GRACE_S))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        ch = self._channels.get(peer)
        if ch is None:
            ch = self.security.aio_channel(peer)
            self._channels[peer] = ch
        return obrpc_pb2_grpc.ReplicaServiceStub(ch)

    async def close(self) -> None:
        """Close every channel, each bounded in time; never raises. A later :meth:`stub`
        opens new ones (on the loop running then). Channels a rotation replaced close once
        their last call ends: :meth:`ReplicaManager.stop` cancels the callers first, so at
        once; they are waited for at most :data:`CLOSE_TIMEOUT_S` all the same."""
        await self.http.close()
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.close(grace=None), CLOSE_TIMEOUT_S)
        if self._closing:
            await asyncio.wait(list(self._closing), timeout=CLOSE_TIMEOUT_S)
        for task in list(self._closing):
            task.cancel()
