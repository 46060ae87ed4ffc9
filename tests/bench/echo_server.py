"""Bare ``RootService.LeaseStream`` echo server: the baseline of ``make bench``.

It answers every ``LeaseRequest`` with a ``LeaseResponse`` carrying the same ``seq`` and a
``lease_expire_time`` (now + lease), nothing else, on a ``grpc.aio`` server built with the
same options as the RS's, so that heartbeat_bench.py can give the RS's CPU and latency as a
ratio to the cost of gRPC itself.

Usage (heartbeat_bench.py starts it)::

    .venv/bin/python tests/bench/echo_server.py [--addr 127.0.0.1:0] [--lease-time-us 10000000]
        [--certs-dir DIR]

With ``--certs-dir DIR`` (``ca.crt``, ``rs.crt``, ``rs.key``) it serves mutual TLS through
the RS's own ``TransportSecurity.add_port`` (a client certificate of the CA required,
certificates re-read on change), so that the benchmark's "echo over TLS" row is the cost
of gRPC's TLS alone; it does not look at the peer's identity (the RS does, once per stream).

Prints ``READY <port>`` on stdout once serving; stops on SIGTERM / SIGINT or when stdin
closes (so it never outlives the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator

import grpc

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity


class EchoLease(obrpc_pb2_grpc.RootServiceServicer):
    def __init__(self, lease_time_us: int) -> None:
        self.lease_time_us = lease_time_us

    async def LeaseStream(  # type: ignore[override]  # noqa: N802
        self,
        request_iterator: AsyncIterator[obrpc_pb2.LeaseRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[obrpc_pb2.LeaseResponse]:
        lease = self.lease_time_us
        response = obrpc_pb2.LeaseResponse
        async for req in request_iterator:
            yield response(seq=req.seq, lease_expire_time=int(time.time() * 1e6) + lease)

    async def RenewLease(  # type: ignore[override]  # noqa: N802
        self, request: obrpc_pb2.LeaseRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.LeaseResponse:
        return obrpc_pb2.LeaseResponse(
            seq=request.seq, lease_expire_time=int(time.time() * 1e6) + self.lease_time_us
        )


async def serve(addr: str, lease_time_us: int, certs_dir: str = "") -> int:
    # The same server options as rootservice/api/grpc_server.py create_server (pending-call limit).
    limit = 50_000
    server = grpc.aio.server(
        options=[
            ("grpc.server.max_pending_requests", limit),
            ("grpc.server.max_pending_requests_hard_limit", limit * 2),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ]
    )
    obrpc_pb2_grpc.add_RootServiceServicer_to_server(EchoLease(lease_time_us), server)
    security = TransportSecurity.from_flags(certs_dir or None, not certs_dir, Role.RS)
    port = security.add_port(server, addr)
    if port == 0:
        print(f"echo_server: cannot bind {addr}", file=sys.stderr)
        return 1
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def watch_stdin() -> None:
        # The parent holds our stdin open; EOF means it is gone.
        with contextlib.suppress(Exception):
            while sys.stdin.readline():
                pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(f"READY {port}", flush=True)
    await stop.wait()
    await server.stop(0.5)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", default="127.0.0.1:0")
    p.add_argument("--lease-time-us", type=int, default=10_000_000)
    p.add_argument("--certs-dir", default="", help="ca.crt, rs.crt, rs.key: mutual TLS")
    args = p.parse_args()
    return asyncio.run(serve(args.addr, args.lease_time_us, args.certs_dir))


if __name__ == "__main__":
    sys.exit(main())
