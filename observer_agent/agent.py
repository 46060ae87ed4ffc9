"""The observer agent: one data node's lease, identity, health and hosted replicas
(docs/design/leases.md and docs/design/migration.md), composed from the modules that own each concept:

- :mod:`observer_agent.lease` - the lease state and loop (:class:`LeaseClient`), over
  :mod:`observer_agent.lease_stream`, trying the RSs of :mod:`observer_agent.rs_list`;
- :mod:`observer_agent.disk` - the data-disk probe (:class:`DiskHealth`);
- :mod:`observer_agent.resources` - the resource sample (:class:`ResourceMonitor`);
- :mod:`observer_agent.replicas` - the LS replicas (:class:`ReplicaManager`): loaded from
  disk by the constructor, their leader / follower loops started by :meth:`Agent.run` and
  stopped when it returns, reported in every lease request;
- :mod:`observer_agent.identity` - the cluster identity file.

:class:`Agent` keeps the public surface the gRPC service, the CLI and the tests use
(``build_lease_request``, ``handle_response``, ``probe_disk_now`` ...) and :meth:`Agent.run`
runs the lease loop and the periodic resource refresh and disk probes. All times are integer
microseconds since the Unix epoch.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from obcommon.security.certs import Role
from obcommon.security.gate import PeerGate
from obcommon.security.tls import TransportSecurity
from observer_agent.address import AgentAddress
from observer_agent.agent_log import AgentLog
from observer_agent.background import is_set, sleep_unless_stopped
from observer_agent.disk import (
    DEFAULT_DISK_PROBE_TIMEOUT_US,
    DiskHealth,
    DiskProbe,
    probe_data_disk,
)
from observer_agent.fence import TokenKeeper
from observer_agent.identity import (
    ClusterIdentity,
    IdentityError,
    identity_path,
    load_identity,
)
from observer_agent.lease_loop import LeaseClient
from observer_agent.metrics import AgentCollector, AgentMetrics, AgentReadings
from observer_agent.replicas.bandwidth import CopyBandwidth
from observer_agent.replicas.log import LOG_KEEP_ENTRIES
from observer_agent.replicas.manager import ReplicaManager
from observer_agent.replicas.serving import DATA_CHUNK_DEFAULT
from observer_agent.resources import DEFAULT_RESOURCE_TIMEOUT_US, ResourceMonitor
from observer_agent.rs_list import RsAddresses
from observer_agent.runtime_parameters import RuntimeParameters
from observer_agent.settings import AgentSettings
from observer_agent.stopping_notice import say_stopping

#: Bound on stopping the background jobs, seconds.
_CLOSE_TIMEOUT_S = 1.0


class Agent:
    """One data node's agent: lease state, cluster identity, resources, disk health and the
    hosted replicas.

    ``settings`` gives the addresses and intervals; ``clock`` all the times (integer
    microseconds since the epoch). ``data_dir`` is created if needed and its identity file
    loaded (with the fencing token it keeps): raises
    :class:`observer_agent.identity.IdentityError` when either file is
    unreadable. ``rng`` drives the reconnect jitter; ``disk_probe`` is the blocking probe
    (defaults to :func:`observer_agent.disk.probe_data_disk`).

    Public state (read it, do not write it): ``identity``, ``highest_epoch``,
    ``lease_expire_time``, ``server_id``, ``rs_server_status``, ``start_service_time``,
    ``serving``, ``registered``, ``resource_info``, ``disk_error`` (reason or None),
    ``accepted_count``, ``refused_count``, ``last_accepted_rs``, ``last_refusal``,
    ``replicas`` (the hosted LS replicas); the parts themselves are ``lease``, ``disk``,
    ``resources`` and ``rs``.
    """

    def __init__(
        self,
        settings: AgentSettings,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        disk_probe: DiskProbe = probe_data_disk,
        disk_probe_timeout_us: int = DEFAULT_DISK_PROBE_TIMEOUT_US,
        resource_timeout_us: int = DEFAULT_RESOURCE_TIMEOUT_US,
        replica_log_keep: int = LOG_KEEP_ENTRIES,
        copy_chunk_size: int = DATA_CHUNK_DEFAULT,
        copy_bandwidth: CopyBandwidth | None = None,
    ) -> None:
        """Create ``settings.data_dir`` and load its identity; start unregistered and not
        serving.

        A kept identity written for another zone or address is only logged as a warning. The
        replicas kept under ``data_dir`` are loaded (not in service until :meth:`run` has
        verified their data files). ``disk_probe_timeout_us`` / ``resource_timeout_us``
        (microseconds) bound one data-disk probe and one resource sample;
        ``replica_log_keep`` is the log entries a replica keeps after compaction and
        ``copy_chunk_size`` the bytes per chunk a replica copy asks its source for,
        ``copy_bandwidth`` the copy limit (default: an unlimited one on the system's monotonic
        time; tests pass one on a fake time). Raises
        :class:`observer_agent.identity.IdentityError` when the identity file exists but
        cannot be read or parsed.
        """
        self.settings = settings
        self.clock = clock
        self.data_dir = Path(settings.data_dir)
        self.address = AgentAddress(settings)
        self.log = AgentLog(self.address)
        self.metrics = AgentMetrics()

        self.data_dir.mkdir(parents=True, exist_ok=True)
        identity: ClusterIdentity | None = load_identity(self.data_dir)
        if identity is not None and (
            identity.zone != settings.zone or identity.server != self.server
        ):
            self.log.warning(
                "identity %s was written for zone %s server %s, but this agent runs as zone %s server %s",
                identity_path(self.data_dir),
                identity.zone,
                identity.server,
                settings.zone,
                self.server,
            )

        self.disk = DiskHealth(
            self.data_dir, self.log, disk_probe, disk_probe_timeout_us, self.metrics
        )
        self.resources = ResourceMonitor(settings, self.log, resource_timeout_us)
        try:
            # The highest RS fencing token obeyed before this start.
            self.tokens = TokenKeeper(self.data_dir, self.log)
        except ValueError as e:
            raise IdentityError(str(e)) from e
        self.rs = RsAddresses(settings.rs_list, self.log)
        # One per process, shared by every channel, so a rotation is seen everywhere.
        self.security = TransportSecurity.for_dir(settings.certs_dir, Role.NODE)
        self.peer_gate = PeerGate(self.security.insecure, clock=clock)
        self.replicas = ReplicaManager(
            self.data_dir,
            settings,
            clock,
            self.address,
            self.log,
            log_keep=replica_log_keep,
            copy_chunk_size=copy_chunk_size,
            security=self.security,
            copy_bandwidth=copy_bandwidth,
        )
        self.lease = LeaseClient(
            settings,
            clock,
            self.address,
            identity,
            self.disk,
            self.resources,
            self.replicas,
            self.rs,
            rng or random.Random(),
            self.log,
            self.security,
            self.metrics,
            self.replicas.copy_bandwidth,
            revoked=self.peer_gate.revoked,
            tokens=self.tokens,
            params=RuntimeParameters(settings, self.log),
        )
        # The Prometheus exposition: read from the components at each scrape.
        self.metrics.registry.register(AgentCollector(self))
        self._stop: asyncio.Event | None = None
        self.health: Any = None  # the gRPC health servicer, set by create_server
        self.replicas.load()

    # ------------------------------------------------------------------ identity / address

    @property
    def server(self) -> str:
        """This server's ``ip:port`` (the RPC address; the bound port when configured as 0)."""
        return self.address.server

    def bind_port(self, port: int) -> None:
        """Record the port the gRPC server actually bound (matters when configured as 0)."""
        if not self.address.bind(port):
            self.log.warning(
                "gRPC server bound port %d, but rpc_addr says %s", port, self.settings.rpc_addr
            )

    def mark_serving(self) -> None:
        """Called once the agent's gRPC server is up: the next accepted lease starts service."""
        self.lease.mark_serving()

    def readings(self) -> AgentReadings:
        """:class:`observer_agent.metrics.AgentSource`: what ``/metrics`` shows, from memory
        (the lease state, the replicas, the last disk probe and resource report)."""
        info = self.resources.info
        return AgentReadings(
            now_us=self.clock.now_us(),
            lease_expire_us=self.lease.lease_expire_time,
            registered=self.lease.registered,
            lease_accepted=self.lease.accepted_count,
            lease_refused=dict(self.lease.refusals),
            replicas=self.replicas.roles(),
            log_lags=self.replicas.log_lags(),
            copied_bytes=self.replicas.copied_bytes(),
            copies_running=self.replicas.copies_running(),
            copy_rate_limit=self.replicas.copy_bandwidth.rate,
            copy_throttled_s=self.replicas.copy_bandwidth.throttled_s,
            disk_healthy=self.disk.disk_error is None,
            resources={f.name: float(v) for f, v in info.ListFields()},
        )

    def check_server_empty(self) -> obrpc_pb2.CheckServerEmptyResponse:
        """The answer to ``ObserverService.CheckServerEmpty``: empty = no identity file.

        An unreadable identity file counts as not empty (with empty ids)."""
        try:
            ident = load_identity(self.data_dir)
            empty = ident is None
        except IdentityError as e:
            self.log.error("%s", e)
            ident, empty = None, False
        return obrpc_pb2.CheckServerEmptyResponse(
            is_empty=empty,
            zone=self.settings.zone,
            server=self.server,
            cluster_id=ident.cluster_id if ident else "",
            server_id=ident.server_id if ident else 0,
        )

    # ------------------------------------------------------------------ the lease (lease.py)

    @property
    def identity(self) -> ClusterIdentity | None:
        """The kept cluster identity, None before joining a cluster."""
        return self.lease.identity

    @property
    def highest_epoch(self) -> int:
        """The epoch of the highest RS fencing token obeyed (a lease answer or a command;
        kept in ``DATA_DIR/rs_token.json`` across restarts)."""
        return self.tokens.highest.epoch

    @property
    def lease_expire_time(self) -> int:
        """When the last accepted lease expires (µs since the epoch; 0 = never granted)."""
        return self.lease.lease_expire_time

    @property
    def server_id(self) -> int:
        """This server's id as the RS last gave it (0 before)."""
        return self.lease.server_id

    @property
    def rs_server_status(self) -> obrpc_pb2.RsServerStatus.ValueType:
        """The status the RS last reported for this server."""
        return self.lease.rs_server_status

    @property
    def start_service_time(self) -> int:
        """When this process started service (µs since the epoch; 0 = not yet)."""
        return self.lease.start_service_time

    @property
    def serving(self) -> bool:
        """True once the agent's gRPC server is up (:meth:`mark_serving`)."""
        return self.lease.serving

    @property
    def registered(self) -> bool:
        """True while the last lease exchange was accepted."""
        return self.lease.registered

    @property
    def accepted_count(self) -> int:
        """Lease responses accepted so far."""
        return self.lease.accepted_count

    @property
    def refused_count(self) -> int:
        """Lease responses refused so far."""
        return self.lease.refused_count

    @property
    def last_accepted_rs(self) -> str:
        """``ip:port`` of the RS whose response was last accepted ("" before)."""
        return self.lease.last_accepted_rs

    @property
    def last_refusal(self) -> ObError | None:
        """The in-band error of the last refused response that carried one."""
        return self.lease.last_refusal

    @property
    def rs_list(self) -> list[str]:
        """RS addresses tried round robin: the list the RS last sent, then our own ones."""
        return self.rs.rs_list

    def next_rs_address(self) -> str:
        """The RS to try next: a leader hint or reconnect target first, else round robin."""
        return self.rs.next_address()

    def build_lease_request(self) -> obrpc_pb2.LeaseRequest:
        """The next ``LeaseRequest``: see :meth:`LeaseClient.build_lease_request
        <observer_agent.lease_loop.LeaseClient.build_lease_request>`."""
        return self.lease.build_lease_request()

    def handle_response(self, resp: obrpc_pb2.LeaseResponse, rs_addr: str) -> bool:
        """Accept (True) or refuse one ``LeaseResponse``: see
        :meth:`LeaseClient.handle_response <observer_agent.lease_loop.LeaseClient.handle_response>`.
        Never raises."""
        return self.lease.handle_response(resp, rs_addr)

    def consume_heartbeat_now(self) -> bool:
        """True once after an event that should be reported without waiting a full interval
        (start of service)."""
        return self.lease.consume_heartbeat_now()

    # ------------------------------------------------------------------ resources / disk

    @property
    def disk_error(self) -> str | None:
        """Why the data disk failed its last probe, None when healthy."""
        return self.disk.disk_error

    @property
    def server_status(self) -> int:
        """``server_status`` bits of the lease request: ``DATA_DISK_ERROR`` (0x1) while the
        disk probe fails."""
        return self.disk.server_status

    def probe_disk_now(self) -> bool:
        """Run one disk probe in the calling thread; True when healthy (tests, start-up)."""
        return self.disk.probe_now()

    async def probe_disk_async(self) -> bool:
        """One disk probe in a daemon thread; a probe slower than ``disk_probe_timeout_us``,
        or one still stuck from last time, counts as a failure. True when healthy."""
        return await self.disk.probe_async()

    @property
    def disk_probe_timeout_us(self) -> int:
        """How long one disk probe may take before the disk counts as hung, microseconds."""
        return self.disk.timeout_us

    @property
    def resource_timeout_us(self) -> int:
        """How long one resource sample may take before it is abandoned, microseconds."""
        return self.resources.timeout_us

    @property
    def resource_info(self) -> obrpc_pb2.ResourceInfo:
        """The last sampled ``ResourceInfo`` (empty before the first refresh)."""
        return self.resources.info

    def refresh_resources(self) -> None:
        """Refresh ``resource_info`` from psutil in the calling thread (raises ``OSError``);
        ``cpu_count`` / ``memory_limit`` / ``log_disk_size`` settings override capacities."""
        self.resources.refresh()

    async def refresh_resources_async(self) -> bool:
        """Refresh ``resource_info`` in a daemon thread, bounded by ``resource_timeout_us``;
        on failure keep the last values. True when refreshed."""
        return await self.resources.refresh_async()

    # ------------------------------------------------------------------ the loops

    def request_stop(self) -> None:
        """Ask :meth:`run` to return (safe to call from the loop's thread at any time)."""
        if self._stop is not None:
            self._stop.set()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (or :meth:`request_stop`): the lease loop plus the
        periodic resource refresh, disk probe and replica files check, and the replicas'
        loops. Call
        :meth:`mark_serving` once the gRPC server is up (``observer_agent.service.start_server``
        does). Returns after closing the lease stream and stopping the replicas' loops; never
        raises except ``CancelledError``."""
        self._stop = stop if stop is not None else asyncio.Event()
        self.replicas.start()
        await self.refresh_resources_async()
        await self.probe_disk_async()
        jobs: dict[str, Callable[[], Awaitable[None]]] = {
            "lease loop": lambda: self.lease.run(self._stop),
            "resource refresh": lambda: self._periodic(
                self.refresh_resources_async, lambda: self.settings.resource_refresh_interval
            ),
            # The interval is read at each round: the RS may change it (disk_probe_interval).
            "disk probe": lambda: self._periodic(
                self.probe_disk_async, lambda: self.settings.disk_probe_interval
            ),
            # Replica files removed under a running agent: checked as
            # often as the disk, so the RS learns of the loss within a probe interval.
            "replica files check": lambda: self._periodic(
                self._check_replica_files, lambda: self.settings.disk_probe_interval
            ),
        }
        tasks: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(factory()): name for name, factory in jobs.items()
        }
        stop_task: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            while not is_set(self._stop):
                done, _ = await asyncio.wait(
                    {stop_task, *tasks}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if task is stop_task:
                        continue
                    # The loops catch everything; if one still ends, restart it rather than
                    # live on without heartbeats.
                    name = tasks.pop(task)
                    exc = task.exception() if not task.cancelled() else None
                    self.log.error("%s ended unexpectedly (%r); restarting it", name, exc)
                    await sleep_unless_stopped(self._stop, self.settings.heartbeat_interval / 1e6)
                    tasks[asyncio.ensure_future(jobs[name]())] = name
        finally:
            for task in (stop_task, *tasks):
                task.cancel()
            await asyncio.wait({stop_task, *tasks}, timeout=_CLOSE_TIMEOUT_S)
            # A clean stop says so on the stream still open (when the cluster version allows).
            await say_stopping(self.lease)
            await self.lease.close_stream()
            await self.replicas.stop()
            self.lease.forget_registration()

    async def _check_replica_files(self) -> bool:
        """:meth:`observer_agent.replicas.manager.ReplicaManager.check_files`; True when
        some replica was forgotten."""
        return bool(await self.replicas.check_files())

    async def _periodic(
        self, job: Callable[[], Awaitable[bool]], interval_us: Callable[[], int]
    ) -> None:
        while not is_set(self._stop):
            await sleep_unless_stopped(self._stop, interval_us() / 1e6)
            if is_set(self._stop):
                return
            try:
                await job()
            except Exception:
                self.log.exception("periodic job failed")
