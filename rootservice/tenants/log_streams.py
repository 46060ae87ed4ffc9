"""Log streams and their replicas, as the RS sees them (SPEC.md sections 4, 7, 9).

The agents host the replicas; this module is the RS's side of them:

- **Reports.** Every lease request carries the agent's replicas (role, member list, term, log
  position, data size). :meth:`LsManager.report` keeps the latest report per server and each
  server's ``leader_cnt``; :meth:`LsManager.sync_meta` mirrors the reports into
  ``__all_ls_meta_table`` and ``__all_space_usage`` (only what changed, in one fenced
  transaction), like OceanBase's LS meta table updater.
- **Reconciler** (:meth:`LsManager.reconcile`, every ``ls_check_interval``): creates the
  replicas that ``__all_ls_status`` and ``__all_unit`` say should exist but no alive server
  reports, drops replicas of log streams that no longer exist, and elects or moves leaders:
  a leader must be alive, started (``stop_time == 0``), in service, in an ACTIVE zone, and is
  preferred in the tenant's primary zone (OceanBase's leader coordinator). A stopped or
  isolated server is never chosen.
- **Leader switch** (:meth:`LsManager.switch_leader`): the old leader resigns at a new term
  and reports its last log index; the new leader catches up to that index from it before it
  appends anything, so no entry the old leader wrote is lost; then the other members follow.
- **Pre-checks of DELETE / STOP / ISOLATE SERVER** (SPEC.md section 7) and the empty-server
  checker's questions (section 9).

Times are microseconds since the epoch; sizes bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from obcommon.errors import ObError, error_from_proto
from obcommon.proto import obrpc_pb2
from rootservice.db import ls_repo, space_usage_repo, tenant_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.ls_repo import LsStatus, MetaKey
from rootservice.db.space_usage_repo import SpaceKey
from rootservice.servers.status import ServerStatus
from rootservice.tenants.placement import UnitRequest, place_units

if TYPE_CHECKING:
    from rootservice.servers.manager import ServerManager, StopMode
    from rootservice.tenants.ddl import TenantManager

log = logging.getLogger(__name__)

LsKey = tuple[int, int]  # (tenant_id, ls_id)
FULL = "FULL"
# Poll period of the waits below (leaders moving off stopped servers, tenant creation).
POLL_S = 0.2


@dataclass(frozen=True)
class LsPlan:
    """What one log stream should look like: its members (server per zone, from the units of
    its unit group) and leader preferences."""

    key: LsKey
    members: dict[str, tuple[str, int]]  # server -> (zone, unit_id)
    zone_priority: dict[str, int]  # zone -> priority (0 best) from the tenant's primary zone
    primary_zone: str  # the LS's own preferred zone (__all_ls_status.primary_zone)


@dataclass
class Topology:
    """The desired layout read from ``__all_tenant`` / ``__all_ls_status`` / ``__all_unit``."""

    version: int = -1
    plans: dict[LsKey, LsPlan] = field(default_factory=dict)
    tenants: dict[int, tenant_repo.Tenant] = field(default_factory=dict)


@dataclass
class LsView:
    """One LS as the reports show it: ``replicas`` by server, the current ``leader`` (an
    alive server reporting LEADER at the highest term, or None) and that ``term``."""

    key: LsKey
    replicas: dict[str, obrpc_pb2.ReplicaInfo] = field(default_factory=dict)
    leader: str | None = None
    term: int = 0


class LsManager:
    """The RS's log-stream component (see the module docstring).

    ``manager`` gives the whitelist, store, clock, settings and agent client; ``tenants`` is
    set once the :class:`TenantManager` exists (it owns the cache version of the layout).
    """

    name = "ls_reconciler"

    def __init__(self, manager: ServerManager) -> None:
        """Start with no reports and an unread layout."""
        self.manager = manager
        self.store = manager.store
        self.clock = manager.clock
        self.settings = manager.settings
        self.agents = manager.agents
        self.metrics = manager.metrics
        self.tenants: TenantManager | None = None
        self._lock = threading.RLock()
        # server -> {LsKey: ReplicaInfo}; replaced whole by each report of that server.
        self._reports: dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]] = {}
        self._topology = Topology()
        # What __all_ls_meta_table / __all_space_usage hold (as far as this RS wrote or read).
        self._meta: dict[MetaKey, dict[str, Any]] | None = None
        self._space: dict[SpaceKey, tuple[int, int]] | None = None
        # One leader change at a time: a STOP statement and the reconciler must not both
        # move the same LS.
        self._switch_lock = threading.RLock()
        self._warned: set[tuple[str, LsKey]] = set()

    # --- reports ---------------------------------------------------------------------------

    def report(self, s: ServerStatus, replicas: Sequence[obrpc_pb2.ReplicaInfo]) -> None:
        """Record the replica report of an accepted heartbeat of ``s`` (called on the
        heartbeat path, under the whitelist lock: cheap, no I/O) and set its ``leader_cnt``."""
        if not replicas:
            s.leader_cnt = 0
            # Keep an empty report (not none) for a server that had replicas: the meta sync
            # must see that it reports and has dropped them.
            if self._reports.get(s.key):
                with self._lock:
                    self._reports[s.key] = {}
            return
        table = {(r.tenant_id, r.ls_id): r for r in replicas}
        s.leader_cnt = sum(1 for r in replicas if r.role == obrpc_pb2.LEADER)
        with self._lock:
            self._reports[s.key] = table

    def _adopt(self, server: str, resp: obrpc_pb2.ApplyReplicasResponse) -> None:
        """Take the full report an ApplyReplicas answer carries."""
        self.manager.with_server(server, lambda s: self.report(s, list(resp.replicas)))

    def forget_server(self, key: str) -> None:
        """Drop what ``key`` reported (it left the whitelist)."""
        with self._lock:
            self._reports.pop(key, None)

    def reports(self) -> dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]]:
        """A shallow copy of the latest reports by server."""
        with self._lock:
            return dict(self._reports)

    def clear(self) -> None:
        """Forget reports and caches (the RS steps down or reloads)."""
        with self._lock:
            self._reports.clear()
            self._topology = Topology()
            self._meta = None
            self._space = None

    # --- layout ----------------------------------------------------------------------------

    def topology(self, *, force: bool = False) -> Topology:
        """The desired layout, re-read when the tenant manager changed something (or
        ``force``). Raises ``ObError(OB_ERR_SYS)`` when the database fails."""
        version = self.tenants.version if self.tenants is not None else 0
        with self._lock:
            if not force and self._topology.version == version:
                return self._topology
        with self.store.read() as conn:
            tenants = {t.tenant_id: t for t in tenant_repo.load_tenants(conn).values()}
            ls_rows = ls_repo.load_ls_status(conn)
            units = unit_repo.load_units(conn)
            pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
        topo = build_topology(version, tenants, ls_rows, units, pools)
        with self._lock:
            self._topology = topo
        return topo

    def views(self) -> dict[LsKey, LsView]:
        """Every LS that the layout names or some server reports, with its current leader."""
        topo = self.topology()
        out: dict[LsKey, LsView] = {k: LsView(k) for k in topo.plans}
        for server, table in self.reports().items():
            s = self.manager.get(server)
            alive = s is not None and s.is_alive()
            for k, r in table.items():
                v = out.setdefault(k, LsView(k))
                v.replicas[server] = r
                if alive and r.role == obrpc_pb2.LEADER and r.term >= v.term:
                    v.leader, v.term = server, r.term
                v.term = max(v.term, r.term)
        for v in out.values():
            if v.leader is not None and v.replicas[v.leader].term != v.term:
                v.leader = None  # a newer term exists: that leader was deposed
        return out

    # --- health of a server as a replica host -------------------------------------------

    def _can_lead(self, server: str, exclude: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
        s = self.manager.get(server)
        return (
            s is not None
            and server not in exclude
            and s.is_alive()
            and not s.is_stopped()
            and s.start_service_time > 0
            and self.manager.zones.is_active(s.zone)
        )

    def _healthy_member(
        self, server: str, r: obrpc_pb2.ReplicaInfo | None, exclude: set[str]
    ) -> bool:
        """Alive, started, in service, zone ACTIVE, not being stopped, replica in service
        (the members that count for STOP's majority, SPEC.md section 7)."""
        return r is not None and r.in_service and self._can_lead(server, exclude)

    # --- applying desired state to agents ------------------------------------------------

    def _spec(
        self,
        plan: LsPlan,
        server: str,
        leader: str,
        term: int,
        catch_up_index: int = 0,
        catch_up_from: str = "",
        *,
        members: Sequence[str] | None = None,
        copy_from: str = "",
    ) -> obrpc_pb2.ReplicaSpec:
        members = sorted(members if members is not None else plan.members)
        unit_id = plan.members[server][1] if server in plan.members else 0
        if not unit_id:
            # A replica leaving (its unit moved): keep the unit id it reported.
            r = self.reports().get(server, {}).get(plan.key)
            unit_id = r.unit_id if r is not None else 0
        return obrpc_pb2.ReplicaSpec(
            tenant_id=plan.key[0],
            ls_id=plan.key[1],
            unit_id=unit_id,
            replica_type=FULL,
            member_list=members,
            paxos_replica_number=len(members),
            leader=leader,
            term=term,
            catch_up_index=catch_up_index,
            catch_up_from=catch_up_from,
            copy_from=copy_from,
        )

    def members(self, plan: LsPlan, view: LsView) -> list[str]:
        """The LS's effective Paxos members: its leader's member list, else that of the
        replica at the highest term, else the planned members (before any replica exists).
        During a migration they differ from ``plan.members`` until the membership change."""
        if view.leader is not None:
            return sorted(view.replicas[view.leader].member_list)
        best = max(view.replicas.values(), key=lambda r: r.term, default=None)
        if best is not None and best.member_list:
            return sorted(best.member_list)
        return sorted(plan.members)

    def _zone(self, plan: LsPlan, server: str) -> str:
        s = self.manager.get(server)
        if s is not None:
            return s.zone
        return plan.members.get(server, ("", 0))[0]

    def _apply(
        self,
        server: str,
        upsert: Iterable[obrpc_pb2.ReplicaSpec] = (),
        drop: Iterable[LsKey] = (),
        timeout_us: int | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """One ApplyReplicas call; adopts the report it returns. Raises ``ObError``
        (OB_SERVER_CONNECTION_ERROR, or the agent's own refusal)."""
        req = obrpc_pb2.ApplyReplicasRequest(rs_epoch=self.store.epoch)
        req.upsert.extend(upsert)
        for t, ls in drop:
            req.drop.append(obrpc_pb2.ReplicaKey(tenant_id=t, ls_id=ls))
        resp = self.agents.apply_replicas(server, req, timeout_us)
        self._adopt(server, resp)
        err = error_from_proto(resp.error)
        if err is not None:
            raise err
        return resp

    def _apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        """ApplyReplicas on several servers in parallel; returns the failures by server."""
        drops = drops or {}
        servers = sorted(set(work) | set(drops))
        failures: dict[str, ObError] = {}
        if not servers:
            return failures

        def one(server: str) -> None:
            try:
                self._apply(server, work.get(server, []), drops.get(server, []))
            except ObError as e:
                failures[server] = e

        with ThreadPoolExecutor(
            max_workers=min(16, len(servers)), thread_name_prefix="rs-apply"
        ) as pool:
            list(pool.map(one, servers))
        return failures

    def apply(
        self, server: str, upsert: Iterable[obrpc_pb2.ReplicaSpec] = (), drop: Iterable[LsKey] = ()
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """Public form of one ApplyReplicas call (see :meth:`_apply`). Raises ``ObError``."""
        return self._apply(server, upsert, drop)

    def apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        """Public form of :meth:`_apply_many`: failures by server."""
        return self._apply_many(work, drops)

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        """The spec that makes ``dest`` build its replica of the LS by copying from ``src``:
        it follows the current leader at the current term and is not yet a member (the
        member change comes once it is in service and in sync)."""
        return self._spec(
            plan,
            dest,
            view.leader or "",
            view.term,
            members=self.members(plan, view),
            copy_from=src,
        )

    def forget_meta(self) -> None:
        """Re-read ``__all_ls_meta_table`` at the next sync (someone else deleted rows)."""
        with self._lock:
            self._meta = None
            self._space = None

    # --- creating and dropping a tenant's replicas ---------------------------------------

    def create_tenant_replicas(self, tenant_id: int) -> None:
        """Tell the agents to create every replica of ``tenant_id`` (term 1, leader in the
        primary zone), then wait up to ``tenant_create_timeout`` until each LS has a leader.
        Raises ``ObError(OB_TIMEOUT)`` naming the log streams still without one."""
        topo = self.topology(force=True)
        plans = [p for k, p in topo.plans.items() if k[0] == tenant_id]
        work: dict[str, list[obrpc_pb2.ReplicaSpec]] = {}
        for plan in plans:
            leader = self._choose_leader(plan, LsView(plan.key), set(), require_report=False)
            for server in plan.members:
                work.setdefault(server, []).append(self._spec(plan, server, leader or "", 1))
        failures = self._apply_many(work)
        for server, e in failures.items():
            log.warning("creating replicas of tenant %d on %s failed: %s", tenant_id, server, e)
        deadline = self.clock.now_us() + self.settings.tenant_create_timeout
        missing: list[LsKey] = []
        for _ in range(100_000):
            views = self.views()
            missing = [p.key for p in plans if views.get(p.key, LsView(p.key)).leader is None]
            if not missing or self.clock.now_us() >= deadline:
                break
            self.reconcile(only=set(missing))
            self.manager.sleep(POLL_S)
        if missing:
            raise ObError(
                "OB_TIMEOUT",
                detail=(
                    f"tenant {tenant_id} was created, but log stream(s) "
                    f"{', '.join(str(k[1]) for k in missing[:10])} have no leader yet; "
                    "the root service keeps creating them"
                ),
            )

    def drop_tenant_replicas(self, tenant_id: int) -> None:
        """Tell every server reporting a replica of ``tenant_id`` to drop it (best effort:
        the reconciler drops what is left)."""
        self.topology(force=True)
        drops: dict[str, list[LsKey]] = {}
        for server, table in self.reports().items():
            for k in table:
                if k[0] == tenant_id:
                    drops.setdefault(server, []).append(k)
        for server, e in self._apply_many({}, drops).items():
            log.warning("dropping replicas of tenant %d on %s failed: %s", tenant_id, server, e)

    # --- leaders -----------------------------------------------------------------------------

    def _choose_leader(
        self, plan: LsPlan, view: LsView, exclude: set[str], *, require_report: bool = True
    ) -> str | None:
        """The best leader candidate among the plan's members: able to lead (alive, started,
        in service, zone ACTIVE, not in ``exclude``), replica reported in service (unless
        ``require_report`` is False, at creation), ordered by tenant primary-zone priority,
        the LS's own primary zone, then the longest log, then address."""

        def rank(server: str) -> tuple[int, int, int, int, str]:
            zone = self._zone(plan, server)
            r = view.replicas.get(server)
            s = self.manager.get(server)
            return (
                # a replica migrating away (its unit moved) or on a DELETING server leads
                # only when nothing else can
                0
                if server in plan.members and s is not None and s.admin_status.value == "NORMAL"
                else 1,
                plan.zone_priority.get(zone, 99),
                0 if zone == plan.primary_zone else 1,
                -(r.log_end_index if r is not None else 0),
                server,
            )

        candidates = [
            m
            for m in (self.members(plan, view) if require_report else plan.members)
            if self._can_lead(m, exclude)
            and (not require_report or (m in view.replicas and view.replicas[m].in_service))
        ]
        if not candidates:
            return None
        return min(candidates, key=rank)

    def switch_leader(self, key: LsKey, new_leader: str, reason: str) -> None:
        """Make ``new_leader`` the leader of LS ``key`` at a new term (SPEC.md section 7's
        "leaders move off"; OceanBase's ``ALTER SYSTEM SWITCH REPLICA LEADER``).

        The old leader (if alive) resigns first and reports its last log index; the new
        leader fetches the log up to that index from it before appending; the remaining
        members then follow the new leader. Raises OB_ENTRY_NOT_EXIST (no such LS or the
        server is not a member), OB_OP_NOT_ALLOW (the server cannot lead: stopped, not alive,
        not in service), OB_SERVER_CONNECTION_ERROR / OB_TIMEOUT from the agents; on failure
        the old leader is reinstated when it can still lead."""
        with self._switch_lock:
            topo = self.topology()
            plan = topo.plans.get(key)
            if plan is None:
                raise ObError("OB_ENTRY_NOT_EXIST", f"log stream {key[1]} of tenant {key[0]}")
            view = self.views().get(key, LsView(key))
            if new_leader not in self.members(plan, view):
                raise ObError(
                    "OB_ENTRY_NOT_EXIST",
                    f"server '{new_leader}' is not a member of log stream {key[1]} of tenant {key[0]}",
                )
            r = view.replicas.get(new_leader)
            if not self._can_lead(new_leader) or r is None or not r.in_service:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"server '{new_leader}' leading log stream {key[1]} (it is stopped, not "
                    "alive or its replica is not in service)",
                )
            if view.leader == new_leader:
                return
            self._switch(plan, view, new_leader, reason)

    def _switch(self, plan: LsPlan, view: LsView, new_leader: str, reason: str) -> None:
        term = view.term + 1
        old = view.leader
        members = self.members(plan, view)
        catch_up_index, catch_up_from = 0, ""
        if old is not None and old != new_leader:
            try:
                resp = self._apply(old, [self._spec(plan, old, new_leader, term, members=members)])
                for r in resp.replicas:
                    if (r.tenant_id, r.ls_id) == plan.key:
                        catch_up_index, catch_up_from = r.log_end_index, old
            except ObError as e:
                # An unreachable old leader cannot append either (its followers no longer
                # take its entries at the new term): take over from the longest member log.
                log.warning("LS %s: old leader %s did not resign: %s", plan.key, old, e)
        try:
            self._apply(
                new_leader,
                [
                    self._spec(
                        plan,
                        new_leader,
                        new_leader,
                        term,
                        catch_up_index,
                        catch_up_from,
                        members=members,
                    )
                ],
                timeout_us=3 * self.settings.rpc_timeout,
            )
        except ObError:
            if old is not None and old != new_leader and self._can_lead(old):
                try:
                    self._apply(old, [self._spec(plan, old, old, term + 1, members=members)])
                except ObError as e2:
                    log.warning("LS %s: reinstating leader %s failed: %s", plan.key, old, e2)
            raise
        # Everyone else that hosts the LS (members and replicas being built) follows.
        others = {
            m: [self._spec(plan, m, new_leader, term, members=members)]
            for m in sorted(set(members) | set(view.replicas))
            if m != new_leader
            and m != old
            and (s := self.manager.get(m)) is not None
            and s.is_alive()
        }
        for server, err in self._apply_many(others).items():
            log.info("LS %s: member %s will learn the new leader later: %s", plan.key, server, err)
        self.metrics.inc("leader_switches_total")
        now = self.clock.now_us()
        self.manager.persist.add_event(
            Event(
                now,
                "leader_coordinator",
                "switch_leader",
                (
                    ("tenant_id", plan.key[0]),
                    ("ls_id", plan.key[1]),
                    ("from", old or ""),
                    ("to", new_leader),
                    ("term", term),
                    ("reason", reason),
                ),
            )
        )
        log.info(
            "LS %d.%d: leader %s -> %s at term %d (%s)",
            plan.key[0],
            plan.key[1],
            old or "none",
            new_leader,
            term,
            reason,
        )

    # --- the reconciler ------------------------------------------------------------------

    def run_once(self) -> int:
        """One reconciler round (the scheduled task): see :meth:`reconcile`."""
        return self.reconcile()

    def reconcile(self, only: set[LsKey] | None = None) -> int:
        """Create missing replicas on alive servers, drop replicas of log streams that no
        longer exist, and elect or move leaders (only the log streams in ``only`` when
        given). Returns the number of actions taken. Does nothing while not in service."""
        if not self.manager.term.in_service:
            return 0
        topo = self.topology()
        views = self.views()
        actions = 0
        create: dict[str, list[obrpc_pb2.ReplicaSpec]] = {}
        drops: dict[str, list[LsKey]] = {}
        for key, view in views.items():
            if only is not None and key not in only:
                continue
            plan = topo.plans.get(key)
            if plan is None:
                for server in view.replicas:
                    s = self.manager.get(server)
                    if s is not None and s.is_alive():
                        drops.setdefault(server, []).append(key)
                continue
            if view.replicas:
                # The LS exists: a missing replica is built by copying (disaster recovery,
                # rootservice.balancer.manager), never generated afresh.
                continue
            for server in plan.members:
                s = self.manager.get(server)
                if s is None or not s.is_alive():
                    continue
                create.setdefault(server, []).append(
                    self._spec(plan, server, view.leader or "", view.term)
                )
        failures = self._apply_many(create, drops)
        actions += sum(len(v) for v in create.values()) + sum(len(v) for v in drops.values())
        for server, e in failures.items():
            self._warn_once(server, (0, 0), f"applying replicas on {server} failed: {e}")
        if create or drops:
            views = self.views()
        for key, plan in topo.plans.items():
            if only is not None and key not in only:
                continue
            view = views.get(key, LsView(key))
            actions += self._coordinate(plan, view)
        if actions:
            views = self.views()
        for key, plan in topo.plans.items():
            if only is not None and key not in only:
                continue
            actions += self._complete_membership(plan, views.get(key, LsView(key)))
        return actions

    def _complete_membership(self, plan: LsPlan, view: LsView) -> int:
        """The last steps of a replica migration (SPEC.md section 9, disaster recovery):
        once every planned member that is not yet a Paxos member hosts a replica that is in
        service and whose log is in sync, move leadership off leaving members, make the
        planned members the member list (same term), and drop the leaving replicas on the
        servers that are alive (the rows of dead ones go at the next meta sync). Returns 1
        when it changed something."""
        if view.leader is None:
            return 0
        members = self.members(plan, view)
        desired = sorted(plan.members)
        if members == desired:
            return 0
        joining = [m for m in desired if m not in members]
        leaving = [m for m in members if m not in desired]
        for m in joining:
            r = view.replicas.get(m)
            s = self.manager.get(m)
            if r is None or not r.in_service or s is None or not s.is_alive():
                return 0
            if not self._in_sync(view, m):
                return 0
        if view.leader in leaving:
            best = self._choose_leader(plan, view, set(leaving))
            if best is None or best not in desired:
                return 0
            try:
                with self._switch_lock:
                    self._switch(plan, view, best, "the leader's replica migrates away")
            except ObError as e:
                self._warn_once(best, plan.key, f"LS {plan.key}: moving the leader off failed: {e}")
                return 0
            return 1
        work = {
            m: [self._spec(plan, m, view.leader, view.term, members=desired)]
            for m in sorted(set(desired) | set(leaving))
            if (s := self.manager.get(m)) is not None and s.is_alive() and m in view.replicas
        }
        # The leader learns the new member list first: it is the one that serves the log.
        try:
            self._apply(view.leader, work.pop(view.leader))
        except ObError as e:
            self._warn_once(view.leader, plan.key, f"LS {plan.key}: member change failed: {e}")
            return 0
        self._apply_many({m: w for m, w in work.items() if m not in leaving})
        drops = {m: [plan.key] for m in leaving if m in work}
        for server, err in self._apply_many({}, drops).items():
            log.info("LS %s: dropping the replica on %s later: %s", plan.key, server, err)
        now = self.clock.now_us()
        self.manager.persist.add_event(
            Event(
                now,
                "disaster_recovery",
                "change_member_list",
                (
                    ("tenant_id", plan.key[0]),
                    ("ls_id", plan.key[1]),
                    ("added", ",".join(joining)),
                    ("removed", ",".join(leaving)),
                    ("leader", view.leader),
                ),
            )
        )
        self.metrics.inc("member_changes_total")
        log.info("LS %d.%d: members %s -> %s", plan.key[0], plan.key[1], members, desired)
        return 1

    def _coordinate(self, plan: LsPlan, view: LsView, exclude: set[str] | None = None) -> int:
        """Elect a leader when there is none or it cannot lead; move it to a better zone when
        the current one is not in the tenant's first primary-zone priority. Returns 1 when a
        switch happened."""
        exclude = exclude or set()
        leader = view.leader
        members = self.members(plan, view)
        majority = len(members) // 2 + 1
        healthy = [m for m in members if self._healthy_member(m, view.replicas.get(m), exclude)]
        if leader is not None and self._can_lead(leader, exclude):
            best = self._choose_leader(plan, view, exclude)
            if best is None or best == leader:
                return 0
            cur_zone, best_zone = self._zone(plan, leader), self._zone(plan, best)
            leader_leaving = leader not in plan.members
            if not leader_leaving and plan.zone_priority.get(
                best_zone, 99
            ) >= plan.zone_priority.get(cur_zone, 99):
                return 0
            if best not in plan.members:
                return 0
            if not self._in_sync(view, best):
                return 0
            reason = (
                "the leader's replica migrates away"
                if leader_leaving
                else f"primary zone {best_zone}"
            )
        else:
            if len(healthy) < majority:
                self._warn_once(
                    "majority",
                    plan.key,
                    f"LS {plan.key[0]}.{plan.key[1]} has no leader and only {len(healthy)} of "
                    f"{len(members)} healthy members: waiting",
                )
                return 0
            best = self._choose_leader(plan, view, exclude)
            if best is None:
                return 0
            reason = "no leader" if leader is None else f"leader {leader} cannot lead"
        try:
            with self._switch_lock:
                self._switch(plan, view, best, reason)
            self._warned.discard(("majority", plan.key))
            return 1
        except ObError as e:
            self._warn_once(
                best, plan.key, f"LS {plan.key}: switching leader to {best} failed: {e}"
            )
            return 0

    def _warn_once(self, what: str, key: LsKey, msg: str) -> None:
        if (what, key) not in self._warned:
            self._warned.add((what, key))
            log.warning("%s", msg)

    def _in_sync(self, view: LsView, server: str) -> bool:
        leader = view.leader
        if leader is None or server == leader:
            return True
        lr, r = view.replicas.get(leader), view.replicas.get(server)
        if lr is None or r is None:
            return False
        return lr.log_end_ts - r.log_end_ts <= self.settings.ls_log_sync_threshold

    # --- __all_ls_meta_table / __all_space_usage ------------------------------------------

    def sync_meta(self) -> int:
        """Write the replica rows and space usage that changed since the last sync, in one
        fenced transaction. A server that is not alive keeps its rows, shown as FOLLOWER
        (it leads nothing while it does not heartbeat). Returns the rows written."""
        if not self.manager.term.in_service:
            return 0
        if self._meta is None or self._space is None:
            with self.store.read() as conn:
                self._meta = ls_repo.load_ls_meta(conn)
                self._space = space_usage_repo.load_space_usage(conn)
        meta, space = self._meta, self._space
        want: dict[MetaKey, dict[str, Any]] = {}
        reported_servers: set[tuple[str, int]] = set()
        usage: dict[SpaceKey, tuple[int, int]] = {}
        topo = self.topology()
        for server, table in self.reports().items():
            s = self.manager.get(server)
            # A server that does not heartbeat keeps its rows as they are (but for the
            # role and member-removal fixes below): its last report is not news.
            if s is None or not s.is_alive():
                continue
            reported_servers.add((s.ip, s.port))
            for (t, ls), r in table.items():
                if (t, ls) not in topo.plans:
                    continue
                role = (
                    ls_repo.ROLE_LEADER
                    if r.role == obrpc_pb2.LEADER and s.is_alive()
                    else ls_repo.ROLE_FOLLOWER
                )
                want[(t, ls, s.ip, s.port)] = {
                    "sql_port": s.sql_port,
                    "role": role,
                    "member_list": ",".join(sorted(r.member_list)),
                    "proposal_id": r.term,
                    "replica_status": "NORMAL" if r.in_service else "OFFLINE",
                    "unit_id": r.unit_id,
                    "zone": s.zone,
                    "paxos_replica_number": r.paxos_replica_number,
                    "data_size": r.data_size,
                    "required_size": r.required_size,
                }
                d, u = usage.get((t, s.ip, s.port), (0, 0))
                usage[(t, s.ip, s.port)] = (d + r.data_size, u + r.required_size)
        views = self.views()
        inserts, updates, deletes = {}, {}, []
        for k, v in want.items():
            cur = meta.get(k)
            if cur is None:
                inserts[k] = v
            elif cur != v:
                updates[k] = v
        for k, cur in meta.items():
            if k in want:
                continue
            s = self.manager.get(f"{k[2]}:{k[3]}")
            if (k[0], k[1]) not in topo.plans and topo.version >= 0:
                deletes.append(k)  # the tenant or LS is gone
            elif (k[2], k[3]) in reported_servers or s is None:
                # The server reports and no longer has it, or left the whitelist.
                if s is not None:
                    deletes.append(k)
            elif self._removed_member(views, topo, k):
                # DR's member-removal step: a dead replica that is no longer a Paxos member.
                deletes.append(k)
            elif cur["role"] == ls_repo.ROLE_LEADER and (s is None or not s.is_alive()):
                updates[k] = cur | {"role": ls_repo.ROLE_FOLLOWER}
        space_changes: dict[SpaceKey, tuple[int, int] | None] = {
            k: v for k, v in usage.items() if space.get(k) != v
        }
        for sk in space:
            if sk not in usage and (sk[1], sk[2]) in reported_servers:
                space_changes[sk] = None
        if not (inserts or updates or deletes or space_changes):
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            ls_repo.upsert_ls_meta(conn, inserts, updates, now)
            ls_repo.delete_ls_meta(conn, deletes)
            space_usage_repo.put_space_usage(conn, space_changes, now)
        meta.update(inserts)
        meta.update(updates)
        for k in deletes:
            meta.pop(k, None)
        for sk, sv in space_changes.items():
            if sv is None:
                space.pop(sk, None)
            else:
                space[sk] = sv
        return len(inserts) + len(updates) + len(deletes) + len(space_changes)

    def _removed_member(self, views: dict[LsKey, LsView], topo: Topology, k: MetaKey) -> bool:
        """The row ``k`` is on a server that is not alive and no longer a member of its LS,
        whose leader is known."""
        view = views.get((k[0], k[1]))
        plan = topo.plans.get((k[0], k[1]))
        if view is None or plan is None or view.leader is None:
            return False
        server = f"{k[2]}:{k[3]}"
        s = self.manager.get(server)
        if s is not None and s.is_alive():
            return False
        return server not in self.members(plan, view)

    # --- empty-server checker hooks (SPEC.md section 9) ---------------------------------

    def has_units(self, key: str) -> bool:
        """``key`` hosts a unit, or a unit is migrating away from it."""
        ip, _, port = key.rpartition(":")
        with self.store.read() as conn:
            return bool(unit_repo.units_on_server(conn, ip, int(port)))

    def has_replicas(self, key: str) -> bool:
        """Some LS leader has ``key`` in its member list, or ``__all_ls_meta_table`` has a
        replica on it."""
        for v in self.views().values():
            if v.leader is not None and key in v.replicas[v.leader].member_list:
                return True
        ip, _, port = key.rpartition(":")
        with self.store.read() as conn:
            return ls_repo.replicas_on_server(conn, ip, int(port)) > 0

    def all_ls_have_leader(self) -> bool:
        """Every LS of the layout has a leader."""
        views = self.views()
        return all(views.get(k, LsView(k)).leader is not None for k in self.topology().plans)

    def extra_deletes(self, conn: Any, ip: str, port: int) -> None:
        """Rows removed with a deleted server: its ``__all_space_usage``."""
        space_usage_repo.delete_space_usage_of_server(conn, ip, port)
        if self._space is not None:
            for k in [k for k in self._space if (k[1], k[2]) == (ip, port)]:
                self._space.pop(k, None)

    # --- pre-checks of DELETE / STOP / ISOLATE SERVER (SPEC.md section 7) ----------------

    def check_delete(self, targets: list[ServerStatus]) -> None:
        """DELETE SERVER: the other active servers of each zone can hold every unit of the
        deleted servers (CPU, memory, log disk, one unit per tenant and server), else
        OB_DELETE_SERVER_NOT_ALLOWED naming the unit and the resource short; every LS has a
        leader, else OB_OP_NOT_ALLOW naming the first LS without one."""
        assert self.tenants is not None
        keys = {s.key for s in targets}
        with self.store.read() as conn:
            rooms = self.tenants.server_rooms(conn, exclude_usable=keys)
            configs = {c.unit_config_id: c for c in unit_repo.load_unit_configs(conn).values()}
            pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
            units = [u for u in unit_repo.load_units(conn) if u.server in keys]
        from rootservice.tenants.ddl import affinity_of, demand_of

        requests = []
        by_key = {r.key: r for r in rooms}
        for u in units:
            pool = pools[u.resource_pool_id]
            d = demand_of(configs[pool.unit_config_id])
            aff = affinity_of(pool)
            by_key[u.server].release(d, aff)
            requests.append(UnitRequest(u.unit_id, u.zone, d, aff, frozenset(keys)))
        placement = place_units(requests, rooms)
        if placement.failures:
            f = placement.failures[0]
            u = next(x for x in units if x.unit_id == f.request.ref)
            raise ObError(
                "OB_DELETE_SERVER_NOT_ALLOWED",
                f"cannot delete server '{u.server}': unit {u.unit_id} has nowhere to go "
                f"({f.reason})",
            )
        views = self.views()
        for key in sorted(self.topology().plans):
            if views.get(key, LsView(key)).leader is None:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"delete server while log stream {key[1]} of tenant {key[0]} has no leader; it is",
                )

    def check_stop(self, targets: list[ServerStatus], mode: StopMode) -> None:
        """STOP / FORCE STOP SERVER (SPEC.md section 7; OceanBase's
        ``check_majority_and_log_in_sync_``): every LS with a member on the servers keeps a
        majority of members that are alive, started, in service and not being stopped, and
        (STOP only) a majority of members whose log is within ``ls_log_sync_threshold`` of
        the leader's. Fresh reports are requested from the members before each try; a
        failing check is retried for ``stop_server_check_timeout``, then OB_OP_NOT_ALLOW
        names the LS and what is short. ISOLATE runs :meth:`check_isolate` instead."""
        if mode == "ISOLATE":
            self.check_isolate(targets)
            return
        keys = {s.key for s in targets}
        deadline = self.clock.now_us() + self.settings.stop_server_check_timeout
        problem = ""
        for attempt in range(100_000):
            problem = self._stop_problem(keys, check_sync=mode == "STOP", refresh=True)
            if not problem:
                return
            if self.clock.now_us() >= deadline:
                break
            if attempt == 0:
                log.info("STOP SERVER %s waits: %s", ",".join(sorted(keys)), problem)
            self.manager.sleep(POLL_S * 2.5)
        raise ObError("OB_OP_NOT_ALLOW", f"stop server {','.join(sorted(keys))}: {problem}; it is")

    def _stop_problem(self, keys: set[str], *, check_sync: bool, refresh: bool) -> str:
        topo = self.topology()
        views0 = self.views()
        plans = [
            p
            for p in topo.plans.values()
            if keys & (set(p.members) | set(views0.get(p.key, LsView(p.key)).replicas))
        ]
        if not plans:
            return ""
        if refresh:
            hosts = {m for p in plans for m in p.members} | {
                m for p in plans for m in views0.get(p.key, LsView(p.key)).replicas
            }
            alive = [m for m in hosts if (s := self.manager.get(m)) is not None and s.is_alive()]
            self.manager.request_heartbeats(alive)
        views = self.views()
        for plan in sorted(plans, key=lambda p: p.key):
            view = views.get(plan.key, LsView(plan.key))
            t, ls = plan.key
            members = self.members(plan, view)
            majority = len(members) // 2 + 1
            healthy = [m for m in members if self._healthy_member(m, view.replicas.get(m), keys)]
            if len(healthy) < majority:
                return (
                    f"log stream {ls} of tenant {t} would keep {len(healthy)} of "
                    f"{len(members)} members in service (a majority needs {majority})"
                )
            if check_sync:
                if view.leader is None:
                    return f"log stream {ls} of tenant {t} has no leader to measure log sync"
                in_sync = [m for m in healthy if self._in_sync(view, m)]
                if len(in_sync) < majority:
                    lagging = [m for m in healthy if m not in in_sync]
                    lr = view.replicas[view.leader]
                    lags = ", ".join(
                        f"{m} {(lr.log_end_ts - view.replicas[m].log_end_ts) / 1e6:.1f}s behind"
                        for m in lagging
                    )
                    return (
                        f"log stream {ls} of tenant {t} has {len(in_sync)} of "
                        f"{len(members)} remaining members with the log in sync "
                        f"({lags}; threshold {self.settings.ls_log_sync_threshold / 1e6:g}s)"
                    )
        return ""

    def check_isolate(self, targets: list[ServerStatus]) -> None:
        """ISOLATE SERVER: refused with OB_OP_NOT_ALLOW when, with these servers stopped,
        every zone of some tenant's primary region would be stopped (a zone is stopped when it
        is not ACTIVE or has a stopped server). The primary region is the set of regions of
        the tenant's first-priority primary zones."""
        keys = {s.key for s in targets}
        stopped_zones = {z.zone for z in self.manager.zones.all() if not z.active}
        for s in self.manager.snapshot():
            if s.is_stopped() or s.key in keys:
                stopped_zones.add(s.zone)
        topo = self.topology()
        from rootservice.tenants.ddl import parse_primary_zone

        regions = {z.zone: z.region for z in self.manager.zones.all()}
        for t in topo.tenants.values():
            try:
                first = parse_primary_zone(t.primary_zone, t.zone_list)[0]
            except ObError:
                first = list(t.zone_list)
            region_set = {regions.get(z, "") for z in first}
            region_zones = [z for z in t.zone_list if regions.get(z, "") in region_set]
            if region_zones and all(z in stopped_zones for z in region_zones):
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"isolate server {','.join(sorted(keys))}: every zone of tenant "
                    f"{t.tenant_name}'s primary region {','.join(sorted(region_set))} "
                    f"({','.join(region_zones)}) would be stopped; it is",
                )

    def move_leaders_off(self, targets: Iterable[str]) -> None:
        """After STOP / FORCE STOP / ISOLATE: move every leader off ``targets`` and wait
        until their ``leader_cnt`` is 0 (fresh reports are requested each round), for up to
        ``leader_switch_timeout``. Raises OB_WAIT_LEADER_SWITCH_TIMEOUT naming the log streams
        still led from there (the servers stay stopped; the reconciler keeps moving them)."""
        keys = set(targets)
        deadline = self.clock.now_us() + self.settings.leader_switch_timeout
        stuck: list[LsKey] = []
        for _ in range(100_000):
            self.manager.request_heartbeats(
                [k for k in keys if (s := self.manager.get(k)) is not None and s.is_alive()]
            )
            counts = [
                s.leader_cnt
                for k in keys
                if (s := self.manager.get(k)) is not None and s.is_alive()
            ]
            if all(c <= 0 for c in counts):
                # Operators look at DBA_OB_LS_LOCATIONS right after the statement returns.
                try:
                    self.sync_meta()
                except ObError as e:
                    log.warning("__all_ls_meta_table sync after the leader moves failed: %s", e)
                return
            topo = self.topology()
            views = self.views()
            stuck = []
            for key, plan in sorted(topo.plans.items()):
                view = views.get(key, LsView(key))
                if view.leader in keys:
                    stuck.append(key)
                    self._coordinate(plan, view, exclude=keys)
            # Replicas the RS does not plan (another RS's leftovers) cannot be moved by it.
            if self.clock.now_us() >= deadline:
                break
            self.manager.sleep(POLL_S)
        raise ObError(
            "OB_WAIT_LEADER_SWITCH_TIMEOUT",
            detail=(
                f"log stream(s) {', '.join(f'{t}.{ls}' for t, ls in stuck[:10]) or '?'} "
                f"still led from {','.join(sorted(keys))}; the servers are stopped and leaders "
                "keep moving in the background"
            ),
        )


