"""In-process counters and latency windows of the RS, exported as JSON by the admin RPC
``GetMetrics`` (read by ``make bench``). Recording costs one lock and a deque append."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry


class LatencyWindow:
    """The last ``size`` samples (microseconds) with nearest-rank percentiles."""

    def __init__(self, size: int = 4096) -> None:
        """Keep at most ``size`` most recent samples for the percentiles."""
        self._samples: deque[int] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.count = 0
        self.max_us = 0

    def record(self, us: int) -> None:
        """Add one latency sample of ``us`` microseconds; updates the lifetime count and max.

        Lock-free because it runs once per heartbeat: ``deque.append`` is atomic in CPython,
        and ``count`` / ``max_us`` may at worst miss an update when two threads record at
        the same instant (each window has one writer thread in practice)."""
        self._samples.append(us)
        self.count += 1
        if us > self.max_us:
            self.max_us = us

    def summary(self) -> dict[str, int]:
        """``{"count", "p50", "p99", "max"}`` over the window (max over the whole life)."""
        with self._lock:
            data = sorted(list(self._samples))
            count, mx = self.count, self.max_us

        def pct(p: float) -> int:
            if not data:
                return 0
            return data[min(len(data) - 1, max(0, int(round(p * len(data) + 0.5)) - 1))]

        return {"count": count, "p50": pct(0.50), "p99": pct(0.99), "max": mx}


class Metrics:
    """Named counters and latency windows."""

    def __init__(self) -> None:
        """Start with no counters and no windows."""
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()
        self.windows: dict[str, LatencyWindow] = {}
        # The Prometheus collectors of this process (issue 12), served at /metrics.
        self.registry = CollectorRegistry()

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``, creating it at 0 first if needed."""
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def window(self, name: str) -> LatencyWindow:
        """The latency window called ``name``, created (4096 samples) on first use."""
        w = self.windows.get(name)
        if w is None:
            w = self.windows.setdefault(name, LatencyWindow())
        return w

    def get(self, name: str) -> int:
        """Current value of counter ``name``; 0 if it was never incremented."""
        with self._lock:
            return self._counters.get(name, 0)

    def snapshot(self) -> dict[str, Any]:
        """All counters (name -> int) and windows (name -> :meth:`LatencyWindow.summary` dict)
        in one JSON-ready dict; a window shadows a counter of the same name."""
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
        for name, w in list(self.windows.items()):
            out[name] = w.summary()
        return out


def track_gc_pauses(metrics: Metrics) -> None:
    """Record every garbage-collector run's duration in ``gc_pause_us.gen<N>`` windows: a full
    collection stops every thread, the heartbeat path included."""
    import gc
    import time

    started: list[int] = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter_ns()
        else:
            metrics.window(f"gc_pause_us.gen{info['generation']}").record(
                (time.perf_counter_ns() - started[0]) // 1000
            )

    gc.callbacks.append(callback)
