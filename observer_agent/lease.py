"""The agent's side of the lease (docs/design/leases.md; OceanBase's ``ObLeaseStateMgr`` /
``ObHeartBeatProcess`` on the observer side).

The decisions are plain synchronous methods on an injected :class:`Clock` (unit tests):

- :meth:`LeaseDecisions.build_lease_request` - the next ``LeaseRequest``;
- :meth:`LeaseDecisions.handle_response` - accept or refuse one ``LeaseResponse``;
- the RS to try next is :class:`observer_agent.rs_list.RsAddresses`' (leader hint, then
  round robin).

:class:`observer_agent.lease_loop.LeaseClient` wires them to the network. Times are
microseconds.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

from obcommon import releases
from obcommon.addresses import parse_host_port
from obcommon.backoff import Backoff, BackoffPolicy
from obcommon.clock import Clock
from obcommon.errors import ObError, error_from_proto
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2
from obcommon.ratelimit_log import RateLimitedLog
from obcommon.security.certs import Role
from obcommon.security.revocation import RevokedSerials
from obcommon.security.tls import TransportSecurity
from observer_agent.address import LocalServer
from observer_agent.commands import AppliedCommands
from observer_agent.fence import TokenKeeper
from observer_agent.identity import ClusterIdentity, write_identity
from observer_agent.lease_ports import (
    AgentParameters,
    CopyRateLimit,
    ReplicaReport,
    ResourceSource,
    RsChoice,
    ServerStatus,
)
from observer_agent.lease_stream import LeaseStream
from observer_agent.metrics import AgentMetrics
from observer_agent.refusal_backoff import LIFTED_BY_STATEMENT, NO_BACKOFF, refusal_delay_us
from observer_agent.rs_certificate import RsCertificateCheck
from observer_agent.settings import AgentSettings

LEASE_REQUEST_VERSION = 1

#: A repeated lease warning (the same refusal, an unreachable RS) is logged at most this often.
REPEAT_LOG_US = 60_000_000


class LeaseDecisions:
    """The lease state of one agent and its decisions: the next request, whether an answer
    is accepted (and what it changes), how long to wait after a refusal.
    :class:`LeaseClient` adds the loop that carries them over lease streams.

    ``settings`` gives the zone, ports, intervals and ``data_dir`` (where the identity is
    written); ``clock`` all the times (integer microseconds since the epoch); ``address`` the
    agent's ``ip:port``; ``identity`` the kept cluster identity (None before joining);
    ``disk``, ``resources`` and ``replicas`` what each request reports; ``rs`` the RS
    addresses to try; ``rng`` drives the reconnect jitter; ``log`` the agent's logger.

    Public state (read only): ``identity``, ``highest_epoch``, ``lease_expire_time``,
    ``server_id``, ``rs_server_status``, ``start_service_time``, ``serving``, ``registered``,
    ``accepted_count``, ``refused_count``, ``last_accepted_rs``, ``last_refusal``,
    ``refusals`` (reason -> count), ``refusals_in_row``, ``repeat_log`` (the rate limiter of
    repeated warnings: keys ``refused`` and ``unreachable <ip:port>``), ``commands`` (the RS
    commands applied, :class:`observer_agent.commands.AppliedCommands`).
    """

    def __init__(
        self,
        settings: AgentSettings,
        clock: Clock,
        address: LocalServer,
        identity: ClusterIdentity | None,
        disk: ServerStatus,
        resources: ResourceSource,
        replicas: ReplicaReport,
        rs: RsChoice,
        rng: random.Random,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        security: TransportSecurity | None = None,
        metrics: AgentMetrics | None = None,
        copy_rate: CopyRateLimit | None = None,
        reconnect: BackoffPolicy | None = None,
        revoked: RevokedSerials | None = None,
        tokens: TokenKeeper | None = None,
        params: AgentParameters | None = None,
    ) -> None:
        """Unregistered and not serving; lease streams are opened through ``security``
        (default: what ``settings.certs_dir`` says); renewal round trips are observed in
        ``metrics.lease_renewal_seconds`` (default: a registry of its own); ``copy_rate``
        takes the copy bandwidth limit of each accepted response (None: not kept);
        ``reconnect`` is the backoff between attempts to reach an RS that does not answer
        (default: full jitter from ``settings.reconnect_backoff_base`` to
        ``reconnect_backoff_cap``, 100 ms and 2 s, the cap at most ``heartbeat_interval``), drawn from ``rng``. ``revoked`` takes the RS's revocation list from
        the accepted answers (the agent's peer gate refuses what it holds).
        ``tokens`` keeps the highest RS fencing token obeyed (default: the one kept
        in ``settings.data_dir``); ``params`` takes each accepted answer's parameters."""
        self._params = params
        self.tokens = tokens if tokens is not None else TokenKeeper(Path(settings.data_dir), log)
        self._copy_rate = copy_rate
        self.revoked = revoked if revoked is not None else RevokedSerials()
        self.metrics = metrics or AgentMetrics()
        self.security = security or TransportSecurity.for_dir(settings.certs_dir, Role.NODE)
        self.settings = settings
        self.clock = clock
        self.rs_cert = RsCertificateCheck(self.security, self.revoked, clock)
        self.data_dir = Path(settings.data_dir)
        self._address = address
        self._disk = disk
        self._resources = resources
        self._replicas = replicas
        self.rs = rs
        self._rng = rng
        # Unanswered attempts back off with jitter, reset by an accepted lease,
        # never beyond a heartbeat interval: a longer wait left an agent out of a new
        # leader's one-lease take-office grace (test_ha, kill -9 of the leader).
        base = settings.reconnect_backoff_base
        cap = max(base, min(settings.reconnect_backoff_cap, settings.heartbeat_interval))
        self.reconnect = Backoff(reconnect or BackoffPolicy(base, cap), rng)
        self.log = log
        self.identity = identity
        self.lease_expire_time = 0
        self.server_id = identity.server_id if identity else 0
        self.rs_server_status: obrpc_pb2.RsServerStatus.ValueType = obrpc_pb2.RSS_INVALID
        self.start_service_time = 0
        self.serving = False
        self.registered = False
        self.accepted_count = 0
        self.refused_count = 0
        self.last_accepted_rs = ""
        self.last_refusal: ObError | None = None
        # Refusals by reason (the RS's error name, or why this agent refused the answer):
        # ``ob_agent_lease_renewals_refused_total``.
        self.refusals: dict[str, int] = {}
        # The cluster version the last RS to answer said, as told ("" from 0.1.0: the oldest).
        self.cluster_version = releases.oldest()

        self._seq = 0
        self.commands = AppliedCommands()  # reported with every request
        # Refusals in a row that back off (reset by an accepted lease), and the rate limiter
        # of the warnings that would repeat every round.
        self.refusals_in_row = 0
        # The last of them is one a statement lifts (a shorter cap: refusal_backoff).
        self._lifted_by_statement = False
        self.repeat_log = RateLimitedLog(log, clock, REPEAT_LOG_US)
        self._heartbeat_now = False
        self._lease_lapse_logged = False
        self._stop: asyncio.Event | None = None
        # Set by the leader's heartbeat request: ends the wait between lease rounds (run()).
        self._wake: asyncio.Event | None = None
        self._conn: LeaseStream | None = None

    @property
    def highest_epoch(self) -> int:
        """The epoch of the highest fencing token obeyed (:attr:`tokens`)."""
        return self.tokens.highest.epoch

    @property
    def server(self) -> str:
        """This server's ``ip:port``."""
        return self._address.server

    def mark_serving(self) -> None:
        """The agent's gRPC server is up: the next accepted lease starts service."""
        self.serving = True

    # ------------------------------------------------------------------ lease decisions

    def build_lease_request(self, stopping: bool = False) -> obrpc_pb2.LeaseRequest:
        """The next ``LeaseRequest`` (docs/design/leases.md); every call takes a new ``seq``.
        ``current_server_time`` is ``clock.now_us()``; ``rs_epoch`` / ``rs_incarnation`` the
        highest fencing token obeyed; ``cluster_id`` / ``server_id`` the kept identity's or
        "" / 0; ``server_status`` 0x1 on a failing disk (| ``releases.stopping_bit`` when
        ``stopping``); ``replicas``; the lag fields."""
        self._seq += 1
        token = self.tokens.highest
        req = obrpc_pb2.LeaseRequest(
            version=LEASE_REQUEST_VERSION,
            zone=self.settings.zone,
            server=self.server,
            sql_port=self.settings.sql_port,
            build_version=self.settings.build_version,
            start_service_time=self.start_service_time,
            current_server_time=self.clock.now_us(),
            server_status=self._disk.server_status
            | (releases.stopping_bit(self.cluster_version) if stopping else 0),
            rs_epoch=token.epoch,
            rs_incarnation=token.incarnation,
            cluster_id=self.identity.cluster_id if self.identity else "",
            server_id=self.identity.server_id if self.identity else 0,
            seq=self._seq,
            revocation_version=self.revoked.version,
            applied_command_seq=self.commands.highest,
            disk_probe_latency_us=self._disk.probe_latency_us,
        )
        req.resource_info.CopyFrom(self._resources.info)
        self._replicas.report_into(req)
        return req

    def handle_response(self, resp: obrpc_pb2.LeaseResponse, rs_addr: str) -> bool:
        """Accept or refuse one ``LeaseResponse`` from the RS at ``rs_addr``; True = accepted.

        Refused, in this order: an in-band error (``error.code != 0``; a ``leader_hint``
        becomes the next address to try); ``heartbeat_expire_time <= now``; a ``cluster_id``
        other than the kept identity's (logged at ERROR: a server never joins another
        cluster); a fencing token ``(rs_epoch, rs_incarnation)`` that does not follow the
        highest obeyed (:func:`obcommon.fencing.refusal`: a deposed RS, or two with one epoch).
        Tokens are only learnt from accepted responses (and kept on disk before the answer
        is acted on): a refusal, or an RS of another cluster, must not be able to fence our
        own RS out.

        A ``server_id`` other than the kept identity's is refused too (it is
        logged at ERROR, rate-limited; service never starts).

        On acceptance: record the epoch, ``lease_expire_time``, ``server_id``,
        ``rs_server_status``, the RS list and the copy bandwidth limit
        (``migration_max_bytes_per_second``: it rides on the lease response
        because that reaches every server every ``heartbeat_interval`` whether or not it
        copies, so a change reaches copies already running within a heartbeat; a field of
        ApplyReplicas would only reach a server when it is handed a new copy); write the identity file on the first response
        carrying ``server_id > 0`` and a ``cluster_id`` (a failed write refuses); once the
        identity exists and the gRPC server is up, set ``start_service_time = now`` (once per
        process) and ask for the next heartbeat at once. Never raises.
        """
        now = self.clock.now_us()
        err = error_from_proto(resp.error)
        if err is not None:
            return self._refuse_error(err, resp, rs_addr)
        if resp.heartbeat_expire_time <= now:
            return self._refuse(
                rs_addr,
                "expired_lease",
                f"heartbeat_expire_time {resp.heartbeat_expire_time} is not after now {now}",
            )
        if self.identity is not None and resp.cluster_id != self.identity.cluster_id:
            self.log.error(
                "lease from %s refused: that RS serves cluster %r but this server belongs to "
                "cluster %r (server_id %d); it must never join another cluster",
                rs_addr,
                resp.cluster_id,
                self.identity.cluster_id,
                self.identity.server_id,
            )
            self._count_refusal("other_cluster")
            self.registered = False
            return False
        token = FenceToken(resp.rs_epoch, resp.rs_incarnation)
        why = self.tokens.judge(token)
        if why is not None:
            return self._refuse(rs_addr, "stale_epoch", why)
        if self.identity is None and resp.server_id > 0 and resp.cluster_id:
            ident = ClusterIdentity(
                resp.cluster_id, resp.server_id, self.settings.zone, self.server
            )
            try:
                path = write_identity(self.data_dir, ident)
            except (OSError, ValueError) as e:
                self.log.error(
                    "lease from %s refused: cannot write the cluster identity: %s", rs_addr, e
                )
                self._count_refusal("identity_write_failed")
                self.registered = False
                return False
            self.identity = ident
            self.log.info(
                "joined cluster %s as server_id %d (identity written to %s)",
                ident.cluster_id,
                ident.server_id,
                path,
            )
        elif (
            self.identity is not None
            and resp.server_id
            and resp.server_id != self.identity.server_id
        ):
            # Another server's data directory, or this ip:port deleted and added again
            #: serving this directory's replicas as that server would
            # mix two servers' data.
            self._count_refusal("other_server_id")
            self.registered = False
            self.refusals_in_row += 1
            self._lifted_by_statement = False
            self.repeat_log.log(
                logging.ERROR,
                "server_id",
                "lease from %s refused: the RS has this server as server_id %d but its data "
                "directory %s belongs to server_id %d; not serving it (restore this "
                "server's own data directory, or DELETE SERVER then ADD SERVER it again "
                "with an empty one)",
                rs_addr,
                resp.server_id,
                self.data_dir,
                self.identity.server_id,
            )
            return False

        try:
            self.tokens.obey(token)
        except OSError as e:
            self.log.error("lease from %s refused: cannot keep its fencing token: %s", rs_addr, e)
            self._count_refusal("token_write_failed")
            self.registered = False
            return False
        self.lease_expire_time = resp.lease_expire_time or resp.heartbeat_expire_time
        self.cluster_version = releases.parse(resp.cluster_version) or releases.oldest()
        if resp.server_id > 0:
            self.server_id = resp.server_id
        if resp.rs_server_status != self.rs_server_status:
            self.log.info(
                "RS %s reports this server %s (was %s)",
                rs_addr,
                obrpc_pb2.RsServerStatus.Name(resp.rs_server_status),
                obrpc_pb2.RsServerStatus.Name(self.rs_server_status),
            )
            self.rs_server_status = resp.rs_server_status
        self.reconnect.reset()
        self.rs.adopt(resp.rs_list)
        if resp.revocation_version != self.revoked.version:
            # The RS sent its whole list because our version is another.
            self.revoked.replace(resp.revoked_serials)
        if self._copy_rate is not None and self._copy_rate.set_rate(
            resp.migration_max_bytes_per_second
        ):
            self.log.info(
                "copy bandwidth limit from RS %s: %s",
                rs_addr,
                f"{resp.migration_max_bytes_per_second} bytes/s"
                if resp.migration_max_bytes_per_second > 0
                else "unlimited",
            )
        if self._params is not None:
            self._params.apply(resp.parameters)
        self.log.debug("lease renewed by %s until %d", rs_addr, self.lease_expire_time)
        if not self.registered:
            self.log.info(
                "lease granted by %s: server_id %d, rs_epoch %d, lease expires at %d",
                rs_addr,
                self.server_id,
                resp.rs_epoch,
                self.lease_expire_time,
            )
        if self.refusals_in_row:
            self.log.info("lease accepted by %s after %d refusals", rs_addr, self.refusals_in_row)
        self.refusals_in_row = 0
        self.repeat_log.clear()
        self.registered = True
        self.accepted_count += 1
        self.last_accepted_rs = rs_addr
        self._lease_lapse_logged = False
        if self.start_service_time == 0 and self.identity is not None and self.serving:
            self.start_service_time = self.clock.now_us()
            self._heartbeat_now = True
            self.log.info("start service at %d", self.start_service_time)
        return True

    def _count_refusal(self, reason: str) -> None:
        self.refused_count += 1
        self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def _refuse_error(self, err: ObError, resp: obrpc_pb2.LeaseResponse, rs_addr: str) -> bool:
        self._count_refusal(err.name)
        self.registered = False
        self.last_refusal = err
        if err.name not in NO_BACKOFF:
            self.refusals_in_row += 1
            self._lifted_by_statement = err.name in LIFTED_BY_STATEMENT
        self.repeat_log.warning(
            "refused",
            "lease refused by %s: %s",
            rs_addr,
            err.to_sql_text(),
            extra={"rs": rs_addr, "reason": err.name},
        )
        hint = resp.leader_hint.strip()
        if hint and hint != rs_addr:
            try:
                host, port = parse_host_port(hint)
            except ValueError:
                self.log.warning("ignoring malformed leader_hint %r from %s", hint, rs_addr)
            else:
                self.rs.prefer(f"{host}:{port}")
                self.log.info("trying leader hint %s:%d next", host, port)
        return False

    def _refuse(self, rs_addr: str, reason: str, why: str) -> bool:
        self._count_refusal(reason)
        self.registered = False
        self.log.warning("lease response from %s refused: %s", rs_addr, why)
        return False

    def retry_delay_us(self) -> int:
        """Microseconds to wait before the next lease request after a refusal:
        :func:`observer_agent.refusal_backoff.refusal_delay_us` of ``heartbeat_interval`` and
        the refusals in a row (``heartbeat_interval`` while none backs off; doubling up to four
        intervals after a refusal a statement lifts, up to a minute after any other;
        jittered). An accepted lease, or the leader's heartbeat request, resets the count."""
        return refusal_delay_us(
            self.settings.heartbeat_interval,
            self.refusals_in_row,
            self._lifted_by_statement,
            self._rng,
        )

    def heartbeat_requested(self, token: FenceToken) -> bool:
        """The RS holding fencing token ``token`` asked for a heartbeat
        (``ObserverService.RequestHeartbeat``: after ADD SERVER, take office, CANCEL DELETE).

        When :meth:`obcommon.fencing.refusal` lets ``token`` through (the highest obeyed or
        above it) and its epoch is a leader's (> 0), the RS asking is the one this agent
        obeys, or a newer one: the refusals in a row are forgotten and, unless the lease is
        being renewed already, the wait before the next lease round ends now (:meth:`run`),
        so the lease starts at once instead of after a backoff of up to a minute (OceanBase's
        observer likewise takes the heartbeat of an RS of a new enough epoch as the master
        RS's, ``ObHeartbeatHandler::handle_heartbeat`` in src/observer/ob_heartbeat_handler.cpp,
        and refuses a lower epoch with ``OB_RS_NOT_MASTER``). Any other token (a deposed RS,
        another incarnation of the same epoch, an absurd jump, no epoch) changes nothing and
        is not obeyed either: only a lease answer makes a token obeyed. Returns True when
        ``token`` was let through. Never raises."""
        if token.epoch <= 0:
            return False  # tools and tests ask without a token: answered, nothing more
        why = self.tokens.judge(token)
        if why is not None:
            self.repeat_log.log(
                logging.INFO, "stale heartbeat request", "heartbeat request ignored: %s", why
            )
            return False
        if self.registered:
            return True
        self.repeat_log.log(
            logging.INFO,
            "backoff ended",
            "heartbeat requested by the root service of %s: ending the backoff after %d "
            "refusals, asking for a lease now",
            token,
            self.refusals_in_row,
        )
        self.refusals_in_row = 0
        if self._wake is not None:
            self._wake.set()
        return True

    def consume_heartbeat_now(self) -> bool:
        """True once after an event that should be reported without waiting a full interval
        (start of service)."""
        now, self._heartbeat_now = self._heartbeat_now, False
        return now

    def forget_registration(self) -> None:
        """The agent stopped: no longer registered (the lease itself is kept)."""
        self.registered = False
