"""Heartbeat intake (docs/design/leases.md): ``receive_hb`` validates a lease request, updates the
server's record in memory, queues the table changes and answers with the lease.

Follows OceanBase's ``ObServerManager::receive_hb``. Only memory is touched here, under the
whitelist lock and with no I/O: this runs on the gRPC event loop for every heartbeat (5,000 a
second at 10,000 agents in ``make bench``), so it takes no other lock, copies no record and
allocates nothing beyond the response. Table changes go through the persistence queue; the
data-disk reaction (automatic STOP / START SERVER) runs in the background.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from obcommon.bounds import quote
from obcommon.clock import Clock
from obcommon.durations import format_duration
from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2
from obcommon.releases import Release
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.ha.fence import EpochFence
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.servers.agent_parameters import AgentParameterValues
from rootservice.servers.command_ledger import CommandLedger
from rootservice.servers.events import log_transition, seconds, server_event
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.lease_bounds import (
    StreamChecks,
    check_lease_request,
    each_values,
    stable_scalars,
)
from rootservice.servers.loader import TakeOfficeGrace
from rootservice.servers.offline_window import closed
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background, TransitSink, Wake
from rootservice.servers.status import (
    DATA_DISK_ERROR_BIT,
    STOPPING_BIT,
    HeartbeatStatus,
    ReportStatus,
    ResourceInfo,
    ServerStatus,
    StopMode,
)
from rootservice.servers.suspect_policy import on_return
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

log = logging.getLogger(__name__)


class ReplicaSink(Protocol):
    """Where the replica report of each accepted heartbeat goes (the tenant layer's
    :class:`rootservice.tenants.reports.ReplicaReports`). Called under the whitelist lock on the heartbeat path: it must be cheap and
    must not do I/O."""

    def report(
        self,
        server: ServerStatus,
        replicas: Sequence[obrpc_pb2.ReplicaInfo],
        replicas_version: int,
        /,
    ) -> None:
        """Record the replicas ``server`` reported (the live record: read it, do not keep
        it), numbered ``replicas_version`` by the agent (0: not numbered)."""
        ...


class AgentVersions(Protocol):
    """The version skew rule at lease time and the cluster version the responses carry
    (satisfied by :class:`rootservice.upgrade.versions.Versions`)."""

    cluster: Release

    def agent_refusal(
        self, server: str, zone: str, build_version: str, now_us: int, /
    ) -> tuple[ObError, Event | None] | None:
        """None when the agent's release is within the rule, else the refusal and the event
        to queue (None after the first)."""
        ...


class ServerStopStart(Protocol):
    """STOP / START SERVER with every check of the statements (the data-disk reaction;
    satisfied by :class:`rootservice.servers.admin.ServerAdmin`)."""

    def stop_servers(
        self, servers: list[str], zone: str | None, mode: StopMode, reason: str = ""
    ) -> None:
        """STOP SERVER; raises ``ObError`` when refused."""
        ...

    def start_servers(self, servers: list[str], zone: str | None, reason: str = "") -> None:
        """START SERVER; raises ``ObError`` when refused."""
        ...


class HeartbeatIntake:
    """``receive_hb(req) -> LeaseResponse`` on the given whitelist.

    ``wake`` is called with ``"balancer"`` when a permanently offline server comes back;
    ``background`` runs the data-disk reaction through ``server_ops``; ``replicas`` receives
    every accepted report.
    """

    def __init__(
        self,
        whitelist: Whitelist,
        zones: ZoneManager,
        persist: PersistQueue,
        grace: TakeOfficeGrace,
        identity: ClusterIdentity,
        term: Term,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
        replicas: ReplicaSink,
        server_ops: ServerStopStart,
        wake: Wake,
        background: Background,
        transit: TransitSink | None = None,
        fence: EpochFence | None = None,
        commands: CommandLedger | None = None,
        versions: AgentVersions | None = None,
        agent_params: AgentParameterValues | None = None,
    ) -> None:
        """Serve heartbeats from ``whitelist``; the term's token is sent in every response.
        ``transit`` gets every accepted heartbeat's send and receive times (the RS's intake
        delay). ``fence`` gets the reports of agents that obeyed a token
        this term's does not follow (None: not checked). ``commands`` hears
        each heartbeat's ``applied_command_seq`` (None: not kept). ``versions`` refuses agents
        outside the version skew rule and gives the cluster version the responses carry (None:
        neither). ``agent_params`` gives each server's agent parameters (default: the
        cluster-wide values of ``settings``)."""
        self._versions = versions
        self.agent_params = agent_params or AgentParameterValues(settings)
        self._fence = fence
        self._commands = commands
        self.whitelist = whitelist
        self.zones = zones
        self.persist = persist
        self.identity = identity
        self.term = term
        self.store = store
        self.clock = clock
        self.settings = settings
        self.server_ops = server_ops
        self.wake = wake
        self.background = background
        # Bound once: the heartbeat path reads these for every request. The whitelist never
        # rebinds them (a reload changes them in place).
        self._lock = whitelist.lock
        self._servers = whitelist.records
        self._set_alive = whitelist.set_alive
        self._candidates = grace.candidates
        self._grace = grace
        self._report = replicas.report
        self._transit = transit.transit if transit is not None else None
        self._monotonic_us = clock.monotonic_us
        # The wall clock as it was at start, carried by the monotonic clock: lease times are
        # also checked against it, so a step of the RS's own clock refuses no agent.
        self._steady_offset_us = clock.now_us() - clock.monotonic_us()
        # The lease response's common fields (_response_template) and what they were made of.
        self._template: obrpc_pb2.LeaseResponse | None = None
        self._template_of: tuple[int, int, int, Release | None] = (0, 0, 0, None)
        self._template_rs_list: list[str] | None = None

    def receive_hb(
        self,
        req: obrpc_pb2.LeaseRequest,
        checks: StreamChecks | None = None,
        waited_us: int = 0,
        arrived_us: int | None = None,
    ) -> obrpc_pb2.LeaseResponse:
        """Handle one lease request and return the lease response. ``checks``: the bounds
        checks of the lease stream ``req`` came on (each field is checked by both; with it,
        the fields an agent resends unchanged are checked once per stream and per change).
        ``waited_us``: how long it waited in the RS's own lease queue, which the lease
        checker already allows for (so it is left out of the transit delay). ``arrived_us``:
        the RS's wall clock when the request arrived (default: now less ``waited_us``, which
        is wrong when the wall clock stepped while it waited); its times are judged against
        that, so a step of the RS's own clock during the wait refuses nothing.

        Raises ``ObError``: OB_RS_NOT_MASTER before the RS is in service; OB_INVALID_ARGUMENT
        for a malformed request or another cluster's agent; OB_ZONE_INFO_NOT_EXIST;
        OB_SERVER_NOT_IN_WHITE_LIST (nothing is added); OB_SERVER_ZONE_NOT_MATCH;
        OB_STATE_NOT_MATCH for a joined server whose identity is gone or differs;
        OB_SERVER_ALREADY_DELETED for a buried address or server id; OB_VERSION_NOT_MATCH for
        an agent outside the version skew rule (nothing else changes). Only memory is touched
        here; table changes are queued.
        """
        if not self.term.in_service:
            self.term.check()
        # One clock reading per request: the bounds, the record and the
        # lease are all dated by it.
        now = self.clock.now_us()
        raw = req.resource_info.SerializeToString()
        # One monotonic reading too: the bounds' steady time and the lease's age both use it.
        mono = self._monotonic_us()
        # Every field within its bounds before anything is looked up or changed.
        steady = mono + self._steady_offset_us
        # Judged as of its arrival: the time it waited in the RS's queue is the RS's own.
        at = now - waited_us if arrived_us is None else arrived_us
        # Each field is read once (a read is a lookup by name; a string field's makes a new
        # str): the checks and everything below use these.
        each = each_values(req)
        if checks is None:
            check_lease_request(req, at, steady - waited_us, each)
            scalars = stable_scalars(req)
        else:
            scalars = checks.check(req, each, at, raw, steady - waited_us)
        _, zone, server, sql_port, build_version, got, server_id = scalars
        (
            start_service_time,
            current_server_time,
            status,
            rs_epoch,
            rs_incarnation,
            seq,
            _,
            applied_command_seq,
            disk_probe_latency_us,
            replicas_version,
            replicas,
        ) = each
        if self._versions is not None:
            refused = self._versions.agent_refusal(server, zone, build_version, now)
            if refused is not None:
                if refused[1] is not None:
                    self.persist.add_event(refused[1])
                raise refused[0]
        key = server
        with self._lock:
            s = self._servers.get(key)
            if s is None:
                # Slow path only for unknown keys: validate so a malformed address gets
                # OB_INVALID_ARGUMENT rather than "not in white list".
                key = self.whitelist.resolve_key(server)
                s = self._servers.get(key)
            # A buried identity (FORCE DELETE / RECOVER LS) never rejoins.
            if (refusal := self.whitelist.tombstones.refusal(key, server_id)) is not None:
                raise refusal
            if not self.zones.exists(zone):
                raise ObError("OB_ZONE_INFO_NOT_EXIST", zone[:128])
            if s is None:
                raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
            # The whitelist's own key object from here on: each later lookup by it compares
            # by identity and reuses its cached hash (req.server is a new string each time).
            key = s.key
            if zone != s.zone:
                raise ObError(
                    "OB_SERVER_ZONE_NOT_MATCH",
                    detail=f"server '{key}' is in zone '{s.zone}', not '{zone}'",
                )
            # The common case inline: this cluster's id and no other server's id.
            if got != self.identity.cluster_id or (server_id and server_id != s.id):
                self._check_cluster_id(req, s)
            # Only a server of this cluster's whitelist may make this RS raise its epoch.
            epoch = self.term.epoch
            if rs_epoch > epoch or (rs_epoch == epoch and rs_incarnation != self.term.incarnation):
                self._token_reported(req)
            changed = False
            if got and not s.with_partition:
                # The agent keeps this cluster's identity: from now on an empty one from
                # this ip:port is a wiped data directory.
                s.with_partition = 1
                changed = True
            s.disk_probe_latency_us = disk_probe_latency_us
            if self._commands is not None:
                self._commands.applied(key, applied_command_seq)
            # The heartbeats of a LAGGING server past its third timeout renew nothing: its lease runs out as a silent server's would, until the episode ends.
            if not s.force_stop_hb and not s.lag.expired:
                if not s.is_alive():
                    why = _online_reason(s, mono)
                    if key in self._candidates:
                        self._candidates.discard(key)
                        self._grace.returned(mono)
                    # Only a server back from permanent offline changes the balancer's
                    # plans; waking it on every transition would run it thousands of
                    # times when a whole cluster comes online.
                    if s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE:
                        self.wake("balancer")
                    s.hb_status = HeartbeatStatus.ALIVE
                    s.register_time = now
                    s.last_offline_time = 0
                    changed = True
                    ev = server_event(now, "online", s)
                    self.persist.add_event(ev)
                    log_transition(ev, why)
                    if s.suspect.down_since_mono_us:
                        # Back after a lease expiry this RS saw: SUSPECT.
                        self._returned(s, mono, now)
                s.last_hb_time = now
                s.last_hb_mono_us = mono
                self._set_alive(s)
                if self._transit is not None:
                    self._transit(key, current_server_time, at)
            if start_service_time != s.start_service_time:
                s.start_service_time = start_service_time
                changed = True
            if status & STOPPING_BIT:
                # Handled whatever this RS's cluster version: only the sender gates it.
                ev = server_event(now, "server_stopping", s)
                self.persist.add_event(ev)
                log_transition(ev, "the agent is stopping cleanly (its last lease request)")
            disk_error = bool(status & DATA_DISK_ERROR_BIT)
            new_report = ReportStatus.DATA_DISK_ERROR if disk_error else ReportStatus.NORMAL
            if new_report is not s.server_report_status:
                s.server_report_status = new_report
                self._on_report_status_change(s, now)
            if build_version != s.build_version or sql_port != s.sql_port:
                s.build_version = build_version
                s.sql_port = sql_port
                changed = True
            # Agents resend the same resource info most of the time: compare the bytes and
            # only convert it when it changed (its bounds are checked above).
            if raw != s.resource_raw:
                s.resource_info = ResourceInfo.from_proto(req.resource_info)
                s.resource_raw = raw
            self._report(s, replicas, replicas_version)
            if changed:
                self.persist.mark(key)
            return self._lease_response(s, seq, now)

    def _returned(self, s: ServerStatus, mono: int, now: int) -> None:
        """``s`` heartbeats again at ``mono`` / ``now`` after its lease expired: its outage
        since its last heartbeat joins the permanent-offline window and it is SUSPECT for its
        current suspect time, with event ``suspect``. Caller holds the
        whitelist lock."""
        s.offline_spans = closed(
            s.offline_spans,
            # A maintenance window's downtime is not offline time.
            min(mono, s.offline_start(s.suspect.down_since_mono_us)),
            mono,
            self.settings.server_permanent_offline_time,
        )
        s.suspect = on_return(s.suspect, mono, self.settings.server_suspect_time)
        p = s.suspect.until_mono_us - mono
        s.suspect_end_time = now + p
        self.whitelist.push_suspect(s)
        ev = server_event(
            now,
            "suspect",
            s,
            ("suspect_end_time", s.suspect_end_time),
            ("suspect_time", format_duration(p)),
        )
        self.persist.add_event(ev)
        log_transition(
            ev,
            f"back after its lease expired: no new leaders and no copies for {format_duration(p)}",
        )

    def _check_cluster_id(self, req: obrpc_pb2.LeaseRequest, s: ServerStatus) -> None:
        """Refuse another cluster's ``cluster_id`` and, once the cluster is bootstrapped, an
        empty one from a server that has joined.

        An empty ``cluster_id`` is what an agent sends before it has an identity, and such
        an agent has not started service (``observer_agent.lease``: it sets
        ``start_service_time`` only once its identity is written). So an empty one is
        accepted only with ``start_service_time`` 0 in the request and in the record (not
        in service): the first heartbeats after ADD SERVER or BOOTSTRAP, whose response
        teaches the agent the cluster id. (The record alone cannot tell: the heartbeat
        requested by ADD SERVER is accepted without its response reaching the agent.) The
        refusal never names this cluster's id, and a refused request gets no
        ``cluster_id`` in its response (``LeaseServicer``). Raises
        ``ObError(OB_INVALID_ARGUMENT)``.

        A server that has joined (``with_partition`` = 1: it once sent
        this cluster's ``cluster_id``, so its data directory held the identity and may hold
        replicas) and now sends an empty one lost its data directory; it is refused with
        ``OB_STATE_NOT_MATCH`` naming the fix, whatever ``start_service_time`` says (that
        is reset when its lease expires), so it never silently becomes the old server with
        none of its replicas. A ``server_id`` other than the whitelist's for this
        ``ip:port`` (another server's data directory) is refused the same way. OceanBase
        has no dedicated code (its ``ObHeartbeatHandler::handle_heartbeat`` leaves the
        server-id check commented out); ``OB_STATE_NOT_MATCH`` ("Server state or role not
        the same as expected", ob_errno.def) is the closest."""
        got, cluster_id = req.cluster_id, self.identity.cluster_id
        if got and got == cluster_id and req.server_id and req.server_id != s.id:
            raise ObError(
                "OB_STATE_NOT_MATCH",
                detail=(
                    f"server '{s.key}' keeps server id {req.server_id} in its data directory "
                    f"but is in the cluster as server id {s.id}: restore its own data "
                    f"directory, or DELETE SERVER '{s.key}' then ADD SERVER it again with an "
                    "empty one"
                ),
            )
        if got == cluster_id or not cluster_id:
            return
        if got:
            raise ObError(
                "OB_INVALID_ARGUMENT",
                f"lease request field cluster_id = {quote(got)} (not this cluster's)",
            )
        if self.identity.bootstrapped and s.with_partition:
            raise ObError(
                "OB_STATE_NOT_MATCH",
                detail=(
                    f"server '{s.key}' is in the cluster as server id {s.id} but its data "
                    "directory has no identity (wiped?): restore the data directory, or "
                    f"DELETE SERVER '{s.key}' then ADD SERVER it again"
                ),
            )
        if self.identity.bootstrapped and (req.start_service_time or s.start_service_time):
            raise ObError(
                "OB_INVALID_ARGUMENT",
                f"lease request field cluster_id = '' (required: server '{s.key}' is in "
                "service in this cluster)",
            )

    def _token_reported(self, req: obrpc_pb2.LeaseRequest) -> None:
        """The agent reports a token above ours or of our epoch with another incarnation: it
        would refuse our answers and commands. Refused (OB_RS_NOT_MASTER) while the election
        raises the epoch above it."""
        if self._fence is None:
            return
        own = self.term.token()
        reported = FenceToken(req.rs_epoch, req.rs_incarnation)
        if self._fence.report(req.server, reported, own):
            self.term.wake_election()
            raise ObError(
                "OB_RS_NOT_MASTER",
                detail=(
                    f"server '{req.server}' obeyed {reported}, which {own} of this root "
                    "service does not follow: raising the epoch"
                ),
            )

    def _lease_response(self, s: ServerStatus, seq: int, now: int) -> obrpc_pb2.LeaseResponse:
        """The answer to an accepted request at ``now`` (the RS's wall clock): the lease runs
        ``lease_time`` from now (from the last heartbeat for a server whose lease is no
        longer extended, measured on the monotonic clock and expressed in the current wall
        time so a step of the RS's wall clock does not stretch or cut it), IS_STOPPED for a
        stopped server or a server of a stopped zone. It carries the agent parameters in
        effect on that server (``migration_max_bytes_per_second``, the agent's copy bandwidth
        limit, and ``parameters``: :class:`AgentParameterValues`, so an ALTER SYSTEM SET
        reaches every agent with its next heartbeat), the term's epoch, the rs_list and the
        cluster id."""
        lease = self.settings.lease_time
        if s.force_stop_hb:
            expire = now + lease - (self._monotonic_us() - s.last_hb_mono_us)
        else:
            expire = now + lease
        resp = obrpc_pb2.LeaseResponse()
        # The fields every server is sent alike come from a template, remade when one of
        # them changes: copying it is about a third of building the message field by field.
        resp.CopyFrom(self._response_template())
        resp.lease_expire_time = expire
        resp.heartbeat_expire_time = expire
        resp.server_id = s.id
        resp.seq = seq
        rate, params = self.agent_params.for_server(s.ip, s.port, s.zone)
        resp.migration_max_bytes_per_second = rate
        if params:
            resp.parameters.update(params)
        if s.stop_time != 0 or not self.zones.is_active(s.zone):
            resp.rs_server_status = obrpc_pb2.IS_STOPPED
        return resp

    def _response_template(self) -> obrpc_pb2.LeaseResponse:
        """A response with the fields every server is sent alike: ``version``,
        ``rs_server_status`` IS_WORKING, the term's epoch, the rs_list and cluster id of
        :class:`ClusterIdentity` (each replaced whole, never changed in place),
        ``migration_max_bytes_per_second`` and the cluster version; remade when one of them is not the one it was
        made from. Do not change the returned message."""
        ident = self.identity
        # The cluster version by identity (a Release is replaced whole, never changed), so
        # the common case formats nothing: str() of it was 2 % of this path.
        cluster = self._versions.cluster if self._versions is not None else None
        made_of = (
            self.term.epoch,
            self.settings.migration_max_bytes_per_second,
            self.term.incarnation,
            cluster,
        )
        t = self._template
        if (
            t is not None
            and made_of == self._template_of
            and ident.rs_list is self._template_rs_list
            and ident.cluster_id == t.cluster_id
        ):
            return t
        t = obrpc_pb2.LeaseResponse(
            version=1,
            rs_server_status=obrpc_pb2.IS_WORKING,
            rs_epoch=made_of[0],
            rs_list=ident.rs_list,
            cluster_id=ident.cluster_id,
            migration_max_bytes_per_second=made_of[1],
            rs_incarnation=made_of[2],
            cluster_version=str(cluster) if cluster is not None else "",
        )
        self._template, self._template_of, self._template_rs_list = t, made_of, ident.rs_list
        return t

    def _on_report_status_change(self, s: ServerStatus, now: int) -> None:
        """The data-disk reaction (docs/design/leases.md): an error on a started server stops it,
        a recovery on a stopped one starts it, each with event and off the heartbeat path."""
        # OceanBase runs STOP / START SERVER for the server, with all their checks, off the
        # heartbeat thread (ObRootService::submit_stop_server_task).
        key = s.key
        if s.server_report_status is ReportStatus.DATA_DISK_ERROR and s.stop_time == 0:
            ev = server_event(now, "data_disk_error", s)
            self.persist.add_event(ev)
            log_transition(ev, "the agent reports DATA_DISK_ERROR; stopping the server")
            self.background(lambda: self._auto(key, stop=True))
        elif s.server_report_status is ReportStatus.NORMAL and s.stop_time != 0:
            ev = server_event(now, "data_disk_recovered", s)
            self.persist.add_event(ev)
            log_transition(ev, "the agent reports its data disk healthy; starting the server")
            self.background(lambda: self._auto(key, stop=False))

    def _auto(self, key: str, *, stop: bool) -> None:
        """The automatic STOP / START SERVER of ``key``, with every check of the statement; a
        refusal is only a warning."""
        if not self.term.may_act():
            log.warning(
                "automatic %s SERVER %s skipped: %s",
                "STOP" if stop else "START",
                key,
                self.term.refusal(),
            )
            return
        try:
            if stop:
                self.server_ops.stop_servers([key], None, "STOP", reason="data disk error")
            else:
                self.server_ops.start_servers([key], None, reason="data disk recovered")
        except ObError as e:
            log.warning("automatic %s SERVER %s refused: %s", "STOP" if stop else "START", key, e)


def _online_reason(s: ServerStatus, mono: int) -> str:
    """Why a server that was not alive is online again, from its state before the heartbeat
    (``mono``: monotonic microseconds now): its first heartbeat (never expired since added or
    loaded), back after its lease expired, or back from permanent offline."""
    gap = seconds(max(0, mono - s.last_hb_mono_us)) if s.last_hb_time else "ever"
    if s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE:
        return f"heartbeat after permanent offline (none for {gap})"
    if s.last_offline_time == 0:
        return "first heartbeat"
    return f"heartbeat again after its lease expired (none for {gap})"
