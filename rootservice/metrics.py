"""The RS's counters and latency windows, and their Prometheus exposition.

Code on the hot paths records into plain Python structures (:class:`Metrics` counters, a
:class:`LatencyWindow` per timed thing: one deque append and one bucket increment, no lock);
nothing is converted to Prometheus objects until a scrape, when :class:`RsCollector` reads
them, plus the :class:`Readings` the RS gathers on demand (server counts, queue depth, term),
and yields metric families (the custom-collector pattern of prometheus_client's
``registry.Collector``). The same structures feed the admin RPC ``GetMetrics`` as JSON
(:meth:`Metrics.snapshot`, read by ``make bench`` and obadmin).

Names follow Prometheus' naming conventions: prefix ``ob_rs_``, base units (seconds, bytes,
ratios), ``_total`` for counters, and only low-cardinality labels (never one per server: a
cluster has up to 10,000; per job is fine, few run at once, and a finished job's series
disappear because the collector only yields the jobs in progress).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from rootservice.metric_names import ALWAYS, COUNTERS, HISTOGRAMS, LABELLED, PATTERNS

#: Upper bounds (microseconds) of the histogram buckets of every latency window: 50 us to
#: 10 s, roughly 1-2.5-5 per decade (Prometheus' default buckets extended down to the
#: heartbeat path's tens of microseconds and up to a Spark balancer round).
BUCKETS_US: tuple[int, ...] = (
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
)
_LE = tuple(floatToGoString(b / 1e6) for b in BUCKETS_US) + ("+Inf",)


class LatencyWindow:
    """The last ``size`` samples (microseconds) with nearest-rank percentiles, and a
    histogram of every sample over the whole life (:data:`BUCKETS_US`)."""

    def __init__(self, size: int = 4096) -> None:
        """Keep at most ``size`` most recent samples for the percentiles."""
        self._samples: deque[int] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.count = 0
        self.max_us = 0
        self.sum_us = 0
        # buckets[i]: samples in (BUCKETS_US[i-1], BUCKETS_US[i]]; the last one is +Inf.
        self._buckets = [0] * (len(BUCKETS_US) + 1)

    def record(self, us: int) -> None:
        """Add one latency sample of ``us`` microseconds; updates the lifetime count, sum,
        max and histogram.

        Lock-free because it runs once per heartbeat (measured with timeit: 0.43 us per call
        with the histogram against 0.17 us without; prometheus_client's ``Histogram.observe``
        takes 1.9 us): ``deque.append`` is atomic in CPython, and the counts may at worst
        miss an update when two threads record at the same instant (each window has one
        writer thread in practice)."""
        self._samples.append(us)
        self.count += 1
        self.sum_us += us
        self._buckets[bisect.bisect_left(BUCKETS_US, us)] += 1
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

    def buckets(self) -> tuple[list[tuple[str, float]], float]:
        """The Prometheus histogram of every sample: cumulative ``(le, count)`` pairs, ``le``
        in seconds as Prometheus writes it, ending with ``+Inf``; and the sum in seconds."""
        raw = list(self._buckets)
        total = self.sum_us
        out: list[tuple[str, float]] = []
        acc = 0
        for le, n in zip(_LE, raw, strict=True):
            acc += n
            out.append((le, float(acc)))
        return out, total / 1e6


class Metrics:
    """Named counters (plain and labelled) and latency windows of one RS.

    ``registry`` is the process's Prometheus ``CollectorRegistry`` (not the global one, so
    that tests running several RSs in one process keep them apart), served at ``/metrics``.
    """

    def __init__(self) -> None:
        """Start with no counters and no windows."""
        self._counters: dict[str, int] = {}
        self._labelled: dict[str, dict[tuple[str, ...], int]] = {}
        self._lock = threading.Lock()
        self.windows: dict[str, LatencyWindow] = {}
        # The Prometheus collectors of this process, served at /metrics.
        self.registry = CollectorRegistry()

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``, creating it at 0 first if needed."""
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def inc_labelled(self, name: str, labels: tuple[str, ...], n: int = 1) -> None:
        """Add ``n`` to the counter of family ``name`` with label values ``labels`` (the
        label names are the exposition's, see :data:`LABELLED`). Label values must come
        from a small set (statement kinds, error names), never from a server address."""
        with self._lock:
            family = self._labelled.setdefault(name, {})
            family[labels] = family.get(labels, 0) + n

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

    def counters(self) -> dict[str, int]:
        """A copy of the plain counters (name -> value)."""
        with self._lock:
            return dict(self._counters)

    def labelled(self, name: str) -> dict[tuple[str, ...], int]:
        """A copy of the labelled counter family ``name`` (label values -> value)."""
        with self._lock:
            return dict(self._labelled.get(name, {}))

    def snapshot(self) -> dict[str, Any]:
        """All counters (name -> int; a labelled one as ``name.value1.value2``) and windows
        (name -> :meth:`LatencyWindow.summary` dict) in one JSON-ready dict; a window
        shadows a counter of the same name."""
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
            for name, family in self._labelled.items():
                for labels, n in family.items():
                    out[".".join((name, *labels))] = n
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


