"""The reconnect backoff policy: bounds, jitter ranges, growth, reset and the
gRPC channel options that keep gRPC's own backoff under the cap, with a seeded Random."""

from __future__ import annotations

import random

import pytest

from obcommon.backoff import (
    DEFAULT_BASE_US,
    DEFAULT_CAP_US,
    Backoff,
    BackoffPolicy,
    grpc_channel_options,
)


def test_defaults_are_100ms_base_and_2s_cap() -> None:
    p = BackoffPolicy()
    assert (p.base_us, p.cap_us, p.jitter) == (100_000, 2_000_000, "full")
    assert (p.base_us, p.cap_us) == (DEFAULT_BASE_US, DEFAULT_CAP_US)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_us": 0},
        {"base_us": -1},
        {"base_us": 200, "cap_us": 100},
        {"multiplier": 0.5},
        {"jitter": "none"},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


def test_full_jitter_window_doubles_up_to_the_cap() -> None:
    p = BackoffPolicy(base_us=100, cap_us=1000, multiplier=2.0)
    assert [p.window_us(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert p.window_us(10_000) == 1000  # a long outage does not overflow
    with pytest.raises(ValueError):
        p.window_us(-1)


def test_full_jitter_draws_within_the_window_and_covers_it() -> None:
    p = BackoffPolicy(base_us=100_000, cap_us=2_000_000)
    draws: dict[int, list[int]] = {n: [] for n in range(8)}
    for seed in range(300):
        b = Backoff(p, random.Random(seed))
        for n in range(8):
            draws[n].append(b.next_delay_us())
    for n, ds in draws.items():
        w = p.window_us(n)
        assert all(0 <= d <= w for d in ds)
        # Spread over the whole window, not bunched at its end (the point of full jitter).
        assert min(ds) < 0.1 * w and max(ds) > 0.9 * w
    assert max(max(ds) for ds in draws.values()) <= p.cap_us


def test_decorrelated_jitter_stays_between_base_and_cap() -> None:
    p = BackoffPolicy(base_us=100_000, cap_us=2_000_000, jitter="decorrelated")
    b = Backoff(p, random.Random(7))
    first = b.next_delay_us()
    assert 0 <= first <= p.base_us
    prev = first
    for _ in range(50):
        d = b.next_delay_us()
        assert p.base_us <= d <= min(p.cap_us, max(p.base_us, 3 * prev))
        prev = d


def test_same_seed_same_sequence() -> None:
    p = BackoffPolicy()
    a = Backoff(p, random.Random(42))
    b = Backoff(p, random.Random(42))
    assert [a.next_delay_us() for _ in range(10)] == [b.next_delay_us() for _ in range(10)]


def test_reset_starts_again_from_the_base_window() -> None:
    p = BackoffPolicy(base_us=100, cap_us=10_000)
    b = Backoff(p, random.Random(1))
    for _ in range(10):
        b.next_delay_us()
    assert b.failures == 10
    b.reset()
    assert b.failures == 0
    assert all(Backoff(p, random.Random(s)).next_delay_us() <= 100 for s in range(50))
    assert b.next_delay_us() <= 100


def test_first_delay_after_a_break_is_a_fraction_of_the_base_then_grows() -> None:
    p = BackoffPolicy(base_us=100_000, cap_us=2_000_000)
    firsts = []
    for seed in range(200):
        b = Backoff(p, random.Random(seed))
        for _ in range(5):
            b.next_delay_us()  # an earlier outage, then a success...
        firsts.append(b.first_delay_us())  # ...and the stream breaks again
        assert b.failures == 1
        assert b.next_delay_us() <= p.window_us(1)
    assert all(0 <= d <= p.base_us for d in firsts)
    # A storm is spread over the base window, not all at 0 or all at the base.
    assert len(set(firsts)) > 150 and min(firsts) < 10_000 and max(firsts) > 90_000


def test_grpc_options_keep_its_hidden_backoff_within_the_cap() -> None:
    opts = dict(grpc_channel_options(BackoffPolicy(base_us=100_000, cap_us=2_000_000)))
    assert opts["grpc.initial_reconnect_backoff_ms"] == 100
    # Not set: C-core takes it as the minimum connect (handshake) timeout as well.
    assert "grpc.min_reconnect_backoff_ms" not in opts
    assert opts["grpc.max_reconnect_backoff_ms"] == 2000
    assert opts["grpc.enable_retries"] == 0
    assert opts["grpc.use_local_subchannel_pool"] == 1
    # Sub-millisecond policies still give gRPC valid (>= 1 ms) values.
    tiny = dict(grpc_channel_options(BackoffPolicy(base_us=10, cap_us=20)))
    assert tiny["grpc.initial_reconnect_backoff_ms"] == 1
    assert tiny["grpc.max_reconnect_backoff_ms"] == 1
