"""The leader's heartbeat request ends the agent's lease backoff; nobody else's does.

ADD SERVER of an agent that was already running pulls one heartbeat from it
(``ObserverService.RequestHeartbeat``). The agent had been refused (not in the whitelist) and
was backing off; it must ask for its lease at once, or the RS sees the server's lease run
out one lease later and the server come back SUSPECT. The request ends the backoff only when
its fencing token is one the agent would obey (the highest it obeyed, or a newer epoch): a
deposed RS, another incarnation of the same epoch, a request without a token, and a node
certificate changing nothing. The fake clock drives the decisions; the loop and the gRPC
service run for real, on conditions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from obcommon.clock import FakeClock
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from observer_agent.agent import Agent
from observer_agent.service import create_server, stop_server
from tests.support import pki
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import RS1, make_agent, ok_response, refusal, wait_until

HB = 2_000_000
EPOCH, INCARNATION = 3, 0x5EED
NOT_IN_WHITE_LIST = "OB_SERVER_NOT_IN_WHITE_LIST"


def obeying(agent: Agent, clock: FakeClock) -> None:
    """The agent obeys the RS of (EPOCH, INCARNATION) through one accepted lease, then that
    RS refuses it six times as not in the whitelist (the server was deleted): it backs off,
    four heartbeat intervals by now."""
    resp = ok_response(clock, epoch=EPOCH)
    resp.rs_incarnation = INCARNATION
    assert agent.lease.handle_response(resp, RS1)
    for _ in range(6):
        assert not agent.lease.handle_response(refusal(NOT_IN_WHITE_LIST, epoch=EPOCH), RS1)


def test_the_leaders_request_ends_the_backoff(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    obeying(agent, clock)
    lease = agent.lease
    assert lease.refusals_in_row == 6
    assert lease.retry_delay_us() >= 0.8 * 4 * HB
    assert lease.heartbeat_requested(FenceToken(EPOCH, INCARNATION))
    assert lease.refusals_in_row == 0
    assert lease.retry_delay_us() == HB
    # Nothing else changed: the token obeyed, the registration, the refusal counters.
    assert lease.tokens.highest == FenceToken(EPOCH, INCARNATION)
    assert not lease.registered
    assert lease.refusals[NOT_IN_WHITE_LIST] == 6


def test_a_newer_epoch_ends_the_backoff_without_being_obeyed(tmp_path: Path) -> None:
    """A leader of a higher epoch (a failover meanwhile) is let through, but only a lease
    answer makes its token the obeyed one."""
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    obeying(agent, clock)
    assert agent.lease.heartbeat_requested(FenceToken(EPOCH + 1, 0xBEEF))
    assert agent.lease.refusals_in_row == 0
    assert agent.lease.tokens.highest == FenceToken(EPOCH, INCARNATION)


@pytest.mark.parametrize(
    "token",
    [
        FenceToken(EPOCH - 1, INCARNATION),  # a deposed RS
        FenceToken(EPOCH, INCARNATION + 1),  # two root services with one epoch
        FenceToken(0, 0),  # no token: a tool, not a leader
        FenceToken(EPOCH + (1 << 40), 1),  # an absurd jump
    ],
    ids=["lower_epoch", "other_incarnation", "no_epoch", "absurd_epoch"],
)
def test_a_request_the_agent_would_not_obey_changes_nothing(
    tmp_path: Path, token: FenceToken
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    obeying(agent, clock)
    before = agent.lease.retry_delay_us()
    assert not agent.lease.heartbeat_requested(token)
    assert agent.lease.refusals_in_row == 6
    assert agent.lease.retry_delay_us() >= 0.8 * 4 * HB and before >= 0.8 * 4 * HB
    assert agent.lease.tokens.highest == FenceToken(EPOCH, INCARNATION)


def test_a_registered_agent_renewing_its_lease_is_left_alone(tmp_path: Path) -> None:
    """The take-office pull reaches agents that renew already: nothing to wake."""
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    resp = ok_response(clock, epoch=EPOCH)
    resp.rs_incarnation = INCARNATION
    assert agent.lease.handle_response(resp, RS1)
    agent.lease._wake = wake = asyncio.Event()  # as run() makes it
    assert agent.lease.heartbeat_requested(FenceToken(EPOCH, INCARNATION))
    assert not wake.is_set()
    assert agent.lease.registered and agent.lease.refusals_in_row == 0


def test_the_lease_loop_sleeping_a_backoff_wakes_only_for_the_leader(tmp_path: Path) -> None:
    """The loop itself: a round that ends in an hour's backoff, a stale request (nothing
    wakes it: the wake is not even set), then the leader's (the next round starts)."""
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    obeying(agent, clock)
    lease = agent.lease
    rounds: list[int] = []

    async def one_round() -> float:
        rounds.append(lease.refusals_in_row)
        return 3600.0

    lease._lease_round = one_round  # type: ignore[method-assign]

    async def scenario() -> None:
        stop = asyncio.Event()
        loop = asyncio.ensure_future(lease.run(stop))
        try:
            await wait_until(lambda: len(rounds) == 1, "the first round")
            assert lease._wake is not None
            assert not lease.heartbeat_requested(FenceToken(EPOCH - 1, INCARNATION))
            assert not lease._wake.is_set()
            for _ in range(20):
                await asyncio.sleep(0)
            assert len(rounds) == 1
            assert lease.heartbeat_requested(FenceToken(EPOCH, INCARNATION))
            await wait_until(lambda: len(rounds) == 2, "the round the leader's request starts")
            # The second round asked with the backoff forgotten.
            assert rounds == [6, 0]
        finally:
            stop.set()
            await asyncio.wait_for(loop, 10)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_over_grpc_only_an_rs_certificate_with_the_obeyed_token_ends_the_backoff(
    tmp_path: Path,
) -> None:
    """The servicer, with mutual TLS: a node certificate is refused at the gate
    (PERMISSION_DENIED, a node speaks for itself only); a deposed RS is refused with
    OB_RS_NOT_MASTER and the backoff stays; the leader is answered and ends it."""
    me = f"127.0.0.1:{free_port()}"
    clock = FakeClock()
    agent = make_agent(
        tmp_path,
        clock,
        heartbeat_interval=HB,
        rpc_addr=me,
        insecure=False,
        certs_dir=pki.certs_dir(Role.NODE, me),
    )
    obeying(agent, clock)

    async def ask(role: Role, name: str, epoch: int, incarnation: int) -> object:
        async with pki.security(role, name).aio_channel(me) as ch:
            try:
                return await obrpc_pb2_grpc.ObserverServiceStub(ch).RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(rs_epoch=epoch, rs_incarnation=incarnation),
                    timeout=10,
                )
            except grpc.aio.AioRpcError as e:
                return e.code()

    async def scenario() -> None:
        server, _ = await create_server(agent, me)
        await server.start()
        agent.mark_serving()
        try:
            other_node = f"127.0.0.1:{free_port()}"
            forged = await ask(Role.NODE, other_node, EPOCH, INCARNATION)
            assert forged == grpc.StatusCode.PERMISSION_DENIED
            assert agent.lease.refusals_in_row == 6
            stale = await ask(Role.RS, "127.0.0.1:1", EPOCH - 1, INCARNATION)
            assert stale == grpc.StatusCode.UNAVAILABLE  # OB_RS_NOT_MASTER's status
            assert agent.tokens.refused == 1
            assert agent.lease.refusals_in_row == 6
            leader = await ask(Role.RS, "127.0.0.1:1", EPOCH, INCARNATION)
            assert isinstance(leader, obrpc_pb2.LeaseRequest) and leader.server == me
            assert agent.lease.refusals_in_row == 0
            assert agent.lease.retry_delay_us() == HB
        finally:
            await stop_server(agent, server)

    asyncio.run(asyncio.wait_for(scenario(), 60))
