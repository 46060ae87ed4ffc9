"""An agent whose lease requests an RS keeps refusing backs off exponentially with jitter and
starts over once accepted: up to a minute for a refusal only an operator on the node can lift, up to four heartbeat intervals for one a statement lifts (not in the
whitelist, unknown zone); NOT_MASTER does not back off."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from observer_agent.refusal_backoff import (
    LIFTED_BY_STATEMENT_INTERVALS,
    MAX_REFUSAL_BACKOFF_US,
    refusal_delay_us,
)
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import RS1, make_agent, ok_response, refusal

HB = 2_000_000
#: A refusal no statement lifts: the address was buried by FORCE DELETE / RECOVER LS.
BURIED = "OB_SERVER_ALREADY_DELETED"
LIFTED = ("OB_SERVER_NOT_IN_WHITE_LIST", "OB_ZONE_INFO_NOT_EXIST")


class MaxJitter(random.Random):
    """The jitter's upper end every time: each wait is its nominal value."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_refusals_back_off_exponentially_to_the_cap_and_reset_on_acceptance(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    lease = agent.lease
    assert lease.retry_delay_us() == HB
    delays = []
    for _ in range(8):
        assert not lease.handle_response(refusal(BURIED), RS1)
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
    assert not lease.handle_response(refusal(BURIED), RS1)
    assert 0.8 * HB <= lease.retry_delay_us() <= HB


@pytest.mark.parametrize("reason", LIFTED)
def test_a_refusal_a_statement_lifts_backs_off_to_four_intervals_only(
    tmp_path: Path, reason: str
) -> None:
    """ADD SERVER (ADD ZONE) lifts the refusal: the agent asks at least every four heartbeat
    intervals (8 s by default, under the default 10 s lease), never a minute. The third
    refusal reaches the cap exactly; the fourth stays there instead of doubling again."""
    agent = make_agent(tmp_path, FakeClock(), heartbeat_interval=HB)
    lease = agent.lease
    lease._rng = MaxJitter()
    cap = LIFTED_BY_STATEMENT_INTERVALS * HB
    delays = []
    for _ in range(8):
        assert not lease.handle_response(refusal(reason), RS1)
        delays.append(lease.retry_delay_us())
    assert delays == [HB, 2 * HB, cap, cap, cap, cap, cap, cap]
    assert delays[1] < cap == delays[2]  # below the cap at two refusals, at it from three


def test_the_cap_follows_the_last_refusal(tmp_path: Path) -> None:
    """Five buried-address refusals wait 16 intervals; a sixth refusal that a statement lifts
    waits four (the cap is the last refusal's); a buried one after it doubles on, to the
    minute."""
    agent = make_agent(tmp_path, FakeClock(), heartbeat_interval=HB)
    lease = agent.lease
    lease._rng = MaxJitter()
    for _ in range(5):
        lease.handle_response(refusal(BURIED), RS1)
    assert lease.retry_delay_us() == 16 * HB
    lease.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
    assert lease.retry_delay_us() == LIFTED_BY_STATEMENT_INTERVALS * HB
    lease.handle_response(refusal(BURIED), RS1)
    assert lease.retry_delay_us() == MAX_REFUSAL_BACKOFF_US


def test_refusal_delay_boundaries() -> None:
    """The pure policy: no refusal -> one interval; a statement's cap at four intervals and
    never above the minute (a heartbeat interval of 20 s would make it 80 s); jitter within
    [0.8, 1.0] of the nominal wait."""
    top = MaxJitter()
    assert refusal_delay_us(HB, 0, True, top) == HB
    assert refusal_delay_us(HB, 3, True, top) == 4 * HB
    assert refusal_delay_us(HB, 4, True, top) == 4 * HB
    assert refusal_delay_us(HB, 4, False, top) == 8 * HB
    assert refusal_delay_us(20_000_000, 5, True, top) == MAX_REFUSAL_BACKOFF_US
    assert refusal_delay_us(HB, 40, False, top) == MAX_REFUSAL_BACKOFF_US
    rng = random.Random(7)
    for n in range(1, 10):
        d = refusal_delay_us(HB, n, True, rng)
        nominal = min(4 * HB, HB << (n - 1))
        assert 0.8 * nominal <= d <= nominal


def test_not_master_does_not_back_off(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeClock(), heartbeat_interval=HB)
    for _ in range(5):
        assert not agent.lease.handle_response(refusal("OB_RS_NOT_MASTER"), RS1)
    assert agent.lease.retry_delay_us() == HB


@pytest.mark.parametrize(
    ("reason", "most_requests"),
    [
        # Deleted, then removed from the whitelist: ADD SERVER could take it back. Every
        # 6.4-8 s: at most 630 / 6.4 + the first three, against 315 at a fixed 2 s.
        ("OB_SERVER_NOT_IN_WHITE_LIST", 102),
        # Buried: nothing takes it back. About 15 requests, the minute reached after six.
        (BURIED, 20),
    ],
)
def test_a_deleted_server_logs_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reason: str, most_requests: int
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, heartbeat_interval=HB)
    elapsed = 0
    requests = 0
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        # 10.5 minutes of refusals, waiting the agent's own delay between requests.
        while elapsed < 630_000_000:
            agent.lease.handle_response(refusal(reason), RS1)
            requests += 1
            d = agent.lease.retry_delay_us()
            clock.advance(d)
            elapsed += d
    lines = [r for r in caplog.records if "lease refused" in r.getMessage()]
    # Before the refusal was rate-limited: 315 requests and 315 lines. One line a minute at most, whatever the
    # reason.
    assert requests <= most_requests
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
