"""Every RS -> agent call that reveals or changes the server's state is fenced: the agent's
``RequestHeartbeat``, ``CheckServerEmpty`` and ``DumpStacks`` answer only a root service
whose fencing token follows the highest the agent obeyed, as ``ApplyReplicas`` acts only on
one. A deposed root service (a lower epoch), another incarnation of the epoch, a call
without a token and an absurd epoch are refused with the error ``ApplyReplicas`` answers,
and change nothing: no token written, no backoff ended, no command settled.

The agent's gRPC service runs in-process, called through the RS's own
:class:`~rootservice.servers.agent_client.AgentClient` (which reads the refusal's OceanBase
error from the trailing metadata and keeps the channel: the agent is up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from obcommon.bounds import MAX_TERM_JUMP
from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from observer_agent.agent import Agent
from observer_agent.fence import load_token
from observer_agent.service import create_server, stop_server
from rootservice.servers.agent_client import AgentClient
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import make_agent
from tests.unit.observer_agent.test_lease_wake import EPOCH, HB, INCARNATION, obeying

#: The calls under the fence, each through the RS's client: (name, call(client, server, epoch)).
CALLS: list[tuple[str, Callable[[AgentClient, str, int], Any]]] = [
    ("RequestHeartbeat", lambda c, s, e: c.request_heartbeat(s, e)),
    ("CheckServerEmpty", lambda c, s, e: c.check_server_empty(s, e)),
    ("DumpStacks", lambda c, s, e: c.dump_stacks(s, e)),
]


def _agent(tmp_path: Path, clock: FakeClock) -> Agent:
    return make_agent(tmp_path, clock, heartbeat_interval=HB, rpc_addr=f"127.0.0.1:{free_port()}")


def _serve(agent: Agent, scenario: Callable[[str], None]) -> None:
    """Run ``scenario(server)`` in a thread (the RS's client is synchronous) while the
    agent's gRPC server runs on the event loop."""

    async def main() -> None:
        server, port = await create_server(agent, agent.settings.rpc_addr)
        await server.start()
        agent.mark_serving()
        try:
            await asyncio.to_thread(scenario, f"127.0.0.1:{port}")
        finally:
            await stop_server(agent, server)

    asyncio.run(asyncio.wait_for(main(), 60))


class Rs:
    """The RS's agent client with the incarnation it sends settable."""

    def __init__(self) -> None:
        self.incarnation = INCARNATION
        self.client = AgentClient(
            5_000_000,
            TransportSecurity.insecure_mode(Role.RS),
            incarnation=lambda: self.incarnation,
        )


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (FenceToken(EPOCH - 1, INCARNATION), "OB_RS_NOT_MASTER"),  # a deposed RS
        (FenceToken(EPOCH, INCARNATION + 1), "OB_RS_NOT_MASTER"),  # one epoch, two RSs
        (FenceToken(0, 0), "OB_RS_NOT_MASTER"),  # no token: nobody in office
        (FenceToken(EPOCH + MAX_TERM_JUMP + 1, INCARNATION), "OB_INVALID_ARGUMENT"),  # absurd
    ],
    ids=["deposed", "other_incarnation", "no_token", "absurd_epoch"],
)
def test_a_call_whose_token_does_not_follow_is_refused_and_changes_nothing(
    tmp_path: Path, token: FenceToken, error: str
) -> None:
    clock = FakeClock()
    agent = _agent(tmp_path, clock)
    obeying(agent, clock)
    applied_before = agent.lease.commands.highest
    rs = Rs()
    rs.incarnation = token.incarnation

    def scenario(server: str) -> None:
        for name, call in CALLS:
            with pytest.raises(ObError) as e:
                call(rs.client, server, token.epoch)
            assert e.value.name == error, name
            # The call, the server, and both tokens are named.
            assert f"{name} on server '{server}'" in e.value.message
            assert f"{name} refused" in e.value.message
            if error == "OB_RS_NOT_MASTER":
                assert str(token) in e.value.message
                assert str(FenceToken(EPOCH, INCARNATION)) in e.value.message
            else:
                assert f"rs_epoch {token.epoch} is above" in e.value.message
            assert server in rs.client._channels._channels, "kept: the agent answered"
        # The refused command is settled at once: it never reached the apply step.
        assert rs.client.ledger.oldest_unapplied(server) is None

    _serve(agent, scenario)
    assert agent.tokens.refused == len(CALLS)
    # Nothing changed: the token obeyed (memory and file), the backoff, the commands applied.
    assert agent.tokens.highest == FenceToken(EPOCH, INCARNATION)
    assert load_token(agent.data_dir) == FenceToken(EPOCH, INCARNATION)
    assert agent.lease.refusals_in_row == 6
    assert agent.lease.commands.highest == applied_before


@pytest.mark.parametrize("epoch", [EPOCH, EPOCH + 1], ids=["the_obeyed", "a_newer"])
def test_the_root_service_in_office_is_answered(tmp_path: Path, epoch: int) -> None:
    """The RS the agent obeys, and one of a newer epoch (a failover it has not heard of
    yet), are answered; a newer token is not obeyed by being answered (only a lease answer
    or a command makes it the highest)."""
    clock = FakeClock()
    agent = _agent(tmp_path, clock)
    obeying(agent, clock)
    rs = Rs()
    rs.incarnation = INCARNATION if epoch == EPOCH else INCARNATION + 7
    answers: dict[str, Any] = {}

    def scenario(server: str) -> None:
        for name, call in CALLS:
            answers[name] = call(rs.client, server, epoch)
        answers["server"] = server

    _serve(agent, scenario)
    assert agent.tokens.refused == 0
    hb = answers["RequestHeartbeat"]
    assert isinstance(hb, obrpc_pb2.LeaseRequest) and hb.server == answers["server"]
    assert answers["CheckServerEmpty"].server == answers["server"]
    assert answers["DumpStacks"].threads
    assert agent.lease.refusals_in_row == 0  # the heartbeat request ended the backoff
    assert agent.tokens.highest == FenceToken(EPOCH, INCARNATION)
    assert load_token(agent.data_dir) == FenceToken(EPOCH, INCARNATION)


def test_an_agent_that_obeyed_nobody_answers_any_root_service(tmp_path: Path) -> None:
    """ADD SERVER and BOOTSTRAP ask a fresh agent (no token kept) whether it is empty: any
    epoch passes, including the first RS's."""
    agent = _agent(tmp_path, FakeClock())
    rs = Rs()
    found: list[bool] = []
    _serve(agent, lambda server: found.append(rs.client.check_server_empty(server, 1).is_empty))
    assert found == [True]
    assert agent.tokens.refused == 0
