"""ALTER SYSTEM BOOTSTRAP: turning an empty database and the rs_list servers into a cluster
(docs/design/ha.md#taking-office, OceanBase's ``ObBootstrap``).

The order, each step able to fail with nothing kept but the cluster id:

1. check the statement (one server per zone, no server twice, zone names, regions: an item
   without REGION is in the region named before it, else OceanBase's default region);
2. choose the cluster id (or keep the one an earlier attempt wrote: agents that already
   accepted it keep it in their identity file) and write it;
3. ask every server whether it is empty and in the zone the statement says;
4. whitelist the servers in memory (BOOTSTRAPPING), ask them for heartbeats and wait until
   all are alive and in service (``bootstrap_timeout``, ``bootstrap_in_service_timeout``);
5. write the zones, the ``__all_server`` rows, ``rootservice_list``, the server-id counter,
   the cluster version (the lowest release of this RS and the servers) and
   ``bootstrap_time`` with the events, in one fenced transaction;
6. hand over to the root service's take-office path (:class:`Office`), which loads what was
   written and starts the timers.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from obcommon import releases
from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.durations import format_duration
from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.config import RsSettings
from rootservice.db import cluster_version_repo, event_repo, param_repo, server_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import DEFAULT_REGION, ZoneInfo
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.loader import TakeOfficeGrace
from rootservice.servers.ports import HeartbeatRequests
from rootservice.servers.status import ServerStatus, check_zone_name
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

log = logging.getLogger(__name__)

#: How often the waits of step 4 look at the whitelist (seconds).
POLL_S = 0.2


@dataclass(frozen=True)
class BootstrapItem:
    """One ``[REGION 'r'] ZONE 'z' SERVER 'ip:port'`` item of the statement."""

    region: str | None
    zone: str
    server: str


class Office(Protocol):
    """The root service's take-office path, run once the cluster is written."""

    def do_restart(self) -> None:
        """Load the whitelist from the tables, start the timers, FULL_SERVICE."""
        ...


