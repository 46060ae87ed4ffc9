"""obcommon.security.grpc_connections: the open gRPC connections of a revoked certificate are
closed. The rules on fake sockets (which peer, which port, which serial; the map pruned), then
one agent's gRPC server in-process with mutual TLS: the RS's open channel loses its
connection when the RS certificate is revoked, a node's channel stays, and the RS's next
call is refused as revoked on a new connection."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
import pytest

from obcommon.clock import SystemClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security import grpc_connections
from obcommon.security.certs import Role, cert_file
from obcommon.security.grpc_connections import (
    Endpoint,
    GrpcConnections,
    open_sockets,
    parse_peer,
)
from obcommon.security.revocation import RevokedSerials, serial_of_pem
from observer_agent.service import create_server, stop_server
from tests.support import pki
from tests.support.ports import free_port
from tests.unit.observer_agent.test_service import in_process_agent

SERVED = 2882


def test_peers_are_read_as_grpc_names_them() -> None:
    assert parse_peer("ipv4:127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert parse_peer("ipv6:[::1]:5000") == ("::1", 5000)
    assert parse_peer("ipv6:%5B::1%5D:5000") == ("::1", 5000)
    assert parse_peer("ipv6:[fe80::1%25eth0]:7") == ("fe80::1", 7)
    for bad in ("unix:/tmp/s", "ipv4:127.0.0.1", "ipv4:nohost:1", "", "ipv4:1.2.3.4:x"):
        assert parse_peer(bad) is None, bad


class FakeOs:
    """The process's sockets as ``(fd, local, remote)`` and the descriptors shut down."""

    def __init__(self, sockets: list[tuple[int, Endpoint, Endpoint]]) -> None:
        self.sockets = sockets
        self.shut: list[int] = []
        self.scans = 0
        self.fail: set[int] = set()

    def list(self) -> list[tuple[int, Endpoint, Endpoint]]:
        self.scans += 1
        return list(self.sockets)

    def shutdown(self, fd: int) -> None:
        if fd in self.fail:
            raise OSError("EBADF")
        self.shut.append(fd)


def _conns(fake: FakeOs) -> tuple[RevokedSerials, GrpcConnections]:
    revoked = RevokedSerials()
    conns = GrpcConnections(revoked, sockets=fake.list, shutdown=fake.shutdown)
    conns.serve(SERVED)
    return revoked, conns


def test_only_the_revoked_serials_connections_to_our_servers_are_closed() -> None:
    fake = FakeOs(
        [
            (10, ("127.0.0.1", SERVED), ("127.0.0.1", 40001)),  # the RS, serial aa
            (11, ("127.0.0.1", SERVED), ("127.0.0.1", 40002)),  # a node, serial bb
            # An outgoing channel of this process to a server whose port is the RS's
            # ephemeral one: another local port, never touched.
            (12, ("127.0.0.1", 50000), ("127.0.0.1", 40001)),
            (13, ("127.0.0.1", SERVED), ("127.0.0.1", 40003)),  # nobody we know
        ]
    )
    revoked, conns = _conns(fake)
    conns.seen("ipv4:127.0.0.1:40001", "aa")
    conns.seen("ipv4:127.0.0.1:40002", "bb")
    assert len(conns) == 2
    revoked.replace(["cc"])  # another serial: nothing closed, nothing scanned
    assert fake.shut == [] and fake.scans == 0
    revoked.replace(["cc", "aa"])
    assert fake.shut == [10]
    assert conns.closed_total == 1
    assert len(conns) == 1  # the closed peer is forgotten
    revoked.replace(["cc", "aa"])  # unchanged list: no listener call
    assert fake.shut == [10]


def test_a_peer_that_changed_certificate_is_judged_by_its_last_one() -> None:
    fake = FakeOs([(10, ("127.0.0.1", SERVED), ("127.0.0.1", 40001))])
    revoked, conns = _conns(fake)
    conns.seen("ipv4:127.0.0.1:40001", "aa")
    conns.seen("ipv4:127.0.0.1:40001", "bb")  # the port reused by another connection
    revoked.replace(["aa"])
    assert fake.shut == []
    revoked.replace(["aa", "bb"])
    assert fake.shut == [10]


def test_nothing_is_remembered_before_a_server_port_is_known() -> None:
    fake = FakeOs([])
    conns = GrpcConnections(RevokedSerials(), sockets=fake.list, shutdown=fake.shutdown)
    conns.seen("ipv4:127.0.0.1:40001", "aa")
    assert len(conns) == 0


def test_a_failed_shutdown_is_logged_and_the_others_still_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeOs(
        [
            (10, ("127.0.0.1", SERVED), ("127.0.0.1", 40001)),
            (11, ("127.0.0.1", SERVED), ("127.0.0.1", 40002)),
        ]
    )
    fake.fail = {10}
    revoked, conns = _conns(fake)
    conns.seen("ipv4:127.0.0.1:40001", "aa")
    conns.seen("ipv4:127.0.0.1:40002", "aa")
    with caplog.at_level(logging.WARNING):
        revoked.replace(["aa"])
    assert fake.shut == [11] and conns.closed_total == 1
    assert "cannot close the connection of 127.0.0.1:40001: EBADF" in caplog.text


