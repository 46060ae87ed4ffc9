"""An agent's reconnect resumes its TLS session (issue 23 item 3; obcommon/security/tls.py
``TransportSecurity.session_cache``): the agent's own :class:`LeaseStream` against a real
grpc.aio server on ``TransportSecurity.add_port``, which reads each stream's
``session_resumed`` and peer identity as the RS's lease servicer does.

Only a server dialled by host name resumes (gRPC keys its session cache by the SNI name and
sends none for an IP address); a session is never resumed by another agent nor after the
agent's certificate changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security import tls
from obcommon.security.certs import Role, create_cert
from obcommon.security.identity import peer_identity, session_resumed
from obcommon.security.tls import TransportSecurity
from observer_agent.lease_stream import LeaseStream
from tests.unit.obcommon.security.helpers import VALID, make_ca

A, B = "127.0.0.1:4001", "127.0.0.1:4002"


@pytest.fixture(autouse=True)
def _reload_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Production re-stats the certificate files at most every 0.5 s; look at every call.
    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)


class Recorder(obrpc_pb2_grpc.RootServiceServicer):
    """Answers each request with its seq; records (resumed, peer name) per stream."""

    def __init__(self) -> None:
        self.streams: list[tuple[bool, str]] = []

    async def LeaseStream(  # type: ignore[override]  # noqa: N802
        self, request_iterator: AsyncIterator[obrpc_pb2.LeaseRequest], context: object
    ) -> AsyncIterator[obrpc_pb2.LeaseResponse]:
        ident = peer_identity(context)
        self.streams.append((session_resumed(context), ident.name if ident else ""))
        async for req in request_iterator:
            yield obrpc_pb2.LeaseResponse(seq=req.seq)


def test_reconnects_resume_the_session_of_the_same_agent_only(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    # The RS's certificate also names "localhost": the agents dial it by that name.
    create_cert(certs, key, Role.RS, "127.0.0.1:2882", VALID, hosts=["localhost"])
    node_dirs = {}
    for name, sub in ((A, "a"), (B, "b")):
        d = tmp_path / sub
        d.mkdir()
        (d / "ca.crt").write_bytes((certs / "ca.crt").read_bytes())
        create_cert(d, key, Role.NODE, name, VALID)
        node_dirs[name] = d
    agent_a = TransportSecurity.from_flags(node_dirs[A], False, Role.NODE)
    agent_b = TransportSecurity.from_flags(node_dirs[B], False, Role.NODE)

    async def run() -> list[tuple[bool, str]]:
        recorder = Recorder()
        server = grpc.aio.server()
        obrpc_pb2_grpc.add_RootServiceServicer_to_server(recorder, server)
        port = TransportSecurity.from_flags(certs, False, Role.RS).add_port(server, "127.0.0.1:0")
        await server.start()

        async def connect(sec: TransportSecurity, host: str) -> None:
            # One agent connection: a new channel, as after a lost stream.
            stream = LeaseStream(f"{host}:{port}", sec)
            try:
                resp = await stream.exchange(obrpc_pb2.LeaseRequest(seq=1), 10)
                assert resp.seq == 1
            finally:
                await stream.close()

        try:
            for _ in range(3):
                await connect(agent_a, "localhost")
            await connect(agent_b, "localhost")
            # Agent A's certificate is renewed: its old sessions are not offered.
            create_cert(node_dirs[A], key, Role.NODE, A, VALID, overwrite=True)
            await connect(agent_a, "localhost")
            await connect(agent_a, "localhost")
            # Dialled by IP address: gRPC sends no server name and keeps no session.
            await connect(agent_b, "127.0.0.1")
            await connect(agent_b, "127.0.0.1")
        finally:
            await server.stop(None)
        return recorder.streams

    assert asyncio.run(run()) == [
        (False, A),
        (True, A),
        (True, A),
        (False, B),
        (False, A),
        (True, A),
        (False, B),
        (False, B),
    ]
