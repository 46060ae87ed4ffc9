"""The event loop's busy share (rootservice.servers.loop_load): windows judged on a fake clock
with the waits reported by hand, both sides of the idle threshold and of the window length;
a real event loop built on its selector counts its waits; and the lease queue turns its
pacing on when the loop hardly waited, with every round short."""

from __future__ import annotations

import asyncio

from obcommon.clock import FakeClock
from rootservice.servers.lease_queue import BUSY_HOLD_US, LeaseQueue
from rootservice.servers.loop_load import SATURATED_IDLE, WINDOW_NS, LoopLoad


def test_a_window_with_waits_under_the_idle_share_is_saturated() -> None:
    ns = [0]
    load = LoopLoad(clock_ns=lambda: ns[0])
    assert load.last_busy == -1.0
    # Exactly the idle share: not saturated (the rule is "less than").
    load.waited(int(WINDOW_NS * SATURATED_IDLE))
    ns[0] += WINDOW_NS
    assert not load.saturated() and abs(load.last_busy - (1 - SATURATED_IDLE)) < 1e-9
    # One nanosecond less of waiting in the next window: saturated.
    load.waited(int(WINDOW_NS * SATURATED_IDLE) - 1)
    ns[0] += WINDOW_NS
    assert load.saturated()


def test_a_window_too_short_or_without_a_round_is_not_judged() -> None:
    ns = [0]
    load = LoopLoad(clock_ns=lambda: ns[0])
    load.waited(0)
    ns[0] += WINDOW_NS - 1
    assert not load.saturated() and load.last_busy == -1.0  # too short: still open
    ns[0] += 1
    assert load.saturated()  # the same window, now long enough: it never waited
    ns[0] += 10 * WINDOW_NS
    # No select at all: no loop on this selector (or one callback held it, which the
    # queue's round probe judges): not saturated by this measure.
    assert not load.saturated()


def test_a_loop_on_its_selector_counts_its_waits_and_not_its_work() -> None:
    load = LoopLoad()

    async def main() -> tuple[int, int]:
        await asyncio.sleep(0.02)  # the loop waits in select
        waited = load.waited_ns()
        x = 0
        for i in range(200_000):  # work on the loop, no select in between
            x += i
        assert x > 0
        return waited, load.waited_ns()

    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(load.selector())) as r:
        waited, after = r.run(main())
    assert waited > 0
    assert after == waited


def test_the_queue_paces_while_the_loop_hardly_waits_though_every_round_is_short() -> None:
    ns = [0]
    saturated = [False]
    q: LeaseQueue[str] = LeaseQueue(
        FakeClock(),
        lambda e: None,
        pace_us=lambda: 1_000_000,
        round_clock_ns=lambda: ns[0],
        loop_saturated=lambda: saturated[0],
    )

    async def main() -> None:
        q.start(asyncio.get_running_loop())
        q.submit("a", lambda w: "x", lambda r: None, first=False)
        await asyncio.sleep(0)  # a short round, the loop not saturated: no pacing
        assert not q.saturated and q.take_now("a", False)
        saturated[0] = True
        q.submit("b", lambda w: "x", lambda r: None, first=False)
        await asyncio.sleep(0)  # a short round again, but the loop no longer waits
        assert q.saturated and not q.take_now("a", False)
        saturated[0] = False
        ns[0] += BUSY_HOLD_US * 1000
        assert not q.saturated  # held on for BUSY_HOLD_US only

    asyncio.run(main())
