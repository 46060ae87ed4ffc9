"""One bidirectional ``RootService.LeaseStream`` to one RS (docs/design/leases.md): requests
written, answers matched by ``seq``, every step bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

import grpc

from obcommon.backoff import BackoffPolicy, grpc_channel_options
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.tls import TransportSecurity

T = TypeVar("T")

#: Bound on closing a gRPC channel, so a wedged connection cannot block the loop.
CLOSE_TIMEOUT_S = 1.0


class StreamClosed(Exception):
    """The RS ended the lease stream (end of stream without an error status)."""


class LateAnswer(TimeoutError):
    """No answer within the timeout, but the stream is still open: the request stays
    outstanding and :meth:`LeaseStream.await_answer` may wait for it again (an overloaded RS
    answers late; dropping the connection would throw away its TLS
    handshake and add a new one to its backlog)."""


class LeaseStream:
    """One open ``RootService.LeaseStream`` to one RS address.

    :meth:`exchange` writes one request and waits for the response with the same ``seq``;
    every step is bounded by the timeout. After :class:`LateAnswer` the request is still
    outstanding (:attr:`outstanding`) and :meth:`await_answer` waits for it again; after any
    other exception the stream is unusable (:attr:`broken`) and must be closed.
    """

    def __init__(
        self, addr: str, security: TransportSecurity, backoff: BackoffPolicy | None = None
    ) -> None:
        """Open a channel (secured by ``security``: the agent's node certificate) and the
        stream to the RS at ``addr`` (``ip:port``); nothing is sent yet.

        gRPC's own reconnect backoff is kept within ``backoff`` (default
        :class:`obcommon.backoff.BackoffPolicy`) and the channel gets a subchannel of its
        own: the agent's lease loop does the backing off, with jitter (a
        shared subchannel kept gRPC's 1 s..120 s backoff timer across channels and made an
        agent wait 12 s after its RS came back).
        """
        self.addr = addr
        #: The certificates the stream was opened with (``TransportSecurity.generation``):
        #: the lease loop opens a new stream when they rotate.
        self.generation = security.generation()
        self._channel = security.aio_channel(addr, grpc_channel_options(backoff or BackoffPolicy()))
        self._call = obrpc_pb2_grpc.RootServiceStub(self._channel).LeaseStream()
        self.broken = False
        #: ``seq`` of the request whose answer is awaited, None when none is.
        self.outstanding: int | None = None
        #: Event-loop time (seconds) the outstanding request was written.
        self.sent_at = 0.0
        # One read at a time, kept across a LateAnswer: cancelling a grpc.aio read ends the call.
        self._read: asyncio.Future[object] | None = None

    async def exchange(
        self, req: obrpc_pb2.LeaseRequest, timeout_s: float
    ) -> obrpc_pb2.LeaseResponse:
        """Send ``req``; return the response carrying ``req.seq``.

        Raises :class:`LateAnswer` (no answer within ``timeout_s``; the stream stays usable
        and ``req`` outstanding), ``TimeoutError`` (the write did not complete),
        ``grpc.aio.AioRpcError`` (connection or stream error), :class:`StreamClosed`,
        ``ValueError`` when the RS answers with a ``seq`` we never sent, and ``RuntimeError``
        when another request is still outstanding (call :meth:`await_answer`).
        """
        if self.outstanding is not None:
            raise RuntimeError(f"request {self.outstanding} is still outstanding")
        loop = asyncio.get_running_loop()
        await self._guarded(asyncio.wait_for(self._call.write(req), timeout_s))
        self.outstanding = req.seq
        self.sent_at = loop.time()
        return await self.await_answer(timeout_s)

    async def await_answer(self, timeout_s: float) -> obrpc_pb2.LeaseResponse:
        """Wait up to ``timeout_s`` seconds more for the answer to the outstanding request and
        return it (earlier answers, to requests given up on before, are skipped).

        Raises :class:`LateAnswer` when none came in time (the request stays outstanding);
        ``grpc.aio.AioRpcError``, :class:`StreamClosed` or ``ValueError`` as :meth:`exchange`
        (the stream is then broken); ``RuntimeError`` when nothing is outstanding.
        """
        seq = self.outstanding
        if seq is None:
            raise RuntimeError("no request is outstanding")
        return await self._guarded(self._answer(seq, timeout_s))

    async def _answer(self, seq: int, timeout_s: float) -> obrpc_pb2.LeaseResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(self._call.read())
            remaining = deadline - loop.time()
            done: set[asyncio.Future[object]] = set()
            if remaining > 0:
                done, _ = await asyncio.wait({self._read}, timeout=remaining)
            if not done:
                raise LateAnswer(
                    f"no answer to lease request {seq} for {loop.time() - self.sent_at:.1f}s"
                )
            read, self._read = self._read, None
            resp = read.result()
            if resp is grpc.aio.EOF:
                raise StreamClosed("the RS closed the lease stream")
            assert isinstance(resp, obrpc_pb2.LeaseResponse)
            if resp.seq == seq:
                self.outstanding = None
                return resp
            if resp.seq > seq:
                raise ValueError(f"response seq {resp.seq} is ahead of request seq {seq}")
            # A late answer to a request we gave up on: skip it.

    async def _guarded(self, step: Awaitable[T]) -> T:
        """Await ``step``; any failure but :class:`LateAnswer` leaves the stream broken."""
        try:
            return await step
        except LateAnswer:
            raise
        except asyncio.InvalidStateError:
            # grpc.aio's way of saying the call already ended: report how it ended instead.
            self.broken = True
            raise StreamClosed(f"the lease stream ended: {await self._final_status()}") from None
        except BaseException:
            self.broken = True
            raise

    async def _final_status(self) -> str:
        try:
            code = await asyncio.wait_for(self._call.code(), CLOSE_TIMEOUT_S)
            details = await asyncio.wait_for(self._call.details(), CLOSE_TIMEOUT_S)
        except Exception:
            return "status unknown"
        name = getattr(code, "name", str(code))
        return f"{name}: {details}" if details else str(name)

    async def close(self) -> None:
        """Cancel the call and close the channel, bounded in time; never raises."""
        self.broken = True
        read, self._read = self._read, None
        if read is not None:
            if read.done():
                with contextlib.suppress(BaseException):
                    read.exception()  # retrieved, so asyncio does not log it as lost
            else:
                read.cancel()
        with contextlib.suppress(Exception):
            self._call.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._channel.close(grace=None), CLOSE_TIMEOUT_S)
