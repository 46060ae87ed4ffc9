"""Adding missing replicas: a log stream with fewer members than the zones of its units gets
a replica copied to its unit's server in each zone that has none, and says why while it
cannot (OceanBase's ``ObDRWorker::LocalityAlignment`` in
``src/rootserver/ob_disaster_recovery_worker.cpp``: the locality left once every replica of
``__all_ls_meta_table`` is matched becomes an "add replica" task to the tenant's unit in that
zone, shown with its comment in ``__all_virtual_ls_replica_task``).

The replica plan of the balancer (:mod:`rootservice.balancer.spark.replica_plan`) only moves
replicas that exist: it copies a replica whose ``__all_ls_meta_table`` row sits on another
server than its unit. A member that left the member list with its server (RECOVER LS,
FORCE DELETE SERVER) has no row any more, so nothing there brings it back. This module finds
those log streams from the layout and the reports (a zone of the LS's units with no member
in it) and turns each into a copy row of the same layout as the replica plan's, with no old
replica (``old_svr_*`` empty): the copies are handed out, limited, retried and watched by
:class:`rootservice.balancer.copy_tasks.CopyTasks`, and the reconciler's member change makes
the copy a member once it is in service and in sync
(:meth:`rootservice.tenants.reconciler.LsReconciler.reconcile`).

Visible: every LS short of replicas has an ``ADD_REPLICA`` row in ``__all_rootservice_job``
(``DBA_OB_ROOTSERVICE_JOBS``; ``extra_info`` names the LS, its members, the count wanted,
the copies in flight and why the others wait), SUCCESS once the LS has a member in every
zone of its units; an event ``disaster_recovery`` / ``add_replica_waiting`` is written once
per LS and reason. Times are microseconds since the epoch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from obcommon.addresses import parse_server
from obcommon.clock import Clock
from rootservice.balancer.planner import Row
from rootservice.balancer.ports import (
    EventSink,
    LsKey,
    LsPlan,
    LsView,
    ReplicaWork,
    Store,
    Whitelist,
)
from rootservice.db import job_repo
from rootservice.db.event_repo import Event
from rootservice.servers.status import AdminStatus

log = logging.getLogger(__name__)

JOB_TYPE = "ADD_REPLICA"
#: The ``reason`` of the copy rows (and of the ``add_replica`` events).
REASON_ADD = "add replica: the log stream has no member in the zone of its unit"


@dataclass(frozen=True)
class Shortage:
    """An LS with no member in some zone of its units: ``members`` (effective, sorted),
    ``wanted`` (the zones of its units), ``adds`` (zone -> the server a copy goes to) and
    ``waiting`` (zone -> why no copy can go there now)."""

    key: LsKey
    leader: str
    members: tuple[str, ...]
    wanted: int
    adds: Mapping[str, str]
    waiting: Mapping[str, str]

    def reason(self) -> str:
        """The waiting reasons in one line, by zone ("" when every zone gets a copy)."""
        return "; ".join(f"zone {z}: {why}" for z, why in sorted(self.waiting.items()))

    def info(self) -> str:
        """The ``extra_info`` of its ``ADD_REPLICA`` job (JSON)."""
        return json.dumps(
            {
                "tenant_id": self.key[0],
                "ls_id": self.key[1],
                "members": list(self.members),
                "replicas": len(self.members),
                "wanted": self.wanted,
                "copying_to": dict(sorted(self.adds.items())),
                "waiting": self.reason(),
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def _why_not(server: str, servers: Whitelist, unplaced: str) -> str:
    """Why no copy can go to ``server`` (the unit's server), or ``""`` when one can."""
    s = servers.get(server)
    if s is None:
        return f"the unit's server {server} left the whitelist"
    if s.admin_status is AdminStatus.DELETING or not s.is_alive():
        state = "being deleted" if s.admin_status is AdminStatus.DELETING else "not alive"
        room = f": {unplaced}" if unplaced else ""
        return f"the unit's server {server} is {state} and no server with room took the unit{room}"
    if s.is_stopped():
        return f"the unit's server {server} is stopped"
    return ""


def find_shortages(
    plans: Mapping[LsKey, LsPlan],
    views: Mapping[LsKey, LsView],
    members: Mapping[LsKey, list[str]],
    servers: Whitelist,
    unplaced: Mapping[int, str],
) -> list[Shortage]:
    """The log streams with a leader whose members cover fewer zones than their units
    (``members``: the effective member list by LS; ``unplaced``: unit id -> why the unit plan
    found no server for it). A zone's copy goes to its unit's server when that server is
    alive, not DELETING and not stopped; otherwise the zone waits, with the reason."""
    out: list[Shortage] = []
    for key in sorted(plans):
        plan, view = plans[key], views.get(key)
        if view is None or view.leader is None or not view.replicas:
            continue  # leaderless: elected first; not created yet: the reconciler's
        ms = members.get(key, [])
        covered = {z for m in ms if (s := servers.get(m)) is not None for z in (s.zone,)}
        adds: dict[str, str] = {}
        waiting: dict[str, str] = {}
        for server, (zone, unit_id) in sorted(plan.members.items()):
            if zone in covered or server in ms:
                continue
            why = _why_not(server, servers, unplaced.get(unit_id, ""))
            if why:
                waiting[zone] = why
            else:
                adds[zone] = server
        if adds or waiting:
            out.append(
                Shortage(key, view.leader, tuple(sorted(ms)), len(plan.members), adds, waiting)
            )
    return out


def copy_rows(shortages: list[Shortage]) -> list[Row]:
    """The copy rows (the replica plan's layout, no old replica) of ``shortages``: from the
    leader to each server a copy can go to (CopyTasks picks another source on a retry)."""
    rows: list[Row] = []
    for s in shortages:
        src_ip, src_port = parse_server(s.leader)
        for dest in s.adds.values():
            ip, port = parse_server(dest)
            rows.append(
                {
                    "tenant_id": s.key[0],
                    "ls_id": s.key[1],
                    "src_svr_ip": src_ip,
                    "src_svr_port": src_port,
                    "dest_svr_ip": ip,
                    "dest_svr_port": port,
                    "old_svr_ip": "",
                    "old_svr_port": 0,
                    "reason": REASON_ADD,
                }
            )
    return rows


class ReplicaAdds:
    """The shortages of the log streams, their copy rows, and the ``ADD_REPLICA`` jobs and
    ``add_replica_waiting`` events each balancer round records (see the module). ``ls``
    gives the layout, views and member lists, ``servers`` the whitelist, ``unplaced`` the
    units the last unit plan found no server for (unit id -> why). In memory: the open job
    and the last reason said per LS; a new leader reads the open jobs back first."""

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: ReplicaWork,
        unplaced: Callable[[], Mapping[int, str]],
        store: Store,
        events: EventSink,
        clock: Clock,
    ) -> None:
        """Nothing read yet."""
        self.servers = servers
        self.ls = ls
        self.unplaced = unplaced
        self.store = store
        self.events = events
        self.clock = clock
        self._jobs: dict[LsKey, tuple[int, str]] | None = None  # key -> (job id, extra_info)
        self._said: dict[LsKey, str] = {}

    def shortages(self) -> tuple[list[Shortage], set[LsKey]]:
        """The log streams short of replicas now (:func:`find_shortages`), and those that
        cannot be judged (no leader). In-memory reads only."""
        plans = self.ls.topology().plans
        views = self.ls.views()
        members = {
            k: self.ls.members(p, v) for k, p in plans.items() if (v := views.get(k)) is not None
        }
        undecided = {k for k in plans if (v := views.get(k)) is None or v.leader is None}
        return find_shortages(plans, views, members, self.servers, self.unplaced()), undecided

    def has_open(self) -> bool:
        """Some ``ADD_REPLICA`` job is open (read back from the table once per term)."""
        if self._jobs is None:
            self._jobs = self._load()
        return bool(self._jobs)

    def clear(self) -> None:
        """Forget everything (step-down): the next leader reads the jobs back."""
        self._jobs = None
        self._said = {}

    def _load(self) -> dict[LsKey, tuple[int, str]]:
        jobs: dict[LsKey, tuple[int, str]] = {}
        with self.store.read() as conn:
            rows = job_repo.inprogress_jobs(conn, JOB_TYPE)
        for j in rows:
            try:
                d = json.loads(j.extra_info)
                jobs[(int(d["tenant_id"]), int(d["ls_id"]))] = (j.job_id, j.extra_info)
            except (ValueError, KeyError, TypeError):
                log.warning("ADD_REPLICA job %d: unreadable extra_info", j.job_id)
        return jobs

    def record(self, shortages: list[Shortage], undecided: set[LsKey]) -> int:
        """Open, update and end the jobs in one fenced transaction: a job per LS of
        ``shortages``, its ``extra_info`` rewritten when it changed; SUCCESS for an LS no
        longer short (or gone) unless it is ``undecided`` (no leader now: its shortage
        cannot be judged, its job stays). Queues one ``add_replica_waiting`` event per LS
        and reason. Returns the rows written. Raises ``ObError`` of the store (nothing is
        remembered then: the next round writes again)."""
        jobs = self._load() if self._jobs is None else dict(self._jobs)
        if not shortages and not jobs:
            self._jobs = jobs
            return 0
        now = self.clock.now_us()
        short = {s.key: s for s in shortages}
        changed = {k: s.info() for k, s in short.items() if k not in jobs or jobs[k][1] != s.info()}
        ended = [k for k in jobs if k not in short and k not in undecided]
        opened: dict[LsKey, tuple[int, str]] = {}
        if changed or ended:
            with self.store.txn() as conn:
                for key, info in changed.items():
                    job = jobs.get(key)
                    if job is None:
                        ip, port = parse_server(short[key].leader)
                        job_id = job_repo.create_job(
                            conn,
                            JOB_TYPE,
                            ip,
                            port,
                            now,
                            self.store.rs_addr,
                            f"add replicas of log stream {key[1]} of tenant {key[0]}",
                            tenant_id=key[0],
                        )
                    else:
                        job_id = job[0]
                    job_repo.set_job_progress(conn, job_id, 0, info, now)
                    opened[key] = (job_id, info)
                for key in ended:
                    job_repo.finish_job(conn, jobs[key][0], "SUCCESS", now)
        writes = len(changed) + len(ended)
        jobs.update(opened)
        for key in ended:
            jobs.pop(key, None)
            self._said.pop(key, None)
        self._jobs = jobs
        for key, s in short.items():
            reason = s.reason()
            if reason and self._said.get(key) != reason:
                self._said[key] = reason
                self.events.add_event(
                    Event(
                        now,
                        "disaster_recovery",
                        "add_replica_waiting",
                        (
                            ("tenant_id", key[0]),
                            ("ls", f"{key[0]}.{key[1]}"),
                            ("reason", reason[:256]),
                            ("members", ",".join(s.members)),
                            ("wanted", s.wanted),
                        ),
                    )
                )
                log.warning(
                    "LS %d.%d has %d of %d replicas; no copy can be added: %s",
                    key[0],
                    key[1],
                    len(s.members),
                    s.wanted,
                    reason,
                )
            elif not reason:
                self._said.pop(key, None)
        return writes