class Bootstrap:
    """ALTER SYSTEM BOOTSTRAP of one RS. ``identity.bootstrapped`` tells whether the cluster
    is (``bootstrap_time`` in ``__all_sys_parameter``); ``address()`` is this RS's ``ip:port``
    (the first rs_list entry); ``sleep`` waits (seconds; tests advance a fake clock)."""

    def __init__(
        self,
        *,
        term: Term,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
        agents: AgentClient,
        whitelist: Whitelist,
        zones: ZoneManager,
        identity: ClusterIdentity,
        grace: TakeOfficeGrace,
        heartbeats: HeartbeatRequests,
        office: Office,
        address: Callable[[], str],
        sleep: Callable[[float], None],
        release: Release | None = None,
    ) -> None:
        """Nothing is checked or written until :meth:`run`. ``release``: this RS's, with the
        servers' the cluster version starts at (None: left as the migrations wrote it)."""
        self.release = release
        self.term = term
        self.store = store
        self.clock = clock
        self.settings = settings
        self.agents = agents
        self.whitelist = whitelist
        self.zones = zones
        self.identity = identity
        self.grace = grace
        self.heartbeats = heartbeats
        self.office = office
        self.address = address
        self.sleep = sleep
        self._running = threading.Lock()

    def run(self, items: Sequence[BootstrapItem]) -> None:
        """Bootstrap the cluster with ``items`` (steps 1-6 of the module doc).

        Raises OB_INIT_TWICE (already bootstrapped, or one is running), OB_INVALID_ARGUMENT
        (empty or malformed list), OB_PARTITION_ZONE_DUPLICATED (two servers in one zone),
        OB_SERVER_CONNECTION_ERROR, OB_OP_NOT_ALLOW (a server of another cluster),
        OB_SERVER_ZONE_NOT_MATCH, OB_WAIT_ALL_RS_ONLINE_TIMEOUT. On failure nothing is kept.
        """
        if not self._running.acquire(blocking=False):
            raise ObError("OB_INIT_TWICE", detail="a bootstrap is already running")
        try:
            if self.identity.bootstrapped:
                raise ObError("OB_INIT_TWICE", detail="the cluster is already bootstrapped")
            keys, zones = self._check(items)
            self._run(keys, zones)
        finally:
            self._running.release()

    @staticmethod
    def _check(items: Sequence[BootstrapItem]) -> tuple[list[str], list[ZoneInfo]]:
        if not items:
            raise ObError("OB_INVALID_ARGUMENT", "bootstrap", detail="empty server list")
        keys: list[str] = []
        zones: dict[str, ZoneInfo] = {}
        region = DEFAULT_REGION
        for e in items:
            # An item without REGION is in the region named before it.
            region = check_zone_name(e.region) if e.region else region
            ip, port = parse_server(e.server)
            key = format_server(ip, port)
            zone = check_zone_name(e.zone)
            if key in keys:
                raise ObError("OB_INVALID_ARGUMENT", f"server '{key}' listed twice")
            if zone in zones:
                raise ObError("OB_PARTITION_ZONE_DUPLICATED", detail=f"zone '{zone}'")
            keys.append(key)
            zones[zone] = ZoneInfo(zone, "ACTIVE", region, "")
        return keys, list(zones.values())

    def _run(self, keys: list[str], zones: list[ZoneInfo]) -> None:
        now = self.clock.now_us()
        with self.store.read() as conn:
            cluster_id = (
                param_repo.load_params(conn).get(param_repo.PARAM_CLUSTER_ID) or uuid.uuid4().hex
            )
        with self.store.txn() as conn:
            # Kept even if this attempt fails: agents that already accepted a lease keep
            # this identity, and a retried BOOTSTRAP must give them the same one.
            param_repo.set_param(
                conn, param_repo.PARAM_CLUSTER_ID, cluster_id, now, "cluster identity"
            )
        statuses = self._check_servers(keys, zones, cluster_id, now)
        self.term.state = RsState.BOOTSTRAPPING
        self.zones.replace_all({z.zone: z for z in zones})
        self.identity.cluster_id = cluster_id
        self.identity.rs_list = [self.address()]
        self.whitelist.install(statuses)
        self.term.open_service()
        try:
            self.heartbeats.request_heartbeats(keys)
            self._wait_for(keys, lambda s: s.is_alive(), self.settings.bootstrap_timeout, "alive")
            self._wait_for(
                keys,
                lambda s: s.in_service(),
                self.settings.bootstrap_in_service_timeout,
                "in service",
            )
            self._write(keys, zones, cluster_id)
        except BaseException:
            self.term.close_service()
            self.grace.clear()
            self.whitelist.clear()
            self.zones.replace_all({})
            self.term.state = RsState.WAIT_BOOTSTRAP
            raise
        self.identity.bootstrapped = True
        log.info("bootstrap finished: %s", ", ".join(keys))
        self.office.do_restart()

    def _check_servers(
        self, keys: list[str], zones: list[ZoneInfo], cluster_id: str, now: int
    ) -> list[ServerStatus]:
        statuses = []
        mono = self.clock.monotonic_us()
        for i, (key, zone) in enumerate(zip(keys, zones, strict=True), start=1):
            check = self.agents.check_server_empty(key, self.store.epoch)
            if check.zone != zone.zone:
                raise ObError(
                    "OB_SERVER_ZONE_NOT_MATCH",
                    detail=f"server '{key}' was started in zone '{check.zone}', not '{zone.zone}'",
                )
            if not check.is_empty and (check.cluster_id != cluster_id or check.server_id != i):
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"bootstrap with server '{key}' of cluster '{check.cluster_id}'",
                )
            ip, port = parse_server(key)
            statuses.append(
                ServerStatus(
                    id=i,
                    zone=zone.zone,
                    ip=ip,
                    port=port,
                    sql_port=0,
                    last_hb_time=now,
                    last_hb_mono_us=mono,
                )
            )
        return statuses

    def _write(self, keys: list[str], zones: list[ZoneInfo], cluster_id: str) -> None:
        now = self.clock.now_us()
        rows = [s.to_row() for s in self.whitelist.snapshot()]
        with self.store.txn() as conn:
            for z in zones:
                zone_repo.upsert_zone(conn, z, now)
            for row in rows:
                server_repo.insert_server(conn, row, now)
            param_repo.set_param(
                conn, param_repo.PARAM_RS_LIST, self.address(), now, "root service list"
            )
            param_repo.set_param(
                conn,
                param_repo.PARAM_MAX_SERVER_ID,
                str(len(keys)),
                now,
                "largest server id allocated",
            )
            if self.release is not None:
                # A new cluster starts at the lowest release among its first processes, as
                # OceanBase's bootstrap writes min_observer_version of its own build.
                lowest = min(
                    [self.release, *(releases.of_build_version(r["build_version"]) for r in rows)]
                )
                cluster_version_repo.raise_to(conn, lowest, now)
            param_repo.set_param(
                conn,
                param_repo.PARAM_BOOTSTRAP_TIME,
                str(now),
                now,
                "when the cluster was bootstrapped",
            )
            events = [
                Event(
                    now,
                    "root_service",
                    "bootstrap",
                    (("rs_list", ";".join(keys)), ("cluster_id", cluster_id)),
                )
            ]
            events += [
                Event(
                    now,
                    "server",
                    "add_server",
                    (
                        ("server", r["svr_ip"] + ":" + str(r["svr_port"])),
                        ("zone", r["zone"]),
                        ("id", r["id"]),
                    ),
                )
                for r in rows
            ]
            event_repo.insert_events(conn, events, self.store.rs_addr)

    def _wait_for(
        self, keys: list[str], ok: Callable[[ServerStatus], bool], timeout_us: int, what: str
    ) -> None:
        deadline = self.clock.monotonic_us() + timeout_us
        # Bounded in count as well as time, in case a test clock never advances.
        for _ in range(1 + int(timeout_us // (POLL_S * 1_000_000)) + 10):
            missing = [k for k in keys if not ((s := self.whitelist.get(k)) is not None and ok(s))]
            if not missing:
                return
            if self.clock.monotonic_us() >= deadline:
                break
            self.sleep(POLL_S)
        raise ObError(
            "OB_WAIT_ALL_RS_ONLINE_TIMEOUT",
            detail=f"not {what} after {format_duration(timeout_us)}: {', '.join(missing)}",
        )
