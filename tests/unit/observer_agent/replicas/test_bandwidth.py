"""The copy bandwidth limit (observer_agent.replicas.bandwidth) on a fake
monotonic clock: the bytes let through never exceed ``burst + rate * elapsed`` however many
copies share the bucket, 0 never waits, a rate change takes effect for copies already
waiting, and a cancelled wait gives its bytes back."""

from __future__ import annotations

import asyncio

import pytest

from observer_agent.replicas.bandwidth import BURST_S, MAX_SLICE_S, CopyBandwidth

KIB = 1024


class FakeTime:
    """A monotonic clock (seconds) that moves only when a copy sleeps on it."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)


def simulate(
    bucket: CopyBandwidth,
    clock: FakeTime,
    copies: int,
    chunks: int,
    chunk: int,
    rate_at: dict[int, int] | None = None,
) -> list[tuple[float, int]]:
    """``copies`` copies each passing ``chunks`` chunks of ``chunk`` bytes through ``bucket``
    (a discrete-event run of reserve / wait_s: the copy due first acts first). ``rate_at``
    maps a number of chunks passed to a new rate set at that moment. Returns ``(time,
    bytes)`` of every chunk let through, in order."""
    rate_at = dict(rate_at or {})
    tickets = [bucket.reserve(chunk) for _ in range(copies)]
    due = [clock.t + bucket.wait_s(t) for t in tickets]
    left = [chunks] * copies
    passed: list[tuple[float, int]] = []
    while any(left):
        i = min((k for k in range(copies) if left[k]), key=lambda k: due[k])
        clock.t = max(clock.t, due[i])
        w = bucket.wait_s(tickets[i])
        if w > 0:  # the rate went down meanwhile
            due[i] = clock.t + w
            continue
        passed.append((clock.t, chunk))
        if len(passed) in rate_at:
            bucket.set_rate(rate_at.pop(len(passed)))
            due = [clock.t + bucket.wait_s(t) for t in tickets]
        left[i] -= 1
        if left[i]:
            tickets[i] = bucket.reserve(chunk)
            due[i] = clock.t + bucket.wait_s(tickets[i])
    return passed


def assert_within_rate(passed: list[tuple[float, int]], rate: int, burst: float) -> None:
    """Between any two moments, no more than ``burst + rate * elapsed`` bytes went through."""
    for a in range(len(passed)):
        total = 0
        for b in range(a, len(passed)):
            total += passed[b][1]
            elapsed = passed[b][0] - passed[a][0]
            assert total <= burst + rate * elapsed + 1e-6 + passed[a][1], (a, b, total, elapsed)


@pytest.mark.parametrize(("copies", "chunk"), [(1, 16 * KIB), (3, 16 * KIB), (4, 100 * KIB)])
def test_never_more_than_rate_times_elapsed_plus_burst(copies: int, chunk: int) -> None:
    """Three copies sharing the bucket get the rate together, not each; chunks larger than
    the burst (100K at 512K/s: burst 51.2K) only wait longer."""
    clock = FakeTime()
    bucket = CopyBandwidth(clock.now, clock.sleep)
    rate = 512 * KIB
    bucket.set_rate(rate)
    start = clock.t
    passed = simulate(bucket, clock, copies, 20, chunk)
    # The bound counted from the start (the bucket starts with one burst) ...
    sent = sum(n for _, n in passed)
    assert sent == copies * 20 * chunk
    elapsed = passed[-1][0] - start
    assert sent <= bucket.burst + rate * elapsed + 1e-6
    # ... and in every window (the chunk that opens a window is already counted in it)
    assert_within_rate(passed, rate, bucket.burst)
    # and the bucket does not throttle below the rate: done as soon as the bound allows.
    assert elapsed == pytest.approx((sent - bucket.burst) / rate, abs=1e-6)


def test_zero_is_unlimited_and_never_waits() -> None:
    clock = FakeTime()
    bucket = CopyBandwidth(clock.now, clock.sleep)
    assert bucket.rate == 0 and bucket.burst == 0
    assert bucket.wait_s(bucket.reserve(1 << 40)) == 0

    async def copy() -> None:
        for _ in range(100):
            await bucket.take(4 << 20)

    asyncio.run(copy())
    assert clock.sleeps == [] and bucket.throttled_s == 0
    # a limit lifted again: back to no wait, even right after a large debt
    bucket.set_rate(KIB)
    ticket = bucket.reserve(1 << 20)
    assert bucket.wait_s(ticket) > 1000
    assert bucket.set_rate(0) and not bucket.set_rate(0)
    assert bucket.wait_s(ticket) == 0


def test_a_rate_change_applies_to_copies_already_waiting() -> None:
    """Slow (64K/s) for the first 10 chunks, then 1M/s: the later chunks go 16 times faster;
    slowed down again to 32K/s, a copy waiting on the 1M/s ticket waits longer."""
    clock = FakeTime()
    bucket = CopyBandwidth(clock.now, clock.sleep)
    bucket.set_rate(64 * KIB)
    passed = simulate(bucket, clock, 2, 15, 16 * KIB, rate_at={10: 1024 * KIB})
    slow = passed[9][0] - passed[2][0]  # 7 chunks at 64K/s
    fast = passed[29][0] - passed[22][0]  # 7 chunks at 1M/s
    assert slow == pytest.approx(7 * 16 / 64, abs=1e-6)
    assert fast == pytest.approx(7 * 16 / 1024, abs=1e-6)

    ticket = bucket.reserve(512 * KIB)
    at_fast = bucket.wait_s(ticket)
    bucket.set_rate(32 * KIB)
    assert bucket.wait_s(ticket) == pytest.approx(at_fast * 32, rel=1e-3)


def test_a_waiting_take_sees_a_raised_rate_within_a_slice() -> None:
    """A copy waiting for a 1 MiB chunk at 1 KiB/s (about 1000 s) goes on after one sleep
    slice once the limit is lifted (the lease response of the next heartbeat)."""
    clock = FakeTime()
    bucket = CopyBandwidth(clock.now, clock.sleep)
    bucket.set_rate(KIB)

    async def lifted_after_first_sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        bucket.set_rate(0)

    bucket._sleep = lifted_after_first_sleep  # the RS's change arriving meanwhile
    asyncio.run(bucket.take(1 << 20))
    assert clock.sleeps == [MAX_SLICE_S]
    assert bucket.throttled_s == pytest.approx(MAX_SLICE_S)


def test_take_waits_in_slices_and_a_cancelled_wait_gives_its_bytes_back() -> None:
    clock = FakeTime()
    bucket = CopyBandwidth(clock.now, clock.sleep)
    rate = 100 * KIB
    bucket.set_rate(rate)
    start = clock.t

    async def two_chunks() -> None:
        await bucket.take(50 * KIB)
        await bucket.take(50 * KIB)

    asyncio.run(two_chunks())
    # 100K at 100K/s with a 10K burst: 0.9 s, in slices of at most MAX_SLICE_S
    assert clock.t - start == pytest.approx((100 - 100 * BURST_S) * KIB / rate)
    assert max(clock.sleeps) <= MAX_SLICE_S

    async def cancelled() -> None:
        task = asyncio.create_task(bucket.take(1 << 20))  # about 10 s at 100K/s
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    # the next chunk is not held up by the megabyte that was never received
    assert bucket.wait_s(bucket.reserve(KIB)) < 0.02
