"""The admin operations on servers (docs/design/statements.md): ADD, DELETE, CANCEL DELETE, STOP,
FORCE STOP, ISOLATE and START SERVER, and STOP / FORCE STOP ZONE (which checks the zone's
servers as STOP SERVER does).

Follows OceanBase's ``ObServerManager`` / ``ObRootService`` server statements, write-through
(docs/design/servers.md#memory-and-the-table): validate, commit the rows, jobs and events in one fenced transaction, then
change memory; a refused or failed statement changes nothing. Each statement holds the store's
write lock across read-memory / write-table / apply-memory, always before the whitelist lock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

import sqlalchemy as sa

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import drain_repo, event_repo, job_repo, param_repo, server_repo
from rootservice.ha.store import MetaStore
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.events import log_transitions, server_event
from rootservice.servers.ports import Background, HeartbeatRequests, Wake
from rootservice.servers.status import (
    AdminStatus,
    ReportStatus,
    ServerStatus,
    StopMode,
    check_zone_name,
)
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import MULTIPLE_ZONES_MESSAGE, ZoneManager


class ServerChecks(Protocol):
    """The tenant layer's checks before DELETE and STOP SERVER
    (:class:`rootservice.tenants.pre_checks.ServerPreChecks`)."""

    def check_delete(self, targets: list[ServerStatus], /) -> None:
        """DELETE SERVER pre-check: raises OB_DELETE_SERVER_NOT_ALLOWED or OB_OP_NOT_ALLOW."""
        ...

    def check_stop(self, targets: list[ServerStatus], mode: StopMode, /) -> None:
        """STOP / FORCE STOP / ISOLATE pre-check (may wait up to
        ``stop_server_check_timeout``); raises ``ObError`` when refused."""
        ...


class LeaderMover(Protocol):
    """What STOP does once ``stop_time`` is written
    (:class:`rootservice.tenants.leaders.LeaderCoordinator`)."""

    def move_leaders_off(self, servers: Iterable[str], /) -> None:
        """Move every leader off ``servers`` and wait for ``leader_cnt`` 0."""
        ...


class DisruptionBudget(Protocol):
    """The disruption budget (
    :class:`rootservice.tenants.drain_work.DrainWork`)."""

    def check_budget(self, targets: set[str], action: str, /) -> None:
        """Raises OB_OP_NOT_ALLOW naming every LS that disrupting ``targets`` by ``action``
        together with the servers already unavailable would leave below its majority."""
        ...


class DeleteCancelListener(Protocol):
    """The balancer's part of CANCEL DELETE SERVER
    (:class:`rootservice.balancer.root_balancer.RootBalancer`): none of it
    waits for a balancer round."""

    def move_units_back(self, conn: sa.Connection, server: str, /) -> Any:
        """In the statement's transaction ``conn``: the units moving off ``server``
        ('ip:port') go back. Returns what :meth:`cancelled` takes."""
        ...

    def cancelled(self, server: str, undone: Any, /) -> Any:
        """Once committed, still under the store's write lock: forget the in-memory work of
        emptying ``server`` (short locks, no RPC). Returns what :meth:`drop_partial` takes."""
        ...

    def drop_partial(self, partial: Any, /) -> None:
        """Drop the replicas half-built for the units that went back (agent RPCs, each
        bounded by ``rpc_timeout``; failures logged, not raised)."""
        ...


def disk_error_message(key: str) -> str:
    """START SERVER's refusal of a server with a disk error: OceanBase's LOG_USER_ERROR text
    of OB_OP_NOT_ALLOW in ObServerZoneOpService::start_servers, which "%s not allowed"
    ends."""
    return (
        f"The target server {key} may encounter device failures. "
        "Please check GV$OB_SERVERS for more information. START SERVER is"
    )


def _end_drain(store: MetaStore, clock: Clock, conn: sa.Connection, s: ServerStatus) -> None:
    """START SERVER's end of a drain of ``s``, in the statement's transaction ``conn``: the
    drain's own thread sees the start only at its next round, but the row operators read
    (``DBA_OB_SERVER_DRAINS``) must say CANCELED when the statement answers."""
    if not s.draining:
        return
    now = clock.now_us()
    why = "START SERVER"
    rs = format_server(*store.rs_addr)
    if drain_repo.end_drain(conn, s.ip, s.port, now, drain_repo.CANCELED, why, rs):
        ev = server_event(now, "drain_server_canceled", s, ("blockers", why))
        event_repo.insert_events(conn, [ev], store.rs_addr)


class ServerAdmin:
    """The server statements. ``wake`` is called with ``"balancer"``,
    ``"empty_server_checker"`` and ``"lost_replica_checker"`` after DELETE SERVER and with
    ``"balancer"`` after CANCEL DELETE; ``background`` runs the heartbeat requests that follow
    ADD and CANCEL DELETE SERVER, and CANCEL DELETE's drop of partial replicas. Callers pass the term's gate first (statement dispatch once
    per statement, the data-disk reaction once per reaction): nothing here re-checks it, and
    a write of a deposed term is refused by the fenced store anyway."""

    def __init__(
        self,
        whitelist: Whitelist,
        zones: ZoneManager,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
        agents: AgentClient,
        checks: ServerChecks,
        leaders: LeaderMover,
        cancel_listener: DeleteCancelListener,
        heartbeats: HeartbeatRequests,
        wake: Wake,
        background: Background,
        budget: DisruptionBudget | None = None,
    ) -> None:
        """Operate on ``whitelist`` / ``zones`` and the tables of ``store``; ``budget``
        (None: none) judges STOP, ISOLATE and maintenance."""
        self.whitelist = whitelist
        self.zones = zones
        self.store = store
        self.clock = clock
        self.settings = settings
        self.agents = agents
        self.checks = checks
        self.leaders = leaders
        self.cancel_listener = cancel_listener
        self.heartbeats = heartbeats
        self.wake = wake
        self.background = background
        self.budget = budget

    @staticmethod
    def _unique_keys(servers: Iterable[str]) -> list[str]:
        """The canonical keys of a statement's servers. Raises OB_INVALID_ARGUMENT for a
        malformed, repeated or empty list."""
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
        with self.whitelist.lock:
            for key in keys:
                s = self.whitelist.records.get(key)
                if s is None:
                    raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
                if zone is not None and s.zone != zone:
                    raise ObError(
                        "OB_SERVER_ZONE_NOT_MATCH",
                        detail=f"server '{key}' is in zone '{s.zone}', not '{zone}'",
                    )
                out.append(replace(s))
        return out

    def check_zone_of(self, servers: list[str], zone: str) -> None:
        """The ZONE clause of a server statement: every server whitelisted and in ``zone``.
        Raises OB_INVALID_ARGUMENT, OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH."""
        self._existing(servers, zone)

    def add_servers(self, servers: list[str], zone: str | None) -> list[int]:
        """ADD SERVER: new ids, rows NORMAL and lease_expired (display INACTIVE) until the
        first heartbeat; event ``add_server``. All or none. Raises OB_INVALID_ARGUMENT,
        OB_ENTRY_EXIST, OB_SERVER_ALREADY_DELETED (a buried address: refused for
        ever), OB_SERVER_CONNECTION_ERROR, then per server in OceanBase 4.3.3's order
        (ObServerZoneOpService::add_servers): OB_SERVER_ZONE_NOT_MATCH (agent's own zone
        differs from the statement's, zone_checking_for_adding_server_), OB_OP_NOT_ALLOW
        (agent not empty, "add non-empty server ... not allowed"), OB_ZONE_INFO_NOT_EXIST / OB_ZONE_NOT_ACTIVE (the
        zone, add_server_). Returns the new ids."""
        keys = self._unique_keys(servers)
        if zone is not None:
            zone = check_zone_name(zone)
        with self.store.write_lock:
            with self.whitelist.lock:
                for key in keys:
                    if key in self.whitelist.records:
                        raise ObError(
                            "OB_ENTRY_EXIST", f"server '{key}' is already in the whitelist"
                        )
                    if (buried := self.whitelist.tombstones.refusal(key, 0)) is not None:
                        raise buried
            new: list[ServerStatus] = []
            for key in keys:
                check = self.agents.check_server_empty(key, self.store.epoch)
                target_zone = zone or check.zone
                # OceanBase 4.3.3 and later check the zone before emptiness
                # (ob_server_zone_op_service.cpp add_servers l.198 then l.211, commit 870f539).
                if check.zone != target_zone:
                    raise ObError(
                        "OB_SERVER_ZONE_NOT_MATCH",
                        detail=f"server '{key}' was started in zone '{check.zone}', not '{target_zone}'",
                    )
                if not check.is_empty:
                    # precheck_server_empty_and_get_zone_'s user message, then what we know.
                    raise ObError(
                        "OB_OP_NOT_ALLOW",
                        f"add non-empty server {key}",
                        detail=(
                            f"it belongs to cluster '{check.cluster_id}' as server "
                            f"{check.server_id}: wipe its data directory to reuse it"
                        ),
                    )
                self._check_zone_usable(target_zone)
                ip, port = parse_server(key)
                new.append(ServerStatus(id=0, zone=target_zone, ip=ip, port=port, sql_port=0))
            now = self.clock.now_us()
            mono = self.clock.monotonic_us()
            with self.store.txn() as conn:
                for s in new:
                    s.id = param_repo.next_counter(conn, param_repo.PARAM_MAX_SERVER_ID, now)
                    s.last_hb_time = now
                    s.last_hb_mono_us = mono
                    s.last_offline_time = 0
                    server_repo.insert_server(conn, s.to_row(), now)
                added = [server_event(now, "add_server", s, ("id", s.id)) for s in new]
                event_repo.insert_events(conn, added, self.store.rs_addr)
            self.whitelist.add(new, self.settings.server_permanent_offline_time)
            log_transitions((e, "ALTER SYSTEM statement") for e in added)
        self.background(lambda: self.heartbeats.request_heartbeats([s.key for s in new]))
        return [s.id for s in new]

    def _check_zone_usable(self, zone: str) -> None:
        """ADD SERVER's zone rule (ObServerZoneOpService::add_server_ with
        ObZoneTableOperation::check_zone_active): raises OB_ZONE_INFO_NOT_EXIST (unknown
        zone) or OB_ZONE_NOT_ACTIVE (the zone is INACTIVE)."""
        z = self.zones.get(zone)
        if z is None:
            raise ObError("OB_ZONE_INFO_NOT_EXIST", zone)
        if not z.active:
            raise ObError("OB_ZONE_NOT_ACTIVE")

    def _write_through(
        self,
        targets: list[ServerStatus],
        change: Callable[[ServerStatus], None],
        event: str,
        *event_values: tuple[str, Any],
        also: Callable[[sa.Connection, ServerStatus], Any] | None = None,
    ) -> list[Any]:
        """The write-through step of an admin operation (docs/design/servers.md#memory-and-the-table): apply ``change``
        to copies of the servers' current records, write their rows, ``also(conn, s)`` for
        each and one ``event`` each in one fenced transaction, then apply ``change`` to
        memory. Returns what ``also`` returned. The caller holds the write lock, so no other
        table write interleaves. Raises ``ObError`` (nothing changed) on database errors."""
        with self.whitelist.lock:
            records = self.whitelist.records
            fresh = [replace(records[s.key]) for s in targets if s.key in records]
        for s in fresh:
            change(s)
        now = self.clock.now_us()
        results = []
        events = [server_event(now, event, s, *event_values) for s in fresh]
        with self.store.txn() as conn:
            server_repo.update_servers(conn, [s.to_row() for s in fresh], now)
            if also is not None:
                results = [also(conn, s) for s in fresh]
            event_repo.insert_events(conn, events, self.store.rs_addr)
        with self.whitelist.lock:
            for s in fresh:
                cur = self.whitelist.records.get(s.key)
                if cur is not None:
                    change(cur)
        # Logged once committed: a refused transaction changed nothing.
        why = str(dict(event_values).get("reason") or "ALTER SYSTEM statement")
        log_transitions((e, why) for e in events)
        return results

    def delete_servers(
        self,
        servers: list[str],
        zone: str | None,
    ) -> list[int]:
        """DELETE SERVER: one transaction sets status DELETING and creates a DELETE_SERVER job
        INPROGRESS per server; then wakes the balancer and the checkers. ``checks.check_delete``
        runs the unit / log-stream checks of the tenant layer (raising OB_DELETE_SERVER_NOT_ALLOWED or
        OB_OP_NOT_ALLOW). Raises OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH,
        OB_SERVER_ALREADY_DELETED. Returns the job ids."""
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            for s in targets:
                if s.admin_status is AdminStatus.DELETING:
                    raise ObError("OB_SERVER_ALREADY_DELETED", detail=f"server '{s.key}'")
            self.checks.check_delete(targets)

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

    def check_delete_servers(self, servers: list[str], zone: str | None = None) -> list[str]:
        """The pre-checks of DELETE SERVER without changing anything (the status API's
        ``check_decommission``, as Doris' CheckDecommissionAction; EXPLAIN ALTER
        SYSTEM DELETE SERVER): the servers are whitelisted, in ``zone`` when
        given, and not DELETING, and ``checks.check_delete`` passes. Raises what
        :meth:`delete_servers` would raise before writing, in the same order
        (OB_INVALID_ARGUMENT, OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH,
        OB_SERVER_ALREADY_DELETED, OB_DELETE_SERVER_NOT_ALLOWED, OB_OP_NOT_ALLOW,
        OB_ERR_SYS). Returns the servers' canonical ``'ip:port'`` keys, in statement order."""
        targets = self._existing(servers, zone)
        for s in targets:
            if s.admin_status is AdminStatus.DELETING:
                raise ObError("OB_SERVER_ALREADY_DELETED", detail=f"server '{s.key}'")
        self.checks.check_delete(targets)
        return [s.key for s in targets]

    def cancel_delete_servers(self, servers: list[str], zone: str | None) -> None:
        """CANCEL DELETE SERVER: in one fenced transaction ``force_stop_hb = false``,
        DELETING -> NORMAL, job CANCELED, the units moving off the server back on it
        (``cancel_listener.move_units_back``), events ``cancel_delete_server`` and
        ``cancel_migrate_unit``; then, still under the write lock, the balancer forgets its
        in-memory work for the server (``cancel_listener.cancelled``). It answers once that
        is done, never waiting for a balancer round (a round that planned
        before it applies nothing of that plan). The partial replicas on the destinations
        are dropped by the ``background`` runner (the statement does not wait for agents),
        as is the heartbeat request; then the balancer is woken.
        Raises OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH, OB_SERVER_NOT_DELETING,
        and ``ObError`` of the transaction (nothing changed)."""
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            for s in targets:
                if s.admin_status is not AdminStatus.DELETING:
                    raise ObError("OB_SERVER_NOT_DELETING", detail=f"server '{s.key}'")

            def normal(s: ServerStatus) -> None:
                s.admin_status = AdminStatus.NORMAL
                s.force_stop_hb = False

            def cancel_job(conn: sa.Connection, s: ServerStatus) -> tuple[str, Any]:
                code = ObError("OB_CANCELED").code
                job_repo.finish_jobs(
                    conn, "DELETE_SERVER", s.ip, s.port, "CANCELED", self.clock.now_us(), code
                )
                return s.key, self.cancel_listener.move_units_back(conn, s.key)

            undone = self._write_through(targets, normal, "cancel_delete_server", also=cancel_job)
            partial = [self.cancel_listener.cancelled(key, u) for key, u in undone]
        keys = [s.key for s in targets]
        self.background(lambda: self.heartbeats.request_heartbeats(keys))
        for p in partial:
            self.background(functools.partial(self.cancel_listener.drop_partial, p))
        self.wake("balancer")

    def stop_servers(
        self,
        servers: list[str],
        zone: str | None,
        mode: StopMode,
        reason: str = "",
        maintenance_us: int = 0,
    ) -> None:
        """STOP / FORCE STOP / ISOLATE SERVER: ``stop_time = now`` (kept if already stopped).
        ``STOP SERVER ... FOR MAINTENANCE`` (``maintenance_us`` > 0) also
        sets ``maintenance_end_time = now + maintenance_us`` on every server named.

        STOP, ISOLATE and maintenance are judged by the disruption budget
        with every server already unavailable; FORCE STOP is the operator's override.

        Follows ObServerZoneOpService::stop_server_precheck: its checks are skipped when every
        server is already stopped (start_or_stop_server_'s have_other_stop_task still runs
        for STOP / FORCE STOP); servers spanning zones are refused with
        OB_STOP_SERVER_IN_MULTIPLE_ZONES, and so are STOP / FORCE STOP while another zone has
        a stopped server or is INACTIVE (ObRootUtils::have_other_stop_task).
        ``checks.check_stop`` runs the log-stream checks of the tenant layer, and once
        ``stop_time`` is written ``leaders.move_leaders_off`` moves the leaders off. Raises
        OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH as well."""
        targets = self._existing(servers, zone)
        if not all(s.is_stopped() for s in targets):
            zones = sorted({s.zone for s in targets})
            if len(zones) > 1:
                raise ObError("OB_STOP_SERVER_IN_MULTIPLE_ZONES")
            if mode != "ISOLATE":
                self._check_other_zones_running(zones[0])
            # The log-stream checks retry for up to stop_server_check_timeout: outside the
            # write lock, so heartbeats' table writes and other statements go on meanwhile.
            self.checks.check_stop(targets, mode)
        with self.store.write_lock:
            targets = self._existing(servers, zone)
            changing = [s for s in targets if s.stop_time == 0 or maintenance_us]
            if mode != "ISOLATE":
                # Checked again, for every server named, stopped or not:
                # ObServerZoneOpService::start_or_stop_server_ does (l.934, commit 870f539),
                # so a STOP of servers that ISOLATE already stopped is refused like any other
                # while another zone is stopped.
                for z in sorted({s.zone for s in targets}):
                    self._check_other_zones_running(z)
            fresh = {s.key for s in changing if s.stop_time == 0}
            if fresh and self.budget is not None and mode != "FORCE_STOP":
                action = "in maintenance" if maintenance_us else mode.lower().replace("_", " ")
                self.budget.check_budget(fresh, "isolated" if mode == "ISOLATE" else action)
            if changing:
                now = self.clock.now_us()
                mono = self.clock.monotonic_us()
                event = {
                    "STOP": "stop_server",
                    "FORCE_STOP": "force_stop_server",
                    "ISOLATE": "isolate_server",
                }[mode]
                extra: tuple[tuple[str, Any], ...] = (("reason", reason),)
                if maintenance_us:
                    event = "stop_server_for_maintenance"
                    extra += (("end_time", now + maintenance_us),)

                def stopped(s: ServerStatus) -> None:
                    s.stop_time = s.stop_time or now
                    if maintenance_us:
                        s.maintenance_end_time = now + maintenance_us
                        s.maintenance_floor_mono = mono + maintenance_us

                self._write_through(changing, stopped, event, *extra)
        self.leaders.move_leaders_off([s.key for s in targets])

    def _check_other_zones_running(self, zone: str) -> None:
        """STOP's zone rule, ObRootUtils::have_other_stop_task: no server of another zone
        stopped, every other zone ACTIVE. Raises OB_STOP_SERVER_IN_MULTIPLE_ZONES with
        OceanBase's "cannot stop server or stop zone in multiple zones"."""
        if self.zones.have_other_stop_task(zone):
            raise ObError("OB_STOP_SERVER_IN_MULTIPLE_ZONES", MULTIPLE_ZONES_MESSAGE)

    def stop_zone(self, zone: str, *, force: bool = False, maintenance_us: int = 0) -> None:
        """STOP / FORCE STOP ZONE (ObRootService::stop_zone): the zone rules of
        :meth:`ZoneManager.check_stop_zone`, then, when the zone has servers, the log-stream
        checks of STOP / FORCE STOP SERVER on all of them (check_majority_and_log_in_sync;
        FORCE skips the log-sync part), then :meth:`ZoneManager.stop_zone` (which refuses the
        last ACTIVE zone) and the leaders are moved off the zone's servers. An INACTIVE zone
        is left as it is. ``STOP ZONE ... FOR MAINTENANCE`` (``maintenance_us`` > 0) sets ``maintenance_end_time`` on every server of the zone (the maintenance
        ticker starts the zone at the end), and STOP ZONE is judged by the disruption budget
        (FORCE STOP is not). Raises OB_ENTRY_NOT_EXIST, OB_STOP_SERVER_IN_MULTIPLE_ZONES,
        OB_OP_NOT_ALLOW."""
        z = check_zone_name(zone)
        if not self.zones.check_stop_zone(z) and not maintenance_us:
            return
        with self.whitelist.lock:
            members = [replace(s) for s in self.whitelist.records.values() if s.zone == z]
        if members:
            self.checks.check_stop(members, "FORCE_STOP" if force else "STOP")
            live = {s.key for s in members if not s.is_stopped() and s.is_alive()}
            if live and self.budget is not None and not force:
                self.budget.check_budget(live, "in maintenance" if maintenance_us else "stopped")
        if maintenance_us and members:
            with self.store.write_lock:
                now = self.clock.now_us()
                mono = self.clock.monotonic_us()

                def window(s: ServerStatus) -> None:
                    s.maintenance_end_time = now + maintenance_us
                    s.maintenance_floor_mono = mono + maintenance_us

                self._write_through(
                    members, window, "stop_zone_for_maintenance", ("end_time", now + maintenance_us)
                )
        self.zones.stop_zone(z, force=force)
        self.leaders.move_leaders_off([s.key for s in members])

    def start_servers(self, servers: list[str], zone: str | None, reason: str = "") -> None:
        """START SERVER: ``stop_time = 0`` (unchanged if already started); it ends a
        maintenance window early (``maintenance_end_time = 0``, the permanent-offline clock
        counts from now) and a drain (its ``DBA_OB_SERVER_DRAINS`` row is
        CANCELED in the statement's own transaction, event ``drain_server_canceled``). Raises
        OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ZONE_NOT_MATCH, and OB_OP_NOT_ALLOW for a
        server whose agent last reported DATA_DISK_ERROR, started or not, with nothing
        changed (ObServerZoneOpService::start_servers, src/rootserver/
        ob_server_zone_op_service.cpp, asks the server's health the same way)."""
        with self.store.write_lock:
            named = self._existing(servers, zone)
            for s in named:
                if s.server_report_status is ReportStatus.DATA_DISK_ERROR:
                    raise ObError("OB_OP_NOT_ALLOW", disk_error_message(s.key))
            targets = [s for s in named if s.stop_time != 0 or s.maintenance_end_time != 0]
            if targets:
                mono = self.clock.monotonic_us()

                def started(s: ServerStatus) -> None:
                    s.stop_time = 0
                    if s.maintenance_end_time:
                        s.maintenance_end_time = 0
                        s.maintenance_floor_mono = min(s.maintenance_floor_mono, mono)

                end = functools.partial(_end_drain, self.store, self.clock)
                self._write_through(targets, started, "start_server", ("reason", reason), also=end)

    def end_maintenance(self, key: str) -> bool:
        """The end of ``key``'s maintenance window (the maintenance ticker):
        ``maintenance_end_time = 0`` and, when the server heartbeats, ``stop_time = 0``
        (event ``maintenance_end`` with ``result`` ``started``); otherwise it stays stopped
        and the event says ``agent_down``: from now its downtime counts towards permanent
        offline; a server being drained stays isolated (``draining``). Returns whether it
        was started. Raises ``ObError`` of the transaction."""
        with self.store.write_lock:
            with self.whitelist.lock:
                cur = self.whitelist.records.get(key)
                if cur is None or not cur.maintenance_end_time:
                    return False
                alive = cur.is_alive()
                targets = [replace(cur)]

            def ended(s: ServerStatus) -> None:
                s.maintenance_end_time = 0
                if alive and not s.draining:
                    s.stop_time = 0

            started = alive and not targets[0].draining
            if started:
                result = "started"
            elif alive:
                # The event must not say "started" while STOP_TIME stays set.
                result = "draining: stays isolated until the drain ends"
            else:
                result = "agent_down: the permanent-offline clock starts"
            self._write_through(targets, ended, "maintenance_end", ("result", result))
        return started
