"""Reconnect backoff with jitter: how long a client waits before its next attempt to reach a
server that is away ("agents back off with jitter").

Why not gRPC's own: its connection backoff (initial 1 s, multiplier 1.6, cap 120 s, jitter
0.2; gRPC's ``doc/connection-backoff.md``) lives in a subchannel that new channels to the same
address share, so after an RS had been away 80 s an agent waited up to 12 s more for a
backoff timer armed while the RS was down. Its jitter (+-20 %) also leaves 10,000 agents
reconnecting within a fraction of a second of each other after an RS restart. The agent
therefore keeps gRPC's hidden backoff at or below our cap (:func:`grpc_channel_options`)
and waits itself, as computed here.

The policy is AWS's "Exponential Backoff And Jitter" (Marc Brooker, 2015), which gRPC and
CockroachDB (``util/retry``) also follow:

- ``full`` jitter: the ``n``-th wait (``n`` = 0, 1, ...) is uniform in
  ``[0, min(cap, base * multiplier**n)]``;
- ``decorrelated`` jitter: the next wait is uniform in ``[base, min(cap, 3 * previous)]``
  (the first one uniform in ``[0, base]``).

Both spread a storm over the whole window instead of bunching it at its end, and both reset
to the first attempt after a success. The first wait after a connection breaks is a random
fraction of ``base`` (:meth:`Backoff.first_delay_us`), so clients that lost the same server
at the same instant do not all knock at once. Everything is pure: the randomness comes from
an injected ``random.Random`` (seed it in tests), times are integer microseconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

Jitter = Literal["full", "decorrelated"]

#: Defaults for an agent's lease stream: 100 ms base, 2 s cap. The cap is a fraction of the
#: lease (OceanBase's ``lease_time`` default 10 s): an RS restart costs an agent at most about
#: one cap of lease after the RS is back, never a gRPC-style 120 s.
DEFAULT_BASE_US = 100_000
DEFAULT_CAP_US = 2_000_000
DEFAULT_MULTIPLIER = 2.0


@dataclass(frozen=True)
class BackoffPolicy:
    """The shape of a backoff: ``base_us`` (> 0, microseconds) the first window, ``cap_us``
    (>= ``base_us``) the largest wait, ``multiplier`` (>= 1) the growth per failed attempt of
    ``full`` jitter, ``jitter`` ``"full"`` or ``"decorrelated"``.

    Raises ``ValueError`` on construction when a bound is out of range.
    """

    base_us: int = DEFAULT_BASE_US
    cap_us: int = DEFAULT_CAP_US
    multiplier: float = DEFAULT_MULTIPLIER
    jitter: Jitter = "full"

    def __post_init__(self) -> None:
        if self.base_us <= 0:
            raise ValueError(f"backoff base must be > 0 us, got {self.base_us}")
        if self.cap_us < self.base_us:
            raise ValueError(f"backoff cap {self.cap_us} us is below its base {self.base_us} us")
        if self.multiplier < 1.0:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier}")
        if self.jitter not in ("full", "decorrelated"):
            raise ValueError(f"unknown backoff jitter {self.jitter!r}")

    def window_us(self, attempt: int) -> int:
        """Upper bound, in microseconds, of the wait before retry number ``attempt`` (0 =
        the first retry) under ``full`` jitter: ``min(cap, base * multiplier**attempt)``."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        # Exponent bounded so that a long outage cannot overflow a float.
        grown = self.base_us * self.multiplier ** min(attempt, 64)
        return int(min(float(self.cap_us), grown))


class Backoff:
    """The backoff state of one client (one agent's lease stream, one load-generator
    connection): how many attempts failed in a row and the last wait.

    ``policy`` gives the shape, ``rng`` the randomness (a seeded ``random.Random`` makes the
    sequence reproducible). Not thread-safe: one per client.
    """

    def __init__(self, policy: BackoffPolicy, rng: random.Random) -> None:
        """No failure yet."""
        self.policy = policy
        self._rng = rng
        self.failures = 0
        self._last_us = 0

    def first_delay_us(self) -> int:
        """The wait before the first reconnect after a working connection broke: uniform in
        ``[0, base]`` microseconds. Resets the state (the connection did work) and counts as
        that first attempt, so a following failure grows the window from ``base``."""
        self.reset()
        delay = self._rng.randint(0, self.policy.base_us)
        self.failures = 1
        self._last_us = delay
        return delay

    def next_delay_us(self) -> int:
        """The wait, in microseconds, before the next attempt after one more failure; within
        ``[0, cap]`` always (see the module docstring for each jitter's range)."""
        p = self.policy
        if p.jitter == "full":
            delay = self._rng.randint(0, p.window_us(self.failures))
        elif self.failures == 0:
            delay = self._rng.randint(0, p.base_us)
        else:
            upper = min(p.cap_us, max(p.base_us, 3 * self._last_us))
            delay = self._rng.randint(p.base_us, upper)
        self.failures += 1
        self._last_us = delay
        return delay

    def reset(self) -> None:
        """A success: the next failure starts again from the first window."""
        self.failures = 0
        self._last_us = 0


def grpc_channel_options(policy: BackoffPolicy) -> list[tuple[str, Any]]:
    """gRPC channel options that keep gRPC's own connection backoff within ``policy``: its
    first reconnect wait at ``base`` and its cap at ``cap`` (C-core channel arguments
    ``grpc.initial_reconnect_backoff_ms``, ``grpc.max_reconnect_backoff_ms``), transparent
    retries off (``grpc.enable_retries`` 0: a retry would hide a failed attempt from our
    backoff), and a subchannel pool of the channel's own (``grpc.use_local_subchannel_pool``)
    so a new channel never inherits a backoff timer armed for an earlier one. Shape: a list
    of ``(name, value)``.

    ``grpc.min_reconnect_backoff_ms`` is deliberately left at gRPC's default (20 s): C-core
    also uses it as the minimum time a connection attempt (TCP and TLS handshake) may take,
    and setting it to ``base`` aborted handshakes after ~100 ms on a busy RS, so every agent
    started over and the restart storm fed itself (measured: p50 9.4 s instead of 2 s to come
    back; the same trap as grpc/grpc#12830 and grpc/grpc#33423). The caller's own RPC deadline
    bounds an attempt instead."""
    base_ms = max(1, policy.base_us // 1000)
    cap_ms = max(base_ms, policy.cap_us // 1000)
    return [
        ("grpc.initial_reconnect_backoff_ms", base_ms),
        ("grpc.max_reconnect_backoff_ms", cap_ms),
        ("grpc.enable_retries", 0),
        ("grpc.use_local_subchannel_pool", 1),
    ]
