"""The server manager: the whitelist, lease heartbeats, the expiry checker, the admin
operations on servers and their mirroring to ``__all_server``.

Follows OceanBase's ``ObServerManager`` (4.1) with the deliberate differences of SPEC.md:
admin operations are write-through (validate, commit, then change memory), heartbeat-derived
changes go through :class:`PersistQueue`, and only a heartbeat makes a server alive.

Threading: the heartbeat path (gRPC event loop) and the checker take only ``_lock`` and do
no I/O. Admin operations, the persistence queue and CheckAllServerTask hold the store's
write lock across read-memory / write-table / apply-memory, always before ``_lock``.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Literal

import sqlalchemy as sa

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.db import event_repo, job_repo, param_repo, server_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.metrics import Metrics
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.status import (
    CHECKED_COLUMNS,
    DATA_DISK_ERROR_BIT,
    AdminStatus,
    HeartbeatStatus,
    ReportStatus,
    ResourceInfo,
    ServerStatus,
    admin_from_display,
    check_zone_name,
)
from rootservice.servers.zones import ZoneManager

log = logging.getLogger(__name__)

StopMode = Literal["STOP", "FORCE_STOP", "ISOLATE"]
MODULE = "server"


class PersistQueue:
    """Retrying, coalescing persistence of heartbeat-derived changes (SPEC.md section 6).

    ``mark(key)`` records that a server's row is stale; ``run_once()`` writes the *current*
    in-memory row of every stale server in one transaction, so repeated changes coalesce and
    a retry after an outage can never write an older value over a newer one. Events raised
    on the heartbeat path are appended in the same transaction. A failed flush keeps
    everything for the next run.
    """

    def __init__(
        self,
        store: MetaStore,
        clock: Clock,
        rows: Callable[[list[str]], list[dict[str, Any]]],
        metrics: Metrics,
        max_events: int = 100_000,
    ) -> None:
        self.store = store
        self.clock = clock
        self._rows = rows
        self.metrics = metrics
        self._lock = threading.Lock()
        self._dirty: dict[str, int] = {}
        # Bounded so a long outage with flapping servers cannot exhaust memory.
        self._events: deque[tuple[int, Event]] = deque(maxlen=max_events)
        self._event_seq = 0
        self._last_error_log_us = 0

    def mark(self, key: str) -> None:
        """Record that the row of ``key`` ('ip:port') must be rewritten from memory."""
        with self._lock:
            self._dirty[key] = self._dirty.get(key, 0) + 1

    def add_event(self, event: Event) -> None:
        """Queue an event row (dropping the oldest beyond ``max_events``)."""
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self.metrics.inc("events_dropped_total")
            self._event_seq += 1
            self._events.append((self._event_seq, event))

    def clear(self) -> int:
        """Forget every queued row and event; returns how many were dropped.

        Called when the RS steps down (issue 5): what a deposed leader queued must never be
        written by a later term of this process, which loads fresh state instead.
        """
        with self._lock:
            n = len(self._dirty) + len(self._events)
            self._dirty.clear()
            self._events.clear()
            return n

    def pending_keys(self) -> set[str]:
        """Servers whose rows are queued."""
        with self._lock:
            return set(self._dirty)

    def depth(self) -> int:
        """Stale rows + queued events."""
        with self._lock:
            return len(self._dirty) + len(self._events)

    def run_once(self) -> int:
        """Flush; returns rows + events written. Raises nothing: failures are logged
        (at most every 10 s) and counted, and the work stays queued."""
        with self.store.write_lock:
            with self._lock:
                dirty = dict(self._dirty)
                queued = list(self._events)
            events = [e for _, e in queued]
            if not dirty and not events:
                return 0
            rows = self._rows(list(dirty))
            now = self.clock.now_us()
            try:
                with self.store.txn() as conn:
                    server_repo.update_servers(conn, rows, now)
                    event_repo.insert_events(conn, events, self.store.rs_addr)
            except ObError as e:
                self.metrics.inc("persist_failures_total")
                if now - self._last_error_log_us >= 10_000_000:
                    self._last_error_log_us = now
                    log.warning(
                        "persisting %d server rows and %d events failed, will retry: %s",
                        len(dirty),
                        len(events),
                        e,
                    )
                return 0
            with self._lock:
                for key, version in dirty.items():
                    if self._dirty.get(key) == version:
                        del self._dirty[key]
                # By sequence, not count: the bounded deque may have dropped old entries
                # while this flush ran.
                last = queued[-1][0] if queued else 0
                while self._events and self._events[0][0] <= last:
                    self._events.popleft()
            self.metrics.inc("persist_flushes_total")
            self.metrics.inc("persist_rows_total", len(rows))
            return len(rows) + len(events)


class ServerManager:
    """Owns the server whitelist (SPEC.md sections 2-7).

    ``background`` runs a callable off the heartbeat path (the auto STOP / START of a server
    whose data disk fails / recovers); ``wake`` is called with a checker name
    (``"balancer"``, ``"empty_server_checker"``, ``"lost_replica_checker"``) when that
    component should run now.
    """

    def __init__(
        self,
        clock: Clock,
        settings: RsSettings,
        store: MetaStore,
        agents: AgentClient,
        metrics: Metrics | None = None,
        background: Callable[[Callable[[], object]], None] | None = None,
        wake: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.clock = clock
        self.settings = settings
        self.store = store
        self.agents = agents
        self.metrics = metrics or Metrics()
        self.background = background or (lambda fn: fn())
        self.wake = wake or (lambda name: None)
        self.sleep = sleep
        self.zones = ZoneManager(clock, store, self._server_zones)
        self.persist = PersistQueue(store, clock, self._rows_for, self.metrics)
        self._lock = threading.RLock()
        self._servers: dict[str, ServerStatus] = {}
        # Alive servers in heartbeat order: every lease has the same length, so the front is
        # always the next to expire and the checker touches only what expires (O(1) a tick).
        self._alive: OrderedDict[str, None] = OrderedDict()
        # (permanent-offline deadline, key) of lease-expired servers; stale entries are
        # skipped when popped.
        self._offline_heap: list[tuple[int, str]] = []
        # The one gate (SPEC.md section 8): the whitelist is served only while it is open.
        self.term = store.term
        self.cluster_id = ""
        self.rs_list: list[str] = []
        self.self_server = ""
        self._no_expire_until = 0
        # Hooks of the tenant layer (rootservice.tenants.log_streams), None until it is wired:
        # the replica report of each accepted heartbeat (called under the whitelist lock),
        # DELETE / STOP pre-checks, and what STOP does once stop_time is written (move the
        # leaders off and wait for leader_cnt 0).
        self.on_replicas: Callable[[ServerStatus, Sequence[Any]], None] | None = None
        self.delete_pre_check: Callable[[list[ServerStatus]], None] | None = None
        self.stop_pre_check: Callable[[list[ServerStatus], StopMode], None] | None = None
        self.after_stop: Callable[[list[str]], None] | None = None
        # CANCEL DELETE SERVER: stop the migrations off the server (rootservice.balancer.manager).
        self.on_cancel_delete: Callable[[str], object] | None = None
        # Servers the table shows alive that a take-office load could not prove alive yet:
        # their rows stay as they are until the take-office grace ends (SPEC.md section 6),
        # so a new leader never flashes a living server INACTIVE.
        self._candidates: set[str] = set()

    # --- helpers ---------------------------------------------------------------------------

    def _server_zones(self) -> list[str]:
        with self._lock:
            return [s.zone for s in self._servers.values()]

    # Whitelist-wide work takes the lock this many servers at a time, so the heartbeat path
    # (which needs the same lock) waits at most a chunk's worth, not the whole scan.
    CHUNK = 256

    def _rows_chunked(self, keys: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """``(key, to_row())`` of the given servers that are still whitelisted."""
        out: list[tuple[str, dict[str, Any]]] = []
        for i in range(0, len(keys), self.CHUNK):
            with self._lock:
                for k in keys[i : i + self.CHUNK]:
                    s = self._servers.get(k)
                    if s is not None:
                        out.append((k, s.to_row()))
        return out

    def _rows_for(self, keys: list[str]) -> list[dict[str, Any]]:
        return [row for _, row in self._rows_chunked(keys)]

    def with_server(self, server: str, fn: Callable[[ServerStatus], None]) -> None:
        """Run ``fn`` on the live record of ``server`` under the whitelist lock (no-op when it
        is not whitelisted)."""
        with self._lock:
            s = self._servers.get(server)
            if s is not None:
                fn(s)

    def get(self, server: str) -> ServerStatus | None:
        """A copy of one record, or None (``server`` is 'ip:port')."""
        with self._lock:
            s = self._servers.get(server)
            return None if s is None else replace(s, resource_info=replace(s.resource_info))

    def snapshot(self) -> list[ServerStatus]:
        """Copies of every record, ordered by id."""
        with self._lock:
            return sorted(
                (
                    replace(s, resource_info=replace(s.resource_info))
                    for s in self._servers.values()
                ),
                key=lambda s: s.id,
            )

    def deleting_servers(self) -> list[ServerStatus]:
        """Copies of the DELETING servers only (the empty-server checker's input), without
        copying the rest of the whitelist."""
        with self._lock:
            return [
                replace(s) for s in self._servers.values() if s.admin_status is AdminStatus.DELETING
            ]

    def has_servers_to_empty(self) -> bool:
        """Some server is DELETING or permanently offline (the balancer's work). Reads two
        attributes per server under the lock, no copies: the balancer asks on every round."""
        with self._lock:
            return any(
                s.admin_status is AdminStatus.DELETING
                or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
                for s in self._servers.values()
            )

    def counts(self) -> dict[str, int]:
        """Number of servers by heartbeat status, plus ``servers``."""
        out = {h.value: 0 for h in HeartbeatStatus}
        with self._lock:
            for s in self._servers.values():
                out[s.hb_status.value] += 1
            out["servers"] = len(self._servers)
        return out

    def _event(self, now: int, event: str, s: ServerStatus, *extra: tuple[str, Any]) -> Event:
        return Event(now, MODULE, event, (("server", s.key), ("zone", s.zone), *extra))

    def _set_alive(self, s: ServerStatus) -> None:
        self._alive[s.key] = None
        self._alive.move_to_end(s.key)

    def _resolve(self, server: str) -> tuple[str, ServerStatus | None]:
        ip, port = parse_server(server)
        key = format_server(ip, port)
        return key, self._servers.get(key)

    # --- receive_hb (SPEC.md section 5) ---------------------------------------------------

    def receive_hb(self, req: obrpc_pb2.LeaseRequest) -> obrpc_pb2.LeaseResponse:
        """Handle one lease request and return the lease response.

        Raises ``ObError``: OB_RS_NOT_MASTER before the RS is in service; OB_INVALID_ARGUMENT
        for a malformed request or another cluster's agent; OB_ZONE_INFO_NOT_EXIST;
        OB_SERVER_NOT_IN_WHITE_LIST (nothing is added); OB_SERVER_ZONE_NOT_MATCH. Only
        memory is touched here; table changes are queued.
        """
        if not self.term.in_service:
            raise ObError("OB_RS_NOT_MASTER", detail="the root service is not in service")
        key = req.server
        with self._lock:
            s = self._servers.get(key)
            if s is None:
                # Slow path only for unknown keys: validate so a malformed address gets
                # OB_INVALID_ARGUMENT rather than "not in white list".
                key, s = self._resolve(req.server)
            raw = req.resource_info.SerializeToString()
            resources = self._validate_hb(req, None if s is None else s.resource_raw, raw)
            if not self.zones.exists(req.zone):
                raise ObError("OB_ZONE_INFO_NOT_EXIST", req.zone[:128])
            if s is None:
                raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
            if req.zone != s.zone:
                raise ObError(
                    "OB_SERVER_ZONE_NOT_MATCH",
                    detail=f"server '{key}' is in zone '{s.zone}', not '{req.zone}'",
                )
            if req.cluster_id and self.cluster_id and req.cluster_id != self.cluster_id:
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    f"cluster_id '{req.cluster_id[:64]}'",
                    detail=f"this cluster is '{self.cluster_id}'",
                )
            now = self.clock.now_us()
            changed = False
            if not s.force_stop_hb:
                if not s.is_alive():
                    self._candidates.discard(key)
                    # Only a server back from permanent offline changes the balancer's
                    # plans; waking it on every transition would run it thousands of
                    # times when a whole cluster comes online.
                    if s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE:
                        self.wake("balancer")
                    s.hb_status = HeartbeatStatus.ALIVE
                    s.register_time = now
                    s.last_offline_time = 0
                    changed = True
                    self.persist.add_event(self._event(now, "online", s))
                s.last_hb_time = now
                self._set_alive(s)
            if req.start_service_time != s.start_service_time:
                s.start_service_time = req.start_service_time
                changed = True
            disk_error = bool(req.server_status & DATA_DISK_ERROR_BIT)
            new_report = ReportStatus.DATA_DISK_ERROR if disk_error else ReportStatus.NORMAL
            if new_report is not s.server_report_status:
                s.server_report_status = new_report
                self._on_report_status_change(s, now)
            if req.build_version != s.build_version or req.sql_port != s.sql_port:
                s.build_version = req.build_version
                s.sql_port = req.sql_port
                changed = True
            if resources is not None:
                s.resource_info = resources
                s.resource_raw = raw
            if self.on_replicas is not None:
                self.on_replicas(s, req.replicas)
            if changed:
                self.persist.mark(key)
            return self._lease_response(s, req.seq)

    def _validate_hb(
        self, req: obrpc_pb2.LeaseRequest, last_raw: bytes | None, raw: bytes
    ) -> ResourceInfo | None:
        """Raise OB_INVALID_ARGUMENT naming the first bad field; returns the resources."""
        # Agents resend the same resource info most of the time: compare the bytes and only
        # convert and check it when it changed (None: unchanged).
        resources = None
        if raw != last_raw:
            resources = ResourceInfo.from_proto(req.resource_info)
        bad = ""
        if not req.zone or len(req.zone) > 128:
            bad = "zone"
        elif not 1 <= req.sql_port <= 65535:
            bad = "sql_port"
        elif req.start_service_time < 0 or req.current_server_time < 0:
            bad = "start_service_time" if req.start_service_time < 0 else "current_server_time"
        elif req.server_status < 0 or len(req.build_version) > 256:
            bad = "server_status" if req.server_status < 0 else "build_version"
        elif resources is not None and not resources.is_valid():
            bad = "resource_info"
        if bad:
            raise ObError("OB_INVALID_ARGUMENT", f"lease request field {bad}")
        return resources

    def _lease_response(self, s: ServerStatus, seq: int) -> obrpc_pb2.LeaseResponse:
        lease = self.settings.lease_time
        expire = s.last_hb_time + lease if s.force_stop_hb else self.clock.now_us() + lease
        stopped = s.stop_time != 0 or not self.zones.is_active(s.zone)
        return obrpc_pb2.LeaseResponse(
            version=1,
            lease_expire_time=expire,
            heartbeat_expire_time=expire,
            server_id=s.id,
            rs_server_status=obrpc_pb2.IS_STOPPED if stopped else obrpc_pb2.IS_WORKING,
            rs_epoch=self.store.epoch,
            rs_list=self.rs_list,
            cluster_id=self.cluster_id,
            seq=seq,
        )

    def _on_report_status_change(self, s: ServerStatus, now: int) -> None:
        # OceanBase runs STOP / START SERVER for the server, with all their checks, off the
        # heartbeat thread (ObRootService::submit_stop_server_task).
        key = s.key
        if s.server_report_status is ReportStatus.DATA_DISK_ERROR and s.stop_time == 0:
            self.persist.add_event(self._event(now, "data_disk_error", s))
            self.background(lambda: self._auto(key, stop=True))
        elif s.server_report_status is ReportStatus.NORMAL and s.stop_time != 0:
            self.persist.add_event(self._event(now, "data_disk_recovered", s))
            self.background(lambda: self._auto(key, stop=False))

    def _auto(self, key: str, *, stop: bool) -> None:
        try:
            if stop:
                self.stop_servers([key], None, "STOP", reason="data disk error")
            else:
                self.start_servers([key], None, reason="data disk recovered")
        except ObError as e:
            log.warning("automatic %s SERVER %s refused: %s", "STOP" if stop else "START", key, e)

    # --- heartbeat checker (SPEC.md section 5) ---------------------------------------------

    def check_heartbeats(self) -> int:
        """One tick of the 100 ms checker: expire leases (``now - last_hb_time >=
        lease_time``, inclusive) and declare permanent offline (``>=
        server_permanent_offline_time``). Returns the number of transitions. Does nothing
        before the RS is in service or during the take-office grace (SPEC.md section 6)."""
        if not self.term.in_service:
            return 0
        t0 = time.perf_counter_ns()
        now = self.clock.now_us()
        if now < self._no_expire_until:
            return 0
        lease = self.settings.lease_time
        offline = self.settings.server_permanent_offline_time
        n = 0
        with self._lock:
            if self._candidates:
                n += self._expire_candidates(now)
            while self._alive:
                key = next(iter(self._alive))
                s = self._servers.get(key)
                if s is None or not s.is_alive():
                    del self._alive[key]
                    continue
                if now - s.last_hb_time < lease:
                    break
                del self._alive[key]
                s.hb_status = HeartbeatStatus.LEASE_EXPIRED
                s.last_offline_time = now
                s.start_service_time = 0
                heapq.heappush(self._offline_heap, (s.last_hb_time + offline, key))
                self.persist.mark(key)
                self.persist.add_event(
                    self._event(now, "lease_expire", s, ("last_hb_time", s.last_hb_time))
                )
                self.metrics.window("expire_detect_lag_us").record(now - (s.last_hb_time + lease))
                n += 1
            while self._offline_heap and self._offline_heap[0][0] <= now:
                deadline, key = heapq.heappop(self._offline_heap)
                s = self._servers.get(key)
                if s is None or s.hb_status is not HeartbeatStatus.LEASE_EXPIRED:
                    continue
                if s.last_hb_time + offline != deadline and now - s.last_hb_time < offline:
                    # Stale entry (the setting changed, a reload): re-queue with the current one.
                    heapq.heappush(self._offline_heap, (s.last_hb_time + offline, key))
                    continue
                s.hb_status = HeartbeatStatus.PERMANENT_OFFLINE
                self.persist.add_event(
                    self._event(now, "permanent_offline", s, ("last_hb_time", s.last_hb_time))
                )
                self.wake("balancer")
                self.wake("lost_replica_checker")
                n += 1
        self.metrics.window("checker_tick_us").record((time.perf_counter_ns() - t0) // 1000)
        return n

    @property
    def no_expire_until(self) -> int:
        """End of the take-office grace (microseconds since the epoch; 0 before any take
        office): no lease expires, and no take-office candidate is written INACTIVE, before
        it (SPEC.md section 6)."""
        return self._no_expire_until

    def _expire_candidates(self, now: int) -> int:
        """End of the take-office grace: the candidates that never heartbeated are written
        INACTIVE now, with event ``lease_expire``. Caller holds ``_lock``."""
        n = 0
        for key in sorted(self._candidates):
            s = self._servers.get(key)
            if s is None or s.is_alive():
                continue
            self.persist.mark(key)
            self.persist.add_event(
                self._event(now, "lease_expire", s, ("last_hb_time", s.last_hb_time))
            )
            n += 1
        self._candidates.clear()
        return n

    def resort_offline_deadlines(self) -> None:
        """Rebuild the permanent-offline heap (after ``server_permanent_offline_time`` changed)."""
        offline = self.settings.server_permanent_offline_time
        with self._lock:
            self._offline_heap = [
                (s.last_hb_time + offline, k)
                for k, s in self._servers.items()
                if s.hb_status is HeartbeatStatus.LEASE_EXPIRED
            ]
            heapq.heapify(self._offline_heap)

    # --- load_server_manager (SPEC.md section 6) ------------------------------------------

    def load(self, *, take_office: bool) -> None:
        """Read ``__all_server`` and ``__all_zone`` into memory.

        Servers absent from the table leave memory; new ones come in ``lease_expired`` (or
        ``permanent_offline`` when ``now - last_offline_time >= server_permanent_offline_time
        - lease_time``): never alive, only a heartbeat proves life. Existing ones take the
        table's values but keep ``last_hb_time``, ``hb_status`` and ``resource_info``. With
        ``take_office``, no lease expires for one ``lease_time`` after the load. Pending
        queued changes are flushed first so the table is as fresh as possible. Raises
        ``ObError(OB_ERR_SYS)`` when the database cannot be read (memory unchanged).
        """
        lease = self.settings.lease_time
        offline = self.settings.server_permanent_offline_time
        with self.store.write_lock:
            self.persist.run_once()
            with self.store.read() as conn:
                rows = server_repo.load_servers(conn)
                zones = zone_repo.load_zones(conn)
            now = self.clock.now_us()
            with self._lock:
                self.zones.replace_all(zones)
                fresh: dict[str, ServerStatus] = {}
                candidates: set[str] = set()
                for r in rows:
                    key = format_server(r["svr_ip"], r["svr_port"])
                    old = self._servers.get(key)
                    s = ServerStatus(
                        id=r["id"],
                        zone=r["zone"],
                        ip=r["svr_ip"],
                        port=r["svr_port"],
                        sql_port=r["inner_port"],
                        build_version=r["build_version"],
                        stop_time=r["stop_time"],
                        start_service_time=r["start_service_time"],
                        block_migrate_in_time=r["block_migrate_in_time"],
                        last_offline_time=r["last_offline_time"],
                        admin_status=admin_from_display(r["status"]),
                        with_rootserver=bool(r["with_rootserver"]),
                        with_partition=r["with_partition"],
                        first_sessid=r["first_sessid"],
                    )
                    if old is not None:
                        s.last_hb_time = old.last_hb_time
                        s.register_time = old.register_time
                        s.hb_status = old.hb_status
                        s.resource_info = old.resource_info
                        s.force_stop_hb = old.force_stop_hb
                        s.leader_cnt = old.leader_cnt
                        s.server_report_status = old.server_report_status
                        if s.is_alive():
                            s.last_offline_time = 0
                    else:
                        if s.last_offline_time == 0:
                            # It was alive when the table was last written: we do not know
                            # when it died, so count its offline time from now.
                            s.last_offline_time = now
                            s.last_hb_time = now
                        else:
                            s.last_hb_time = s.last_offline_time - lease
                        s.hb_status = HeartbeatStatus.LEASE_EXPIRED
                        if now - s.last_offline_time >= offline - lease:
                            s.hb_status = HeartbeatStatus.PERMANENT_OFFLINE
                        elif take_office and r["last_offline_time"] == 0:
                            candidates.add(key)
                    s.with_rootserver = bool(self.self_server) and key == self.self_server
                    fresh[key] = s
                self._servers = fresh
                self._alive = OrderedDict(
                    (k, None)
                    for k, s in sorted(fresh.items(), key=lambda kv: kv[1].last_hb_time)
                    if s.is_alive()
                )
                self.resort_offline_deadlines()
                if take_office:
                    self._no_expire_until = now + lease
                    self._candidates = candidates
                else:
                    self._candidates &= fresh.keys()
                by_key = {format_server(r["svr_ip"], r["svr_port"]): r for r in rows}
                for k, s in fresh.items():
                    if k in self._candidates:
                        continue
                    mine = s.to_row()
                    if any(mine[c] != self._row_value(by_key[k], c) for c in CHECKED_COLUMNS):
                        self.persist.mark(k)
        log.info("loaded %d servers and %d zones from the system tables", len(rows), len(zones))

    @staticmethod
    def _row_value(row: dict[str, Any], col: str) -> Any:
        v = row[col]
        return v.upper() if col == "status" and isinstance(v, str) else v

    def not_alive_servers(self) -> list[str]:
        """Keys of the servers whose heartbeat status is not alive."""
        with self._lock:
            return [k for k, s in self._servers.items() if not s.is_alive()]

    def request_heartbeats(self, servers: Iterable[str], parallel: int = 32) -> int:
        """Ask each server for a heartbeat and feed the answer to receive_hb (SPEC.md
        section 5, RS -> agent), ``parallel`` at a time so that taking office with thousands
        of silent servers takes seconds, not ``rpc_timeout`` each. Failures are only a
        warning: one summary line. Returns how many answered."""
        keys = list(servers)
        if not keys:
            return 0
        failed: list[str] = []

        def one(key: str) -> bool:
            try:
                self.receive_hb(self.agents.request_heartbeat(key, self.store.epoch))
                return True
            except ObError as e:
                failed.append(f"{key} ({e.name})")
                return False

        with ThreadPoolExecutor(
            max_workers=min(parallel, len(keys)), thread_name_prefix="rs-reqhb"
        ) as pool:
            ok = sum(pool.map(one, keys))
        if failed:
            more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
            log.warning(
                "request heartbeat failed for %d of %d servers: %s%s",
                len(failed),
                len(keys),
                ", ".join(failed[:5]),
                more,
            )
        return ok

    # --- CheckAllServerTask (SPEC.md section 6) -------------------------------------------

    def check_all_server(self, page_size: int = 200, pause_s: float = 0.05) -> int:
        """Compare memory with ``__all_server`` on the checked columns and queue a repair for
        each server that differs and is not already queued. Returns how many were queued.

        The table is read ``page_size`` rows at a time in key order, each page under the
        write lock (so the persistence queue cannot flush in the middle of a comparison) and
        with ``pause_s`` between pages: the heartbeat path shares the GIL with this thread,
        and one 10,000-row scan in a burst delayed heartbeats by 150 ms in ``make bench``,
        while 50 pages spread over 2.5 s of a 30 s period do not. Raises ``ObError(OB_ERR_SYS)`` when the table cannot be read.
        """
        if not self.term.in_service:
            return 0
        repaired: list[str] = []
        seen: set[str] = set()
        extra: list[str] = []
        after: tuple[str, int] | None = None
        while True:
            with self.store.write_lock:
                with self.store.read() as conn:
                    page = server_repo.load_servers_page(conn, after, page_size)
                # A queued row differs legitimately: the queue will write it. So does a
                # take-office candidate's until the grace ends (see _expire_candidates).
                pending = self.persist.pending_keys()
                with self._lock:
                    pending |= self._candidates
                keys = [format_server(r["svr_ip"], r["svr_port"]) for r in page]
                mine = dict(self._rows_chunked([k for k in keys if k not in pending]))
                for key, row in zip(keys, page, strict=True):
                    seen.add(key)
                    if key in pending:
                        continue
                    if key not in mine:
                        extra.append(key)
                        continue
                    diff = [c for c in CHECKED_COLUMNS if mine[key][c] != self._row_value(row, c)]
                    if diff:
                        repaired.append(f"{key} ({', '.join(diff)})")
                        self.persist.mark(key)
            if len(page) < page_size:
                break
            after = (page[-1]["svr_ip"], page[-1]["svr_port"])
            self.sleep(pause_s)
        with self._lock:
            missing = sorted(self._servers.keys() - seen)
        if repaired:
            self.metrics.inc("check_all_server_repairs_total", len(repaired))
            log.warning(
                "__all_server differs from memory for %d servers, repairing: %s%s",
                len(repaired),
                "; ".join(repaired[:5]),
                " ..." if len(repaired) > 5 else "",
            )
        if missing:
            log.error(
                "%d whitelisted servers have no __all_server row: %s",
                len(missing),
                ", ".join(missing[:5]),
            )
        if extra:
            log.error(
                "%d __all_server rows are not in the whitelist (RELOAD SERVER loads them): %s",
                len(extra),
                ", ".join(extra[:5]),
            )
        return len(repaired)

    # --- admin operations (SPEC.md section 7) ---------------------------------------------

    def _unique_keys(self, servers: Iterable[str]) -> list[str]:
        keys: list[str] = []
        for text in servers:
            ip, port = parse_server(text)
            key = format_server(ip, port)
            if key in keys:
                raise ObError("OB_INVALID_ARGUMENT", f"server '{key}' listed twice")
            keys.append(key)
        if not keys:
            raise ObError("OB_INVALID_ARGUMENT", "empty server list")
        return keys

    def _existing(self, servers: Iterable[str], zone: str | None) -> list[ServerStatus]:
        """Resolve the statement's servers; all must be whitelisted and in ``zone`` if given."""
        keys = self._unique_keys(servers)
        out = []
        with self._lock:
            for key in keys:
                s = self._servers.get(key)
                if s is None:
                    raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
                if zone is not None and s.zone != zone:
                    raise ObError(
                        "OB_SERVER_ZONE_NOT_MATCH",
                        detail=f"server '{key}' is in zone '{s.zone}', not '{zone}'",
                    )
                out.append(replace(s))
        return out

    def _require_in_service(self) -> None:
        self.term.check()

    def add_servers(self, servers: list[str], zone: str | None) -> list[int]:
        """ADD SERVER: new ids, rows NORMAL and lease_expired (display INACTIVE) until the
        first heartbeat; event ``add_server``. All or none. Raises OB_INVALID_ARGUMENT,
        OB_ZONE_INFO_NOT_EXIST, OB_ZONE_NOT_ACTIVE, OB_ENTRY_EXIST,
        OB_SERVER_CONNECTION_ERROR, OB_OP_NOT_ALLOW (agent not empty),
        OB_SERVER_ZONE_NOT_MATCH (agent's own zone differs). Returns the new ids."""
        self._require_in_service()
        keys = self._unique_keys(servers)
        if zone is not None:
            zone = check_zone_name(zone)
            self._check_zone_usable(zone)
        with self.store.write_lock:
            with self._lock:
                for key in keys:
                    if key in self._servers:
                        raise ObError(
                            "OB_ENTRY_EXIST", f"server '{key}' is already in the whitelist"
                        )
            new: list[ServerStatus] = []
            for key in keys:
                check = self.agents.check_server_empty(key, self.store.epoch)
                target_zone = zone or check.zone
                self._check_zone_usable(target_zone)
                if not check.is_empty:
                    raise ObError(
                        "OB_OP_NOT_ALLOW",
                        f"add server '{key}' which belongs to cluster '{check.cluster_id}' as server {check.server_id}",
                        detail="wipe its data directory to reuse it",
                    )
                if check.zone != target_zone:
                    raise ObError(
                        "OB_SERVER_ZONE_NOT_MATCH",
                        detail=f"server '{key}' was started in zone '{check.zone}', not '{target_zone}'",
                    )
                ip, port = parse_server(key)
                new.append(ServerStatus(id=0, zone=target_zone, ip=ip, port=port, sql_port=0))
            now = self.clock.now_us()
            with self.store.txn() as conn:
                for s in new:
                    s.id = param_repo.next_counter(conn, param_repo.PARAM_MAX_SERVER_ID, now)
                    s.last_hb_time = now
                    s.last_offline_time = 0
                    server_repo.insert_server(conn, s.to_row(), now)
                event_repo.insert_events(
                    conn,
                    [self._event(now, "add_server", s, ("id", s.id)) for s in new],
                    self.store.rs_addr,
                )
            offline = self.settings.server_permanent_offline_time
            with self._lock:
                for s in new:
                    self._servers[s.key] = s
                    heapq.heappush(self._offline_heap, (s.last_hb_time + offline, s.key))
        self.background(lambda: self.request_heartbeats([s.key for s in new]))
        return [s.id for s in new]

    def _check_zone_usable(self, zone: str) -> None:
        z = self.zones.get(zone)
        if z is None:
            raise ObError("OB_ZONE_INFO_NOT_EXIST", zone)
        if not z.active:
            raise ObError("OB_ZONE_NOT_ACTIVE", detail=f"zone '{zone}' is {z.status}")

    def _write_through(
        self,
        targets: list[ServerStatus],
        change: Callable[[ServerStatus], None],
        event: str,
        *event_values: tuple[str, Any],
        also: Callable[[sa.Connection, ServerStatus], Any] | None = None,
    ) -> list[Any]:
        """The write-through step of an admin operation (SPEC.md section 6): apply ``change``
        to copies of the servers' current records, write their rows, ``also(conn, s)`` for
        each and one ``event`` each in one fenced transaction, then apply ``change`` to
        memory. Returns what ``also`` returned. The caller holds the write lock, so no other
        table write interleaves. Raises ``ObError`` (nothing changed) on database errors."""
        with self._lock:
            fresh = [replace(self._servers[s.key]) for s in targets if s.key in self._servers]
        for s in fresh:
            change(s)
        now = self.clock.now_us()
        results = []
        with self.store.txn() as conn:
            server_repo.update_servers(conn, [s.to_row() for s in fresh], now)
            if also is not None:
                results = [also(conn, s) for s in fresh]
            event_repo.insert_events(
                conn, [self._event(now, event, s, *event_values) for s in fresh], self.store.rs_addr
            )
        with self._lock:
            for s in fresh:
                cur = self._servers.get(s.key)
                if cur is not None:
                    change(cur)
        return results

    def delete_servers(
        self,
        servers: list[str],
        zone: str | None,
        pre_check: Callable[[list[ServerStatus]], None] | None = None,
    ) -> list[int]:
        """DELETE SERVER: one transaction sets status DELETING and creates a DELETE_SERVER job
        INPROGRESS per server; then wakes the balancer and the checkers. ``pre_check`` runs
        the unit / log-stream checks of later layers (raising OB_DELETE_SERVER_NOT_ALLOWED or
        OB_OP_NOT_ALLOW). Raises OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH,
        OB_SERVER_ALREADY_DELETED. Returns the job ids."""
        self._require_in_service()
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            for s in targets:
                if s.admin_status is AdminStatus.DELETING:
                    raise ObError("OB_SERVER_ALREADY_DELETED", detail=f"server '{s.key}'")
            pre_check = pre_check or self.delete_pre_check
            if pre_check is not None:
                pre_check(targets)

            def deleting(s: ServerStatus) -> None:
                s.admin_status = AdminStatus.DELETING

            def job(conn: sa.Connection, s: ServerStatus) -> int:
                sql_text = f"ALTER SYSTEM DELETE SERVER '{s.key}'"
                return job_repo.create_job(
                    conn,
                    "DELETE_SERVER",
                    s.ip,
                    s.port,
                    self.clock.now_us(),
                    self.store.rs_addr,
                    sql_text,
                )

            jobs = self._write_through(targets, deleting, "delete_server", also=job)
        for name in ("balancer", "empty_server_checker", "lost_replica_checker"):
            self.wake(name)
        return [int(j) for j in jobs]

    def cancel_delete_servers(self, servers: list[str], zone: str | None) -> None:
        """CANCEL DELETE SERVER: ``force_stop_hb = false``, DELETING -> NORMAL, job CANCELED,
        event ``cancel_delete_server``; then request a heartbeat and wake the balancer.
        Raises OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH, OB_SERVER_NOT_DELETING."""
        self._require_in_service()
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            for s in targets:
                if s.admin_status is not AdminStatus.DELETING:
                    raise ObError("OB_SERVER_NOT_DELETING", detail=f"server '{s.key}'")

            def normal(s: ServerStatus) -> None:
                s.admin_status = AdminStatus.NORMAL
                s.force_stop_hb = False

            def cancel_job(conn: sa.Connection, s: ServerStatus) -> int:
                code = ObError("OB_CANCELED").code
                return job_repo.finish_jobs(
                    conn, "DELETE_SERVER", s.ip, s.port, "CANCELED", self.clock.now_us(), code
                )

            self._write_through(targets, normal, "cancel_delete_server", also=cancel_job)
        keys = [s.key for s in targets]
        self.background(lambda: self.request_heartbeats(keys))
        if self.on_cancel_delete is not None:
            for key in keys:
                self.on_cancel_delete(key)
        self.wake("balancer")

    def stop_servers(
        self,
        servers: list[str],
        zone: str | None,
        mode: StopMode,
        reason: str = "",
        pre_check: Callable[[list[ServerStatus], StopMode], None] | None = None,
    ) -> None:
        """STOP / FORCE STOP / ISOLATE SERVER: ``stop_time = now`` (kept if already stopped).

        Refused with OB_STOP_SERVER_IN_MULTIPLE_ZONES when the servers span zones, and for
        STOP / FORCE STOP also when a server of another zone is stopped or another zone is
        not ACTIVE. ``pre_check`` runs the log-stream checks of later layers. Raises
        OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH as well."""
        self._require_in_service()
        targets = self._existing(servers, zone)
        zones = sorted({s.zone for s in targets})
        if len(zones) > 1:
            raise ObError("OB_STOP_SERVER_IN_MULTIPLE_ZONES", ",".join(zones))
        if mode != "ISOLATE":
            self._check_other_zones_running(zones[0])
        # The log-stream checks retry for up to stop_server_check_timeout: outside the write
        # lock, so heartbeats' table writes and other statements go on meanwhile.
        pre_check = pre_check or self.stop_pre_check
        if pre_check is not None:
            pre_check(targets, mode)
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            if mode != "ISOLATE":
                self._check_other_zones_running(zones[0])
            changing = [s for s in targets if s.stop_time == 0]
            if changing:
                now = self.clock.now_us()
                event = {
                    "STOP": "stop_server",
                    "FORCE_STOP": "force_stop_server",
                    "ISOLATE": "isolate_server",
                }[mode]

                def stopped(s: ServerStatus) -> None:
                    s.stop_time = now

                self._write_through(changing, stopped, event, ("reason", reason))
        if self.after_stop is not None:
            self.after_stop([s.key for s in targets])

    def _check_other_zones_running(self, zone: str) -> None:
        """STOP's zone rule: no server of another zone stopped, every other zone ACTIVE.
        Raises OB_STOP_SERVER_IN_MULTIPLE_ZONES."""
        with self._lock:
            others = sorted(
                {s.zone for s in self._servers.values() if s.zone != zone and s.is_stopped()}
            )
        if others:
            raise ObError(
                "OB_STOP_SERVER_IN_MULTIPLE_ZONES",
                f"servers of zone {','.join(others)} are stopped",
            )
        inactive = sorted(z.zone for z in self.zones.all() if z.zone != zone and not z.active)
        if inactive:
            raise ObError(
                "OB_STOP_SERVER_IN_MULTIPLE_ZONES", f"zone {','.join(inactive)} is not active"
            )

    def start_servers(self, servers: list[str], zone: str | None, reason: str = "") -> None:
        """START SERVER: ``stop_time = 0`` (unchanged if already started). Raises
        OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH."""
        self._require_in_service()
        with self.store.write_lock:
            targets = [s for s in self._existing(servers, zone) if s.stop_time != 0]
            if targets:

                def started(s: ServerStatus) -> None:
                    s.stop_time = 0

                self._write_through(targets, started, "start_server", ("reason", reason))

    # --- the empty-server checker's operations (SPEC.md section 9) ------------------------

    def set_force_stop_hb(self, key: str, value: bool) -> None:
        """Stop (True) or resume extending the lease of a DELETING server whose units are gone."""
        with self._lock:
            s = self._servers.get(key)
            if s is not None:
                s.force_stop_hb = value

    def finish_delete_server(
        self, key: str, extra_deletes: Callable[[Any, str, int], None] | None = None
    ) -> bool:
        """Remove an emptied DELETING server: its ``__all_server`` row (and, through
        ``extra_deletes(conn, ip, port)``, its ``__all_space_usage`` rows) in one transaction,
        job SUCCESS, event ``finish_delete_server``; then it leaves memory. Returns False when
        it is no longer a DELETING whitelisted server. Raises ``ObError`` on database errors."""
        with self.store.write_lock:
            with self._lock:
                s = self._servers.get(key)
                if s is None or s.admin_status is not AdminStatus.DELETING:
                    return False
                s = replace(s)
            now = self.clock.now_us()
            with self.store.txn() as conn:
                if extra_deletes is not None:
                    extra_deletes(conn, s.ip, s.port)
                server_repo.delete_server(conn, s.ip, s.port)
                job_repo.finish_jobs(conn, "DELETE_SERVER", s.ip, s.port, "SUCCESS", now)
                event_repo.insert_events(
                    conn,
                    [self._event(now, "finish_delete_server", s, ("id", s.id))],
                    self.store.rs_addr,
                )
            with self._lock:
                self._servers.pop(key, None)
                self._alive.pop(key, None)
        self.agents.forget(key)
        return True

    # --- bootstrap support (SPEC.md section 8) --------------------------------------------

    def install_bootstrap_servers(self, servers: list[ServerStatus]) -> None:
        """Put the rs_list servers in the whitelist (lease_expired) so their heartbeats are
        accepted while bootstrap waits for them; memory only."""
        with self._lock:
            for s in servers:
                self._servers[s.key] = s

    def clear(self) -> None:
        """Forget every server (a failed bootstrap rolls back with this, and so does an RS
        that steps down)."""
        with self._lock:
            self._candidates.clear()
            self._servers.clear()
            self._alive.clear()
            self._offline_heap.clear()
