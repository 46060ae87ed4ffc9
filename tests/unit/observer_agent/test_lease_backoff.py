"""An agent whose lease requests an RS keeps refusing backs off exponentially up to a minute,
with jitter, and starts over once accepted; NOT_MASTER does not back off."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from observer_agent.lease import MAX_REFUSAL_BACKOFF_US
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import RS1, make_agent, ok_response, refusal

HB = 2_000_000


def test_refusals_back_off_exponentially_to_the_cap_and_reset_on_acceptance(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    lease = agent.lease
    assert lease.retry_delay_us() == HB
    delays = []
    for _ in range(8):
        assert not lease.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
        delays.append(lease.retry_delay_us())
    nominal = [min(MAX_REFUSAL_BACKOFF_US, HB << n) for n in range(8)]
    # 2, 4, 8, 16, 32, 60, 60, 60 s, each jittered down by at most 20 %.
    for d, n in zip(delays, nominal, strict=True):
        assert 0.8 * n <= d <= n
    assert max(delays) <= MAX_REFUSAL_BACKOFF_US
    assert delays[-1] >= 0.8 * MAX_REFUSAL_BACKOFF_US
    # Accepted: the next refusal starts again at one heartbeat interval.
    assert lease.handle_response(ok_response(clock), RS1)
    assert lease.retry_delay_us() == HB
    assert not lease.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
    assert 0.8 * HB <= lease.retry_delay_us() <= HB


def test_not_master_does_not_back_off(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeClock(), heartbeat_interval=HB)
    for _ in range(5):
        assert not agent.lease.handle_response(refusal("OB_RS_NOT_MASTER"), RS1)
    assert agent.lease.retry_delay_us() == HB


def test_a_deleted_server_logs_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    elapsed = 0
    requests = 0
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        # 10.5 minutes of refusals, waiting the agent's own delay between requests.
        while elapsed < 630_000_000:
            agent.lease.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
            requests += 1
            d = agent.lease.retry_delay_us()
            clock.advance(d)
            elapsed += d
    lines = [r for r in caplog.records if "lease refused" in r.getMessage()]
    # Before: 315 requests and 315 lines. Now about 15 requests and one line a minute at most.
    assert requests <= 20
    assert 1 <= len(lines) <= 11


def test_unreachable_rs_backs_off_with_jitter_up_to_the_cap_and_resets(tmp_path: Path) -> None:
    """Attempts without an answer (nothing listens on the port) wait the
    reconnect backoff's draws, growing from 100 ms to at most 2 s, not a fixed interval; an
    accepted lease resets it, and a stream lost while renewing waits below the base."""
    port = free_port()
    clock = FakeClock()
    agent = make_agent(
        tmp_path,
        clock,
        heartbeat_interval=5_000_000,
        rpc_timeout=1_000_000,
        rs_list=f"127.0.0.1:{port}",
        insecure=True,
    )
    lease = agent.lease

    async def rounds(n: int) -> list[float]:
        return [await lease._lease_round() for _ in range(n)]

    delays = asyncio.run(rounds(8))
    policy = lease.reconnect.policy
    assert lease.refusals["rpc_failed"] == 8
    for n, d in enumerate(delays):
        assert 0 <= d * 1e6 <= policy.window_us(n)
    assert max(delays) * 1e6 <= policy.cap_us < 5_000_000
    assert lease.reconnect.failures == 8
    assert lease.handle_response(ok_response(clock), f"127.0.0.1:{port}")
    assert lease.reconnect.failures == 0
    assert 0 <= lease.reconnect.first_delay_us() <= policy.base_us
