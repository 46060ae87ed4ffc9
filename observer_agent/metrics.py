"""The agent's Prometheus collectors, served at the agent's ``/metrics``.

An agent handles one lease renewal every ``heartbeat_interval`` (2 s) and a disk probe every
few seconds, so its timings are prometheus_client ``Histogram`` objects observed per event;
everything else is read from the agent's components at scrape time by :class:`AgentCollector`
(the custom-collector pattern of prometheus_client's ``registry.Collector``).

Names follow Prometheus' naming conventions: prefix ``ob_agent_``, base units (seconds,
bytes), ``_total`` for counters. Copy throughput is not a gauge of its own: it is
``rate(ob_agent_copied_bytes_total[1m])`` (bytes/s), which Prometheus computes exactly from
the counter while a gauge sampled every scrape would miss what happens between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Bucket upper bounds (seconds) of the lease renewal round trip and the disk probe: 1 ms
#: to 10 s (a renewal slower than the RPC timeout is already a failure).
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AgentMetrics:
    """The collectors of one agent process, in their own ``registry`` (not the global one,
    so that tests running several agents in one process keep them apart).

    ``lease_renewal_seconds``: round trip of one lease request on the stream (answered,
    accepted or refused); ``disk_probe_seconds``: one data-disk probe (a hung probe is
    observed at its timeout). prometheus_client's process and platform collectors are
    registered too."""

    def __init__(self) -> None:
        """The event histograms and the process collectors, on a new registry."""
        self.registry = CollectorRegistry()
        self.lease_renewal_seconds = Histogram(
            "ob_agent_lease_renewal_seconds",
            "Round trip of one lease renewal (request to answer) with the RS.",
            buckets=BUCKETS_S,
            registry=self.registry,
        )
        self.disk_probe_seconds = Histogram(
            "ob_agent_disk_probe_seconds",
            "Duration of one data-disk probe (a probe past its timeout counts the timeout).",
            buckets=BUCKETS_S,
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)


@dataclass
class AgentReadings:
    """What the agent reads of its components at a scrape. Times in microseconds since the
    epoch (``now_us``, ``lease_expire_us``: 0 = never had a lease); sizes in bytes;
    ``lease_refused``: reason -> count; ``replicas``: role -> count; ``log_lags``:
    ``(tenant_id, ls_id, entries)``; ``resources``: the ``ResourceInfo`` fields by name;
    ``copy_rate_limit``: the copy bandwidth limit in bytes per second (0 = unlimited) and
    ``copy_throttled_s`` the seconds copies waited for it."""

    now_us: int
    lease_expire_us: int
    registered: bool
    lease_accepted: int
    lease_refused: dict[str, int]
    replicas: dict[str, int]
    log_lags: list[tuple[int, int, int]]
    copied_bytes: int
    copies_running: int
    disk_healthy: bool
    copy_rate_limit: int = 0
    copy_throttled_s: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)


class AgentSource(Protocol):
    """Gathers the :class:`AgentReadings` (satisfied by :class:`observer_agent.agent.Agent`)."""

    def readings(self) -> AgentReadings:
        """The current readings, from memory only."""
        ...


#: ``ResourceInfo`` fields exported: field -> (family, ``kind`` label); values as reported
#: (cores, bytes).
RESOURCES: dict[str, tuple[str, str]] = {
    "cpu_total": ("ob_agent_cpu_cores", "total"),
    "cpu_assigned": ("ob_agent_cpu_cores", "assigned"),
    "mem_total": ("ob_agent_memory_bytes", "total"),
    "mem_assigned": ("ob_agent_memory_bytes", "assigned"),
    "mem_in_use": ("ob_agent_memory_bytes", "in_use"),
    "log_disk_total": ("ob_agent_log_disk_bytes", "total"),
    "log_disk_assigned": ("ob_agent_log_disk_bytes", "assigned"),
    "log_disk_in_use": ("ob_agent_log_disk_bytes", "in_use"),
    "data_disk_total": ("ob_agent_data_disk_bytes", "total"),
    "data_disk_assigned": ("ob_agent_data_disk_bytes", "assigned"),
    "data_disk_in_use": ("ob_agent_data_disk_bytes", "in_use"),
}
_RESOURCE_HELP = {
    "ob_agent_cpu_cores": "CPU cores reported to the RS, by kind (total, assigned to units).",
    "ob_agent_memory_bytes": "Memory reported to the RS, by kind (total, assigned, in_use).",
    "ob_agent_log_disk_bytes": "Log disk reported to the RS, by kind (total, assigned, in_use).",
    "ob_agent_data_disk_bytes": "Data disk reported to the RS, by kind (total, assigned, in_use).",
}


class AgentCollector(Collector):
    """The agent's families built at each scrape from ``source.readings()``:
    margin to lease expiry, registered, renewals accepted and refused by ``reason``, replicas
    by ``role``, log lag by LS, bytes copied, copies running, the copy bandwidth limit and
    the time copies waited for it, disk healthy, and the
    resources the agent reports to the RS. Register it on :attr:`AgentMetrics.registry`."""

    def __init__(self, source: AgentSource) -> None:
        """Collect ``source``'s readings at every scrape."""
        self.source = source

    def collect(self) -> Iterator[Metric]:
        """Yield every family (see the class doc)."""
        r = self.source.readings()
        margin = GaugeMetricFamily(
            "ob_agent_lease_margin_seconds",
            "Time left before this server's lease expires (negative: expired); absent "
            "before the first lease.",
        )
        if r.lease_expire_us:
            margin.add_metric([], (r.lease_expire_us - r.now_us) / 1e6)
        yield margin
        yield GaugeMetricFamily(
            "ob_agent_registered", "1 while the last lease renewal was accepted.", int(r.registered)
        )
        yield CounterMetricFamily(
            "ob_agent_lease_renewals_accepted",
            "Lease renewals the RS granted and this agent accepted.",
            value=r.lease_accepted,
        )
        refused = CounterMetricFamily(
            "ob_agent_lease_renewals_refused",
            "Lease renewals refused (the RS's error name, or why this agent refused the "
            "answer, or rpc_failed when no answer came), by reason.",
            labels=["reason"],
        )
        for reason, n in sorted(r.lease_refused.items()):
            refused.add_metric([reason], n)
        yield refused
        roles = GaugeMetricFamily("ob_agent_replicas", "Hosted replicas by role.", labels=["role"])
        for role, n in sorted(r.replicas.items()):
            roles.add_metric([role], n)
        yield roles
        lag = GaugeMetricFamily(
            "ob_agent_log_lag_entries",
            "Log entries a replica is behind its leader, by LS.",
            labels=["tenant_id", "ls_id"],
        )
        for tenant_id, ls_id, entries in r.log_lags:
            lag.add_metric([str(tenant_id), str(ls_id)], entries)
        yield lag
        yield CounterMetricFamily(
            "ob_agent_copied_bytes",
            "Bytes received by replica copies (throughput: rate() of this counter).",
            value=r.copied_bytes,
        )
        yield GaugeMetricFamily(
            "ob_agent_copies_running", "Replica copies receiving data now.", r.copies_running
        )
        yield GaugeMetricFamily(
            "ob_agent_copy_rate_limit_bytes_per_second",
            "Bytes per second all replica copies to this server may receive together "
            "(the RS's migration_max_bytes_per_second); 0 = unlimited.",
            r.copy_rate_limit,
        )
        yield CounterMetricFamily(
            "ob_agent_copy_throttled_seconds",
            "Seconds replica copies waited for the copy bandwidth limit.",
            value=r.copy_throttled_s,
        )
        yield GaugeMetricFamily(
            "ob_agent_disk_healthy",
            "1 while the last data-disk probe succeeded, 0 while DATA_DISK_ERROR is reported.",
            int(r.disk_healthy),
        )
        families: dict[str, GaugeMetricFamily] = {}
        for name, (family, kind) in RESOURCES.items():
            fam = families.get(family)
            if fam is None:
                fam = families[family] = GaugeMetricFamily(
                    family, _RESOURCE_HELP[family], labels=["kind"]
                )
            fam.add_metric([kind], r.resources.get(name, 0.0))
        yield from families.values()
