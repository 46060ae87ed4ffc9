"""Replica reports and the log streams as they show (docs/design/servers.md and docs/design/migration.md).

Every lease request carries the agent's replicas (role, member list, term, log position,
data size). :class:`ReplicaReports` keeps the latest report per server and each server's
``leader_cnt``, and builds the :class:`LsView` of every LS from them: its replicas, its
current leader and term. :func:`effective_members` and :func:`in_sync` read one view.

Times are microseconds since the epoch; sizes bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from obcommon.bounds import MAX_TERM
from obcommon.proto import obrpc_pb2
from rootservice.metrics import Metrics
from rootservice.servers.status import AdminStatus, ServerStatus
from rootservice.tenants.ports import ReplicaMoves, ServerDirectory
from rootservice.tenants.topology import LayoutCache, LsPlan
from rootservice.tenants.vocabulary import LsKey


@dataclass
class LsView:
    """One LS as the reports show it: ``replicas`` by server, the current ``leader`` (an
    alive server reporting LEADER at the highest term, or None) and that ``term``. A
    replica reporting a term above 2^53 (``obcommon.bounds.MAX_TERM``) is listed but
    counts for neither."""

    key: LsKey
    replicas: dict[str, obrpc_pb2.ReplicaInfo] = field(default_factory=dict)
    leader: str | None = None
    term: int = 0


def effective_members(plan: LsPlan, view: LsView) -> list[str]:
    """The LS's effective Paxos members: its leader's member list, else that of the
    replica at the highest term, else the planned members (before any replica exists).
    During a migration they differ from ``plan.members`` until the membership change."""
    if view.leader is not None:
        return sorted(view.replicas[view.leader].member_list)
    best = max(view.replicas.values(), key=lambda r: r.term, default=None)
    if best is not None and best.member_list:
        return sorted(best.member_list)
    return sorted(plan.members)


def in_sync(view: LsView, server: str, threshold_us: int) -> bool:
    """``server``'s log is within ``threshold_us`` (``ls_log_sync_threshold``) of the
    leader's (the leader itself, and any member of a leaderless LS, count as in sync)."""
    leader = view.leader
    if leader is None or server == leader:
        return True
    lr, r = view.replicas.get(leader), view.replicas.get(server)
    if lr is None or r is None:
        return False
    return lr.log_end_ts - r.log_end_ts <= threshold_us