def test_the_map_is_pruned_to_the_open_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpc_connections, "PRUNE_AT", 3)
    fake = FakeOs([(10, ("127.0.0.1", SERVED), ("127.0.0.1", 40004))])
    _, conns = _conns(fake)
    for port in (40001, 40002, 40003):
        conns.seen(f"ipv4:127.0.0.1:{port}", "aa")
    assert len(conns) == 3 and fake.scans == 0
    conns.seen("ipv4:127.0.0.1:40004", "aa")  # the fourth: a scan keeps the open one only
    assert fake.scans == 1 and len(conns) == 1


def test_open_sockets_lists_this_process_connections() -> None:
    """The real scan finds both ends of a connected pair made here, by their addresses."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            server_side, _ = listener.accept()
            with server_side:
                found = {(local, remote): fd for fd, local, remote in open_sockets()}
                mine = client.getsockname()
                assert found[(("127.0.0.1", port), ("127.0.0.1", mine[1]))] == server_side.fileno()
                assert found[(("127.0.0.1", mine[1]), ("127.0.0.1", port))] == client.fileno()
        # The listener is not connected: not listed.
        assert all(local != ("127.0.0.1", port) for _, local, _ in open_sockets())


def test_a_revoked_rs_certificate_loses_its_open_connection_to_the_agent(tmp_path: Path) -> None:
    me = f"127.0.0.1:{free_port()}"
    agent = in_process_agent(
        tmp_path, SystemClock(), rpc_addr=me, certs_dir=pki.certs_dir(Role.NODE, me)
    )
    rs_name, node_name = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    rs_serial = serial_of_pem((pki.certs_dir(Role.RS, rs_name) / cert_file(Role.RS)).read_bytes())

    async def states_after(ch: grpc.aio.Channel) -> grpc.ChannelConnectivity:
        # A closed connection shows as a change of state (IDLE or TRANSIENT_FAILURE).
        state = ch.get_state()
        if state is grpc.ChannelConnectivity.READY:
            await asyncio.wait_for(ch.wait_for_state_change(state), 10)
        return ch.get_state()

    async def scenario() -> None:
        server, _ = await create_server(agent, me)
        await server.start()
        agent.mark_serving()
        rs_ch = pki.security(Role.RS, rs_name).aio_channel(me)
        node_ch = pki.security(Role.NODE, node_name).aio_channel(me)
        try:
            rs = obrpc_pb2_grpc.ObserverServiceStub(rs_ch)
            empty = await rs.CheckServerEmpty(obrpc_pb2.CheckServerEmptyRequest(), timeout=5)
            assert empty.is_empty
            # A node's call is refused (not a member) but its connection is open and known.
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await obrpc_pb2_grpc.ReplicaServiceStub(node_ch).FetchLog(
                    obrpc_pb2.FetchLogRequest(tenant_id=1, ls_id=1, follower=node_name),
                    timeout=5,
                )
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert rs_ch.get_state() is grpc.ChannelConnectivity.READY
            assert node_ch.get_state() is grpc.ChannelConnectivity.READY
            assert len(agent.peer_gate.connections) == 2

            # The RS's lease answer brings the list, in the lease loop (here: this thread).
            agent.peer_gate.revoked.replace([rs_serial])
            assert agent.peer_gate.connections.closed_total == 1
            assert await states_after(rs_ch) is not grpc.ChannelConnectivity.READY
            assert node_ch.get_state() is grpc.ChannelConnectivity.READY
            # A new connection is made for the next call: refused as revoked.
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await rs.CheckServerEmpty(obrpc_pb2.CheckServerEmptyRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "is revoked" in (e.value.details() or "")
        finally:
            await rs_ch.close()
            await node_ch.close()
            await stop_server(agent, server)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_scan_is_not_repeated_at_each_new_peer_when_all_are_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # More live connections than PRUNE_AT: each scan leaves them all, and the next one waits
    # until the map has doubled (a scan per new peer made 5,000 agents' first leases O(N)).
    monkeypatch.setattr(grpc_connections, "PRUNE_AT", 4)
    peers = [40000 + i for i in range(64)]
    fake = FakeOs([(10 + i, ("127.0.0.1", SERVED), ("127.0.0.1", p)) for i, p in enumerate(peers)])
    _, conns = _conns(fake)
    for p in peers:
        conns.seen(f"ipv4:127.0.0.1:{p}", "aa")
    assert len(conns) == 64
    # At 5, 11, 23 and 47 peers: a logarithmic number, not one per peer past the fourth.
    assert fake.scans == 4
