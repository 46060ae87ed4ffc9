"""An agent of an older release answers an RPC it does not know with ``UNIMPLEMENTED``: the RS's
agent client takes it for an old peer (``OB_NOT_SUPPORTED`` naming the RPC), keeps its
channel and leaves no command unapplied for the lag detector, while a peer that is gone is
still ``OB_SERVER_CONNECTION_ERROR``. A real gRPC server whose ObserverService implements
nothing (the generated base class) plays the old agent."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from rootservice.servers.agent_client import AgentClient
from tests.support.ports import free_port


@pytest.fixture
def old_agent() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    obrpc_pb2_grpc.add_ObserverServiceServicer_to_server(
        obrpc_pb2_grpc.ObserverServiceServicer(), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def client() -> Iterator[AgentClient]:
    c = AgentClient(2_000_000, TransportSecurity.insecure_mode(Role.RS))
    yield c
    c.close()


def test_unimplemented_is_an_old_peer_not_a_dead_one(old_agent: str, client: AgentClient) -> None:
    with pytest.raises(ObError) as e:
        client.apply_replicas(old_agent, obrpc_pb2.ApplyReplicasRequest(rs_epoch=1))
    assert e.value.name == "OB_NOT_SUPPORTED"
    assert f"RPC ApplyReplicas on server '{old_agent}'" in e.value.message
    assert "older release" in e.value.message
    # The command never reached an apply step: nothing for the lag detector to find overdue.
    assert client.ledger.oldest_unapplied(old_agent) is None
    assert old_agent in client._channels._channels  # kept: the agent is up
    with pytest.raises(ObError) as e:
        client.request_heartbeat(old_agent, 1)
    assert e.value.name == "OB_NOT_SUPPORTED"
    assert client.ledger.oldest_unapplied(old_agent) is None


def test_a_peer_that_is_gone_is_still_a_connection_error(client: AgentClient) -> None:
    gone = f"127.0.0.1:{free_port()}"
    with pytest.raises(ObError) as e:
        client.dump_stacks(gone, 1)
    assert e.value.name == "OB_SERVER_CONNECTION_ERROR"


def test_a_server_s_stub_follows_its_channel(old_agent: str, client: AgentClient) -> None:
    """The stub of a server is kept with its channel and made again with a new channel: a
    peer that failed has its channel closed, and the next call must not use the closed
    one's stub."""
    cache = client._channels
    first = client._stub(old_agent, cache.get(old_agent))
    assert client._stub(old_agent, cache.get(old_agent)) is first
    client.forget(old_agent)
    again = client._stub(old_agent, cache.get(old_agent))
    assert again is not first
    # The new stub works: the old agent answers (UNIMPLEMENTED: an old peer, not a dead one).
    with pytest.raises(ObError) as e:
        client.request_heartbeat(old_agent, 1)
    assert e.value.name == "OB_NOT_SUPPORTED"
    cache.close()  # behind the client's back: the cache hands out a new channel
    assert client._stub(old_agent, cache.get(old_agent)) is not again


def test_a_channel_forgotten_by_another_call_stays_open_under_a_call(old_agent: str) -> None:
    """Another thread's failed call forgets a server's channel between this call taking it
    and starting the RPC (a DRAIN's heartbeat requests to a killed member, the reconciler's
    ApplyReplicas to it): the call still runs on it (a closed channel would raise
    ``ValueError: Cannot invoke RPC on closed channel!``, which no caller catches), the next
    call gets a new channel, and the forgotten one is closed once the call is done. The
    incarnation provider runs between the two steps, so it plays the other thread."""
    taken: list[grpc.Channel] = []

    def forget_under_the_call() -> int:
        if not taken:
            taken.append(client._channels._channels[old_agent])
            client.forget(old_agent)
        return 0

    client = AgentClient(
        2_000_000, TransportSecurity.insecure_mode(Role.RS), incarnation=forget_under_the_call
    )
    try:
        with pytest.raises(ObError) as e:
            client.request_heartbeat(old_agent, 1)
        # It reached the agent: UNIMPLEMENTED from the old agent, not a ValueError.
        assert e.value.name == "OB_NOT_SUPPORTED"
        assert taken and client._channels.get(old_agent) is not taken[0]
        with pytest.raises(ValueError, match="closed channel"):
            taken[0].unary_unary("/probe/Probe")(b"", timeout=1)
    finally:
        client.close()
