"""observer_agent.replicas.peers: a certificate rotation reopens the agent-to-agent channels
without cutting the calls in flight on the old ones (a copy's data stream or a log fetch
started before it completes), and close() still ends everything.

A real grpc.aio ``ReplicaService`` server over mutual TLS whose ``FetchLog`` waits until the
test releases it, and a real node certificate rewritten on disk."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import grpc
import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security import tls
from obcommon.security.certs import CA_CERT, Role, create_cert
from obcommon.security.tls import TransportSecurity
from observer_agent.replicas import peers as peers_module
from observer_agent.replicas.peers import PeerChannels
from tests.unit.obcommon.security.helpers import VALID, make_ca

ME = "127.0.0.1:2882"
#: Bound on every wait of these tests (seconds); none is expected to come near it.
WAIT_S = 10.0


@pytest.fixture(autouse=True)
def _reload_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Production re-stats the files at most every 0.5 s; the tests look at every call.
    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)


class _HeldFetch(obrpc_pb2_grpc.ReplicaServiceServicer):
    """``FetchLog`` answers only once ``release`` is set; ``entered`` is set when a call is in."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def FetchLog(  # type: ignore[override]  # noqa: N802
        self, request: obrpc_pb2.FetchLogRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.FetchLogResponse:
        self.entered.set()
        await self.release.wait()
        return obrpc_pb2.FetchLogResponse(end_index=request.from_index + 7)


def _rotate(certs: Path, ca_key: Path, tmp: Path) -> None:
    """A new node pair for ``ME`` written over the old one."""
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    shutil.copy(certs / CA_CERT, scratch / CA_CERT)
    create_cert(scratch, ca_key, Role.NODE, ME, VALID, overwrite=True)
    for name in ("node.key", "node.crt"):
        shutil.copy(scratch / name, certs / name)


async def _serve(certs: Path) -> tuple[grpc.aio.Server, _HeldFetch, str]:
    servicer = _HeldFetch()
    server = grpc.aio.server()
    obrpc_pb2_grpc.add_ReplicaServiceServicer_to_server(servicer, server)
    port = TransportSecurity.from_flags(certs, False, Role.NODE).add_port(server, "127.0.0.1:0")
    assert port > 0
    await server.start()
    return server, servicer, f"127.0.0.1:{port}"


def test_a_rotation_lets_the_call_in_flight_finish_on_the_old_channel(tmp_path: Path) -> None:
    certs, ca_key = make_ca(tmp_path)
    create_cert(certs, ca_key, Role.NODE, ME, VALID)
    sec = TransportSecurity.from_flags(certs, False, Role.NODE)

    async def run() -> tuple[int, bool, int]:
        server, servicer, addr = await _serve(certs)
        peers = PeerChannels(sec)
        try:
            before = peers.stub(addr)
            call = asyncio.ensure_future(
                before.FetchLog(obrpc_pb2.FetchLogRequest(from_index=5), timeout=WAIT_S)
            )
            await asyncio.wait_for(servicer.entered.wait(), WAIT_S)
            _rotate(certs, ca_key, tmp_path)
            assert sec.refresh() is True
            # The next use after the rotation replaces the channel: new calls get a new one.
            after = peers.stub(addr)
            reopened = after.FetchLog is not before.FetchLog and peers._channels[addr] is not None
            # The replaced channel is being closed now, with the call still in flight.
            await asyncio.sleep(0)
            servicer.release.set()
            resp = await asyncio.wait_for(call, WAIT_S)
            # A call on the new channel (new connection, new pair) works too.
            again = await after.FetchLog(obrpc_pb2.FetchLogRequest(from_index=1), timeout=WAIT_S)
            return resp.end_index, reopened, again.end_index
        finally:
            await peers.close()
            await server.stop(None)

    end, reopened, again = asyncio.run(run())
    assert end == 12  # answered, not CANCELLED by the rotation
    assert reopened and again == 8


def test_close_leaves_no_rotated_channel_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() (the agent's stop) ends the background close of a channel a rotation replaced
    even while a call on it still runs: it waits for it at most ``CLOSE_TIMEOUT_S``, then
    cancels it, so nothing is left pending on the loop."""
    monkeypatch.setattr(peers_module, "CLOSE_TIMEOUT_S", 0.05)
    certs, ca_key = make_ca(tmp_path)
    create_cert(certs, ca_key, Role.NODE, ME, VALID)
    sec = TransportSecurity.from_flags(certs, False, Role.NODE)

    async def run() -> tuple[int, int]:
        server, servicer, addr = await _serve(certs)
        peers = PeerChannels(sec)
        caller = asyncio.ensure_future(
            peers.stub(addr).FetchLog(obrpc_pb2.FetchLogRequest(), timeout=WAIT_S)
        )
        try:
            await asyncio.wait_for(servicer.entered.wait(), WAIT_S)
            _rotate(certs, ca_key, tmp_path)
            assert sec.refresh() is True
            peers.stub(addr)
            await asyncio.sleep(0)
            closing = len(peers._closing)  # the old channel, waiting for its call
            await asyncio.wait_for(peers.close(), WAIT_S)
            await asyncio.sleep(0)  # the cancelled close task ends
            return closing, len(peers._closing)
        finally:
            servicer.release.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(caller, WAIT_S)
            await server.stop(None)

    closing_before, closing_after = asyncio.run(run())
    assert closing_before == 1
    assert closing_after == 0