def build_topology(
    version: int,
    tenants: dict[int, tenant_repo.Tenant],
    ls_rows: list[LsStatus],
    units: list[unit_repo.Unit],
    pools: dict[int, unit_repo.ResourcePool],
) -> Topology:
    """The desired layout: for each LS, the server of the unit of its unit group in each
    zone of its tenant's pools (the i-th unit group of each pool, by unit_group_id order,
    serves the i-th unit group of the first pool)."""
    from rootservice.tenants.ddl import zone_priority

    topo = Topology(version=version, tenants=tenants)
    by_tenant_pool: dict[int, list[unit_repo.ResourcePool]] = {}
    for p in pools.values():
        if p.tenant_id != -1:
            by_tenant_pool.setdefault(p.tenant_id, []).append(p)
    units_by_pool: dict[int, list[unit_repo.Unit]] = {}
    for u in units:
        units_by_pool.setdefault(u.resource_pool_id, []).append(u)
    for tpools in by_tenant_pool.values():
        tpools.sort(key=lambda p: p.resource_pool_id)
    for row in ls_rows:
        tenant = tenants.get(row.tenant_id)
        tpools = by_tenant_pool.get(row.tenant_id, [])
        if tenant is None or not tpools:
            continue
        first_groups = sorted(
            {u.unit_group_id for u in units_by_pool.get(tpools[0].resource_pool_id, [])}
        )
        if row.unit_group_id not in first_groups:
            continue
        index = first_groups.index(row.unit_group_id)
        members: dict[str, tuple[str, int]] = {}
        for p in tpools:
            pu = units_by_pool.get(p.resource_pool_id, [])
            groups = sorted({u.unit_group_id for u in pu})
            if index >= len(groups):
                continue
            g = groups[index]
            for u in pu:
                if u.unit_group_id == g:
                    members[u.server] = (u.zone, u.unit_id)
        topo.plans[(row.tenant_id, row.ls_id)] = LsPlan(
            (row.tenant_id, row.ls_id),
            members,
            zone_priority(tenant.primary_zone, tenant.zone_list),
            row.primary_zone,
        )
    return topo
