"""A late lease answer keeps the stream: against a real grpc.aio server
whose first answer comes after the client's timeout, :class:`LateAnswer` leaves the request
outstanding, :meth:`LeaseStream.await_answer` then returns that very answer on the same
connection, and the next exchange works; a server that ends the stream breaks it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from observer_agent.lease_stream import LateAnswer, LeaseStream, StreamClosed


class SlowFirstAnswer(obrpc_pb2_grpc.RootServiceServicer):
    """Answers every request with its ``seq``; the first one only once ``release`` is set.
    Counts the streams opened (one per connection attempt of the client)."""

    def __init__(self, end_after: int = 0) -> None:
        self.release = asyncio.Event()
        self.streams = 0
        self.end_after = end_after

    async def LeaseStream(  # type: ignore[override]  # noqa: N802
        self, request_iterator: AsyncIterator[obrpc_pb2.LeaseRequest], context: object
    ) -> AsyncIterator[obrpc_pb2.LeaseResponse]:
        self.streams += 1
        n = 0
        async for req in request_iterator:
            n += 1
            if n == 1:
                await asyncio.wait_for(self.release.wait(), 10)
            yield obrpc_pb2.LeaseResponse(seq=req.seq)
            if self.end_after and n >= self.end_after:
                return


async def _serve(servicer: SlowFirstAnswer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    obrpc_pb2_grpc.add_RootServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_a_late_answer_is_awaited_on_the_same_stream() -> None:
    async def run() -> None:
        servicer = SlowFirstAnswer()
        server, addr = await _serve(servicer)
        stream = LeaseStream(addr, TransportSecurity.insecure_mode(Role.NODE))
        try:
            with pytest.raises(LateAnswer):
                await stream.exchange(obrpc_pb2.LeaseRequest(seq=1), 0.3)
            assert stream.outstanding == 1 and not stream.broken
            # A second request may not be written while the first is unanswered.
            with pytest.raises(RuntimeError):
                await stream.exchange(obrpc_pb2.LeaseRequest(seq=2), 0.3)
            with pytest.raises(LateAnswer):
                await stream.await_answer(0.1)
            servicer.release.set()
            resp = await stream.await_answer(5)
            assert resp.seq == 1 and stream.outstanding is None and not stream.broken
            resp = await stream.exchange(obrpc_pb2.LeaseRequest(seq=2), 5)
            assert resp.seq == 2
            assert servicer.streams == 1  # no reconnect, no new handshake
            with pytest.raises(RuntimeError):
                await stream.await_answer(0.1)  # nothing outstanding
        finally:
            await stream.close()
            await server.stop(None)

    asyncio.run(run())


def test_a_stream_the_rs_ends_is_broken() -> None:
    async def run() -> None:
        servicer = SlowFirstAnswer(end_after=1)
        servicer.release.set()
        server, addr = await _serve(servicer)
        stream = LeaseStream(addr, TransportSecurity.insecure_mode(Role.NODE))
        try:
            assert (await stream.exchange(obrpc_pb2.LeaseRequest(seq=1), 5)).seq == 1
            with pytest.raises((StreamClosed, grpc.aio.AioRpcError)):
                await stream.exchange(obrpc_pb2.LeaseRequest(seq=2), 5)
            assert stream.broken
        finally:
            await stream.close()
            await server.stop(None)

    asyncio.run(run())