# --- exposition --------------------------------------------------------------------------


@dataclass
class JobReading:
    """One job in progress as this RS tracks it (``progress`` 0-100, sizes in bytes)."""

    job_id: int
    job_type: str
    server: str
    progress: int
    bytes_copied: int
    bytes_total: int


@dataclass
class Readings:
    """What the RS reads of its components at a scrape (:class:`RsReadings`).

    ``servers_by_status`` / ``servers_by_heartbeat``: display status / heartbeat status ->
    number of servers; ``states``: every RS state name, ``state`` the current one;
    ``heartbeats_refused``: error name -> count; ``lease_time_us`` in microseconds;
    ``planner`` the balancer planner's name, ``planner_ready`` whether it can run."""

    heartbeats_received: int
    heartbeats_refused: dict[str, int]
    servers_by_status: dict[str, int]
    servers_by_heartbeat: dict[str, int]
    persist_queue_depth: int
    writes_rejected: int
    epoch: int
    leader: bool
    state: str
    states: list[str]
    lease_time_us: int
    jobs: list[JobReading] = field(default_factory=list)
    # The balancer_planner parameter and whether it can run (None before the
    # check).
    planner: str = ""
    planner_ready: bool | None = None
    # The lease allowance for the RS's own intake delay and whether the
    # RS suspects itself after a mass expiry.
    lease_allowance_us: int = 0
    self_suspect: bool = False
    # Alive servers SUSPECT after their lease expired (no new leaders, no
    # copies).
    servers_suspect: int = 0
    # LAGGING servers (a command unapplied or a slow disk probe).
    servers_lagging: int = 0
    # The lease queue: the age of its oldest request, how many wait, and "behind".
    intake_lag_us: int = 0
    intake_waiting: int = 0
    intake_behind: bool = False
    # Renewals held by the lease queue's pacing: now, and since the start.
    intake_paced: int = 0
    intake_paced_total: int = 0
    # Whether the pacing is on, and the event loop's busy share over its last window
    # (-1.0 before the first).
    intake_saturated: bool = False
    loop_busy: float = -1.0
    # How much longer this RS trusts its own RS lease (0 when not the leader).
    rs_lease_trusted_us: int = 0


class RsReadings(Protocol):
    """Gathers the :class:`Readings` (satisfied by :class:`rootservice.app.RootService`)."""

    def readings(self) -> Readings:
        """The current readings; must not do I/O nor hold a lock the heartbeat path needs
        for more than a moment."""
        ...


