"""After a certificate rotation the agent renews its lease over a new stream presenting its
new certificate, so a bad new certificate is found at once rather than at the next
reconnect (observer_agent/lease.py, ``LeaseStream.generation``).

A real grpc.aio server with mutual TLS (the session's PKI, an RS certificate) answers the
agent's lease requests and records, per stream, the serial number of the certificate the
agent presented (gRPC's ``auth_context``)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from cryptography import x509

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role, Validity, create_cert
from obcommon.security.tls import TransportSecurity
from tests.support import pki
from tests.support.timescale import scaled
from tests.unit.observer_agent.helpers import ME, make_agent, ok_response


class SerialRecorder(obrpc_pb2_grpc.RootServiceServicer):
    """Accepts every lease request; ``streams`` holds the client certificate serial of each
    stream opened, ``renewals`` how many requests each stream carried."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.streams: list[int] = []
        self.renewals: list[int] = []

    async def LeaseStream(  # type: ignore[override]  # noqa: N802
        self,
        request_iterator: AsyncIterator[obrpc_pb2.LeaseRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[obrpc_pb2.LeaseResponse]:
        pem = context.auth_context()["x509_pem_cert"][0]
        self.streams.append(x509.load_pem_x509_certificate(pem).serial_number)
        self.renewals.append(0)
        index = len(self.streams) - 1
        async for req in request_iterator:
            self.renewals[index] += 1
            resp = ok_response(self.clock, cluster_id="c0ffee")
            resp.seq = req.seq
            yield resp


async def _until(cond: object, what: str, give_up_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + scaled(give_up_s)
    while not cond():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_rotation_opens_a_new_lease_stream_with_the_new_certificate(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    shutil.copytree(pki.certs_dir(Role.NODE, ME), certs)
    clock = FakeClock()

    async def scenario() -> None:
        recorder = SerialRecorder(clock)
        server = grpc.aio.server()
        obrpc_pb2_grpc.add_RootServiceServicer_to_server(recorder, server)
        port = TransportSecurity(pki.certs_dir(Role.RS, "127.0.0.1:1"), Role.RS).add_port(
            server, "127.0.0.1:0"
        )
        await server.start()
        agent = make_agent(
            tmp_path,
            clock,
            rs_list=f"127.0.0.1:{port}",
            certs_dir=certs,
            heartbeat_interval=50_000,
        )
        stop = asyncio.Event()
        loop_task = asyncio.ensure_future(agent.lease.run(stop))
        try:
            await _until(lambda: recorder.renewals and recorder.renewals[0] >= 3, "renewals")
            old = recorder.streams[0]
            v = Validity.starting(int(time.time()), 3600)
            new = create_cert(certs, pki.ca_key(), Role.NODE, ME, v, overwrite=True)
            await _until(lambda: new.serial_number in recorder.streams, "a stream of the new pair")
            at = recorder.streams.index(new.serial_number)
            await _until(lambda: recorder.renewals[at] >= 2, "renewals on the new stream")
        finally:
            stop.set()
            await asyncio.wait_for(loop_task, scaled(10))
            await agent.lease.close_stream()
            await server.stop(None)
        assert old != new.serial_number
        assert set(recorder.streams) == {old, new.serial_number}

    asyncio.run(scenario())
