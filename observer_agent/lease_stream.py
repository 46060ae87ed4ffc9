"""One bidirectional ``RootService.LeaseStream`` to one RS (SPEC.md section 5): requests
written, answers matched by ``seq``, every step bounded in time."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from obcommon.backoff import BackoffPolicy, grpc_channel_options
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.tls import TransportSecurity

#: Bound on closing a gRPC channel, so a wedged connection cannot block the loop.
CLOSE_TIMEOUT_S = 1.0


class StreamClosed(Exception):
    """The RS ended the lease stream (end of stream without an error status)."""


class LeaseStream:
    """One open ``RootService.LeaseStream`` to one RS address.

    :meth:`exchange` writes one request and waits for the response with the same ``seq``;
    every step is bounded by the timeout. After any exception the stream is unusable and
    must be closed.
    """

    def __init__(
        self, addr: str, security: TransportSecurity, backoff: BackoffPolicy | None = None
    ) -> None:
        """Open a channel (secured by ``security``: the agent's node certificate) and the
        stream to the RS at ``addr`` (``ip:port``); nothing is sent yet.

        gRPC's own reconnect backoff is kept within ``backoff`` (default
        :class:`obcommon.backoff.BackoffPolicy`) and the channel gets a subchannel of its
        own: the agent's lease loop does the backing off, with jitter (issue 14 item 1; a
        shared subchannel kept gRPC's 1 s..120 s backoff timer across channels and made an
        agent wait 12 s after its RS came back).
        """
        self.addr = addr
        self._channel = security.aio_channel(addr, grpc_channel_options(backoff or BackoffPolicy()))
        self._call = obrpc_pb2_grpc.RootServiceStub(self._channel).LeaseStream()
        self.broken = False

    async def exchange(
        self, req: obrpc_pb2.LeaseRequest, timeout_s: float
    ) -> obrpc_pb2.LeaseResponse:
        """Send ``req``; return the response carrying ``req.seq``.

        Raises ``TimeoutError`` (no answer within ``timeout_s``), ``grpc.aio.AioRpcError``
        (connection or stream error), :class:`StreamClosed`, or ``ValueError`` when the RS
        answers with a ``seq`` we never sent.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            await asyncio.wait_for(self._call.write(req), timeout_s)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                resp = await asyncio.wait_for(self._call.read(), remaining)
                if resp is grpc.aio.EOF:
                    raise StreamClosed("the RS closed the lease stream")
                if resp.seq == req.seq:
                    return resp  # type: ignore[no-any-return]
                if resp.seq > req.seq:
                    raise ValueError(f"response seq {resp.seq} is ahead of request seq {req.seq}")
                # A late answer to a request we gave up on: skip it.
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
        with contextlib.suppress(Exception):
            self._call.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._channel.close(grace=None), CLOSE_TIMEOUT_S)