class RsCollector(Collector):
    """The RS's metric families, built at each scrape from ``metrics`` (counters, windows)
    and ``source.readings()``. Register it on ``metrics.registry``.

    Families (Prometheus naming): heartbeats received and refused
    by ``reason``; servers by display ``status`` and by ``heartbeat_status``; the
    persistence-queue depth; writes rejected; term epoch; leader (1/0); RS ``state``
    (enum-style: 1 for the current state, 0 for the others); lease time; jobs in progress
    (progress ratio, bytes copied / total by ``job_id``, ``job_type``, ``server``); every
    counter of :class:`Metrics` (:data:`COUNTERS`, :data:`PATTERNS`, :data:`LABELLED`) and
    every latency window as a histogram (:data:`HISTOGRAMS`)."""

    def __init__(self, metrics: Metrics, source: RsReadings) -> None:
        """Collect ``metrics`` and ``source``'s readings at every scrape."""
        self.metrics = metrics
        self.source = source

    def collect(self) -> Iterator[Metric]:
        """Yield every family (see the class doc)."""
        r = self.source.readings()
        yield from self._readings(r)
        yield from self._counters()
        yield from self._histograms()

    def _readings(self, r: Readings) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "ob_rs_heartbeats_received",
            "Lease requests (heartbeats) handled, accepted or refused.",
            value=r.heartbeats_received,
        )
        refused = CounterMetricFamily(
            "ob_rs_heartbeats_refused",
            "Lease requests refused, by reason (the OceanBase error name).",
            labels=["reason"],
        )
        for reason, n in sorted(r.heartbeats_refused.items()):
            refused.add_metric([reason], n)
        yield refused
        yield _gauges(
            "ob_rs_servers", "Whitelisted servers by display status.", "status", r.servers_by_status
        )
        yield _gauges(
            "ob_rs_servers_by_heartbeat",
            "Whitelisted servers by heartbeat status.",
            "heartbeat_status",
            r.servers_by_heartbeat,
        )
        yield GaugeMetricFamily(
            "ob_rs_persist_queue_depth",
            "Stale __all_server rows plus events waiting in the persistence queue.",
            value=r.persist_queue_depth,
        )
        yield CounterMetricFamily(
            "ob_rs_writes_rejected",
            "Fenced writes refused because the epoch moved on (each ends the term).",
            value=r.writes_rejected,
        )
        yield GaugeMetricFamily(
            "ob_rs_epoch", "The term's epoch (0 when not in office).", value=r.epoch
        )
        yield GaugeMetricFamily(
            "ob_rs_leader", "1 when this RS is the leader, else 0.", value=int(r.leader)
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_trusted_seconds",
            "How much longer this RS trusts its own RS lease without another good renewal "
            "(lease_time - lease_time/5 after the start of the last one; 0 when not the "
            "leader): failed renewals are retried until it reaches 0, and then it steps down.",
            value=r.rs_lease_trusted_us / 1e6,
        )
        yield _gauges(
            "ob_rs_state",
            "The RS state: 1 for the current one, 0 for the others.",
            "state",
            {s: int(s == r.state) for s in r.states},
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_time_seconds",
            "The agents' lease time (parameter lease_time).",
            value=r.lease_time_us / 1e6,
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_allowance_seconds",
            "Extra time granted before a lease expires for this RS's own intake delay "
            "(checker lateness, event-loop lag, heartbeat rate deficit), capped at lease_time.",
            value=r.lease_allowance_us / 1e6,
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_intake_lag_seconds",
            "How long the oldest lease request waiting in this RS's own queue has waited.",
            value=r.intake_lag_us / 1e6,
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_intake_waiting",
            "Lease requests waiting in this RS's own queue.",
            value=r.intake_waiting,
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_intake_behind",
            "1 while the lease intake lag is at least 1 s (until it is back under 0.25 s).",
            value=int(r.intake_behind),
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_intake_held",
            "Lease renewals held by this RS's pacing now (a server renewing sooner than "
            "lease_time / 10 after its previous answer waits until then).",
            value=r.intake_paced,
        )
        yield CounterMetricFamily(
            "ob_rs_lease_intake_paced",
            "Lease renewals held by this RS's pacing.",
            value=r.intake_paced_total,
        )
        yield GaugeMetricFamily(
            "ob_rs_lease_intake_saturated",
            "1 while the event loop of the lease streams counts as saturated (the pacing is "
            "on), else 0.",
            value=int(r.intake_saturated),
        )
        yield GaugeMetricFamily(
            "ob_rs_event_loop_busy_ratio",
            "Share of wall time the event loop of the lease streams did not wait for I/O, "
            "over its last window of at least 0.5 s (-1 before the first).",
            value=r.loop_busy,
        )
        yield GaugeMetricFamily(
            "ob_rs_self_suspect",
            "1 while this RS suspects itself after a mass lease expiry (permanent offline "
            "held), else 0.",
            value=int(r.self_suspect),
        )
        yield GaugeMetricFamily(
            "ob_rs_servers_suspect",
            "Alive servers SUSPECT after their lease expired: no new leaders and no copies "
            "until __all_server.suspect_end_time.",
            value=r.servers_suspect,
        )
        yield GaugeMetricFamily(
            "ob_rs_servers_lagging",
            "Servers LAGGING: heartbeating while an RS command stays unapplied for "
            "agent_lag_timeout or the disk probe is slow (__all_server.lagging_time).",
            value=r.servers_lagging,
        )
        labels = ["job_id", "job_type", "server"]
        progress = GaugeMetricFamily(
            "ob_rs_job_progress_ratio", "Progress of a job in progress (0-1).", labels=labels
        )
        copied = GaugeMetricFamily(
            "ob_rs_job_copied_bytes", "Bytes copied so far by a job in progress.", labels=labels
        )
        total = GaugeMetricFamily(
            "ob_rs_job_size_bytes", "Bytes a job in progress has to copy in all.", labels=labels
        )
        for j in r.jobs:
            values = [str(j.job_id), j.job_type, j.server]
            progress.add_metric(values, j.progress / 100)
            copied.add_metric(values, j.bytes_copied)
            total.add_metric(values, j.bytes_total)
        yield from (progress, copied, total)
        if r.planner_ready is not None:
            yield _gauges(
                "ob_rs_planner_ready",
                "1 when the balancer planner (label: balancer_planner) can run, checked at "
                "start and when the parameter changes, else 0.",
                "planner",
                {r.planner: int(r.planner_ready)},
            )

    def _counters(self) -> Iterator[Metric]:
        counters = self.metrics.counters()
        for name in ALWAYS:
            counters.setdefault(name, 0)
        by_pattern: dict[str, CounterMetricFamily] = {}
        for _pattern, family, label, help_text in PATTERNS:
            by_pattern[family] = CounterMetricFamily(family, help_text, labels=[label])
        # Every task that ran has a failure series, at 0 until it fails.
        tasks = {
            n.removeprefix("task_run_us.") for n in self.metrics.windows if "task_run_us." in n
        }
        failures = {n: 0 for n in tasks}
        for name, value in sorted(counters.items()):
            for pattern, family, _label, _help in PATTERNS:
                m = pattern.fullmatch(name)
                if m is not None:
                    if family == "ob_rs_task_failures":
                        failures[m.group(1)] = value
                    else:
                        by_pattern[family].add_metric([m.group(1)], value)
                    break
            else:
                if name in COUNTERS:
                    entry = COUNTERS[name]
                    if entry is None:
                        continue
                    family, help_text = entry
                else:
                    family = "ob_rs_" + name.removeprefix("rs_").removesuffix("_total")
                    help_text = f"The RS counter {name} (GetMetrics)."
                yield CounterMetricFamily(family, help_text, value=value)
        for task, value in sorted(failures.items()):
            by_pattern["ob_rs_task_failures"].add_metric([task], value)
        yield from by_pattern.values()
        for name, (family, labels, help_text) in LABELLED.items():
            fam = CounterMetricFamily(family, help_text, labels=list(labels))
            for values, n in sorted(self.metrics.labelled(name).items()):
                fam.add_metric(list(values), n)
            yield fam

    def _histograms(self) -> Iterator[Metric]:
        windows = dict(self.metrics.windows)
        for key, (family, label, help_text) in HISTOGRAMS.items():
            fam = HistogramMetricFamily(family, help_text, labels=[label] if label else None)
            if not label and key not in windows:
                # An unlabelled histogram is there, empty, before its first sample.
                windows[key] = LatencyWindow(size=1)
            for name, w in sorted(windows.items()):
                if key.endswith((".", "gen")):
                    if not name.startswith(key):
                        continue
                    labels = [name.removeprefix(key)]
                elif name != key:
                    continue
                else:
                    labels = []
                buckets, total = w.buckets()
                fam.add_metric(labels, buckets, total)
            yield fam


def _gauges(name: str, help_text: str, label: str, values: dict[str, int]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, help_text, labels=[label])
    for k, v in sorted(values.items()):
        fam.add_metric([k], v)
    return fam


def register_process_collectors(registry: CollectorRegistry) -> None:
    """prometheus_client's process (CPU seconds, resident memory, open files: Linux /proc)
    and platform (Python version) collectors, on ``registry`` rather than the global one."""
    from prometheus_client import PlatformCollector, ProcessCollector

    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