class ReplicaReports:
    """The latest replica report of every server and the views built from them.

    ``servers`` tells which reporting servers are alive; ``layout`` names the log streams
    that should exist (a view exists for each, reported or not); ``moves`` hears, from the
    reports, the steps of replica moves that let the next step run at once: a
    replica being built that is now in service (:meth:`ReplicaMoves.copy_built`), a DELETING
    server that reports fewer replicas than before (:meth:`ReplicaMoves.replica_dropped`).
    """

    def __init__(
        self, servers: ServerDirectory, layout: LayoutCache, moves: ReplicaMoves, metrics: Metrics
    ) -> None:
        """Start with no reports; ``metrics`` counts the reports ignored as older than an
        answer taken (``replica_reports_stale_total``)."""
        self.servers = servers
        self.layout = layout
        self.moves = moves
        self.metrics = metrics
        self._lock = threading.Lock()
        # server -> {LsKey: ReplicaInfo}; replaced whole by each report of that server.
        self._reports: dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]] = {}
        # Servers whose last report had a replica not in service: only their next report is
        # compared with it (the heartbeat path stays one pass over the replicas otherwise).
        self._building: set[str] = set()
        # server -> reports received from it since this RS took its term (a counter, not a
        # time: "has it reported since X" must not depend on how loaded the machine is).
        self._seq: dict[str, int] = {}
        # server -> (replicas_version, start_service_time) of the last ApplyReplicas answer
        # taken: a lease request the agent built before that answer (a lower version) may
        # arrive after it, carrying the state from before the command.
        self._adopted: dict[str, tuple[int, int]] = {}

    def report_seq(self, key: str) -> int:
        """How many reports ``key`` has sent to this RS (0 for none): a task that handed
        ``key`` something waits for this to grow by 2 (the report in flight when it sent may
        predate it) before reading its absence from the report as a refusal."""
        return self._seq.get(key, 0)

    def report(
        self,
        server: ServerStatus,
        replicas: Sequence[obrpc_pb2.ReplicaInfo],
        replicas_version: int = 0,
        /,
    ) -> None:
        """Record the replica report of an accepted heartbeat of ``server`` (called on the
        heartbeat path, under the whitelist lock: cheap, no I/O), set its ``leader_cnt`` and
        tell ``moves`` of a copy built or a replica dropped by a DELETING server.

        ``replicas_version`` is the number the agent gave the report (0: not numbered, an
        agent of release 0.1.0; always taken). A report numbered below the last
        ApplyReplicas answer taken (:meth:`adopt`) was built before that answer, so it is
        ignored: otherwise it would put back, say, a leader the answer had moved (the RS then
        saw no leader and raised the term again). The agent restarting (another
        ``start_service_time``: its numbers start again) or a report numbered at least the
        answer's ends that.
        """
        s = server
        if s.key in self._adopted:
            if self._stale(s, replicas_version):
                return
            del self._adopted[s.key]
        self._record(s, replicas)

    def adopt(
        self,
        server: ServerStatus,
        replicas: Sequence[obrpc_pb2.ReplicaInfo],
        replicas_version: int,
        start_service_time: int = 0,
        /,
    ) -> None:
        """Record the full report an ApplyReplicas answer of ``server`` carries, numbered
        ``replicas_version`` by the run of the agent that started service at
        ``start_service_time`` (0: not sent, an agent before 0.2.0: the run of its last lease
        request is assumed). A version of 0 (not numbered) holds nothing against later
        reports. Same rules as :meth:`report` otherwise; an answer from a run the RS has no
        lease request from yet (the agent restarted) is never judged by the previous run's
        numbers."""
        run = start_service_time or server.start_service_time
        if self._stale(server, replicas_version, run):
            return  # answers of two calls crossed: the other one's is newer
        if replicas_version > 0:
            self._adopted[server.key] = (replicas_version, run)
        self._record(server, replicas)

    def _stale(self, s: ServerStatus, replicas_version: int, run: int | None = None) -> bool:
        """Whether a report numbered ``replicas_version`` by the run of ``s`` that started
        service at ``run`` (default: the one of its last lease request) was built before
        the answer last adopted from that run (counted in ``replica_reports_stale_total``)."""
        mark = self._adopted.get(s.key)
        if run is None:
            run = s.start_service_time
        if mark is None or mark[1] != run or not 0 < replicas_version < mark[0]:
            return False
        self.metrics.inc("replica_reports_stale_total")
        return True

    def _record(self, s: ServerStatus, replicas: Sequence[obrpc_pb2.ReplicaInfo]) -> None:
        """The report of ``s`` taken: what :meth:`report` and :meth:`adopt` share."""
        old = self._reports.get(s.key)
        self._seq[s.key] = self._seq.get(s.key, 0) + 1
        if not replicas:
            s.leader_cnt = 0
            # Keep an empty report (not none) for a server that had replicas: the meta sync
            # must see that it reports and has dropped them.
            if old:
                with self._lock:
                    self._reports[s.key] = {}
                self._building.discard(s.key)
                if s.admin_status is AdminStatus.DELETING:
                    self.moves.replica_dropped(s.key)
            return
        table = {(r.tenant_id, r.ls_id): r for r in replicas}
        leaders, building = 0, False
        for r in replicas:
            leaders += r.role == obrpc_pb2.LEADER
            building = building or not r.in_service
        s.leader_cnt = leaders
        with self._lock:
            self._reports[s.key] = table
        if old is None:
            if building:
                self._building.add(s.key)
            return
        if s.key in self._building:
            if not building:
                self._building.discard(s.key)
            if any(
                not was.in_service and (now := table.get(k)) is not None and now.in_service
                for k, was in old.items()
            ):
                self.moves.copy_built(s.key)
        elif building:
            self._building.add(s.key)
        if s.admin_status is AdminStatus.DELETING and any(k not in table for k in old):
            self.moves.replica_dropped(s.key)

    def forget_server(self, key: str) -> None:
        """Drop what ``key`` reported (it left the whitelist)."""
        with self._lock:
            self._reports.pop(key, None)
        self._building.discard(key)
        self._seq.pop(key, None)
        self._adopted.pop(key, None)

    def reports(self) -> dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]]:
        """A shallow copy of the latest reports by server."""
        with self._lock:
            return dict(self._reports)

    def clear(self) -> None:
        """Forget every report (the RS steps down)."""
        with self._lock:
            self._reports.clear()
        self._building.clear()
        self._seq.clear()
        self._adopted.clear()

    def views(self) -> dict[LsKey, LsView]:
        """Every LS that the layout names or some server reports, with its current leader.
        Raises ``ObError(OB_ERR_SYS)`` when the layout cannot be read."""
        topo = self.layout.topology()
        out: dict[LsKey, LsView] = {k: LsView(k) for k in topo.plans}
        for server, table in self.reports().items():
            s = self.servers.get(server)
            alive = s is not None and s.is_alive()
            for k, r in table.items():
                v = out.setdefault(k, LsView(k))
                v.replicas[server] = r
                if r.term > MAX_TERM:
                    # Forged or corrupt (lease requests refuse it A report
                    # kept from before may still hold it): it neither leads nor sets the
                    # term, or `term + 1` of the next switch would overflow the protocol's
                    # int64 on every reconciler round.
                    continue
                if alive and r.role == obrpc_pb2.LEADER and r.term >= v.term:
                    v.leader, v.term = server, r.term
                v.term = max(v.term, r.term)
        for v in out.values():
            if v.leader is not None and v.replicas[v.leader].term != v.term:
                v.leader = None  # a newer term exists: that leader was deposed
        return out
