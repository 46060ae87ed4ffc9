"""Replica copies in flight: the hand-out of the replica plan to destination agents (SPEC.md
section 9, "disaster recovery"; OceanBase's ``ObDRWorker`` and its task manager's
per-server limits).

For each replica whose server is not its unit's server (or that sits on a permanently
offline server) the plan gives a source member and a destination; the task goes to the
destination agent as an ApplyReplicas upsert with ``copy_from``. At most
``migration_concurrency_per_server`` copies run per destination; a copy that failed
(``build_error``) or whose destination forgot it (agent restart) is sent again, from another
healthy member when there is one. The member change that completes a move is the LS
reconciler's (:meth:`rootservice.tenants.reconciler.LsReconciler.reconcile`).

Times are microseconds since the epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.balancer.planner import Row
from rootservice.balancer.ports import EventSink, LsKey, LsView, ReplicaWork, Whitelist
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class CopyTask:
    """A replica of LS ``key`` (``(tenant_id, ls_id)``) being built on ``dest`` by copying
    from ``src``, replacing the one on ``old`` (servers as ``'ip:port'``; ``started_us`` when
    last sent). In memory only: after an RS restart the next plan finds the same work
    again."""

    key: LsKey
    dest: str
    src: str
    old: str
    started_us: int
    attempts: int = 1
    tried: set[str] = field(default_factory=set)


class CopyTasks:
    """The copies handed out and not finished yet, keyed ``(ls key, dest)``.

    ``servers`` tells which destinations and sources are alive, ``ls`` gives the layout, the
    reports and the ApplyReplicas calls, ``events`` queues the ``migrate_replica`` events;
    ``settings`` give ``migration_concurrency_per_server`` and ``rpc_timeout``.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: ReplicaWork,
        events: EventSink,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
    ) -> None:
        """No copy in flight."""
        self.servers = servers
        self.ls = ls
        self.events = events
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.tasks: dict[tuple[LsKey, str], CopyTask] = {}

    def __len__(self) -> int:
        """Copies in flight."""
        return len(self.tasks)

    def clear(self) -> None:
        """Forget every copy (step-down)."""
        self.tasks.clear()

    def from_server(self, old: str) -> list[CopyTask]:
        """The copies that replace a replica on ``old`` (``'ip:port'``)."""
        return [t for t in self.tasks.values() if t.old == old]

    def hand_out(self, rows: Sequence[Row]) -> int:
        """Send the planned copies (replica plan rows, see
        :meth:`rootservice.balancer.planner.Planner.replica_plan`) to their destinations, at
        most ``migration_concurrency_per_server`` building at once per destination; resend
        failed or forgotten ones, from another healthy member when there is one. Returns the
        specs sent. A destination that refuses (``ObError``) is logged and tried again next
        round."""
        topo = self.ls.topology()
        views = self.ls.views()
        reports = self.ls.reports()
        now = self.clock.now_us()
        building: dict[str, int] = {}
        for server, table in reports.items():
            building[server] = sum(1 for r in table.values() if not r.in_service)
        # forget tasks that finished or whose LS / destination is gone
        # A task ends when its LS is gone or its old replica left the member list (its bytes
        # count as copied until then).
        for tk, done in list(self.tasks.items()):
            p, v = topo.plans.get(done.key), views.get(done.key)
            if (
                p is None
                or v is None
                or (v.leader is not None and done.old not in self.ls.members(p, v))
            ):
                self.tasks.pop(tk, None)
        sent = 0
        limit = self.settings.migration_concurrency_per_server
        for row in rows:
            if not row.get("src_svr_ip") or not row.get("dest_svr_ip"):
                # not ready: the unit still has to move, or no healthy member can serve
                continue
            key = (int(row["tenant_id"]), int(row["ls_id"]))
            dest = f"{row['dest_svr_ip']}:{row['dest_svr_port']}"
            src = f"{row['src_svr_ip']}:{row['src_svr_port']}"
            old = f"{row['old_svr_ip']}:{row['old_svr_port']}"
            plan = topo.plans.get(key)
            view = views.get(key)
            s = self.servers.get(dest)
            if plan is None or view is None or view.leader is None or s is None or not s.is_alive():
                continue
            r = reports.get(dest, {}).get(key)
            task = self.tasks.get((key, dest))
            if r is not None and not r.build_error:
                continue  # building (or built): nothing to send
            if r is not None and r.build_error and task is not None:
                task.tried.add(task.src)
                src = self._other_source(view, task.tried) or src
                task.attempts += 1
                log.warning(
                    "copy of LS %s to %s failed (%s): retrying from %s",
                    key,
                    dest,
                    r.build_error,
                    src,
                )
            elif (
                task is not None and r is None and now - task.started_us < self.settings.rpc_timeout
            ):
                continue  # just sent; the report may not have it yet
            if r is None and building.get(dest, 0) >= limit:
                continue
            spec = self.ls.copy_spec(plan, view, dest, src)
            try:
                # The source and the leader serve a copy only to a learner (issue 10).
                self.ls.announce_copy(plan, view, dest, src)
                self.ls.apply(dest, [spec])
            except ObError as e:
                log.warning("handing the copy of LS %s to %s failed: %s", key, dest, e)
                continue
            if task is None:
                task = CopyTask(key, dest, src, old, now)
                self.tasks[(key, dest)] = task
                self.events.add_event(
                    Event(
                        now,
                        "disaster_recovery",
                        "migrate_replica",
                        (
                            ("tenant_id", key[0]),
                            ("ls_id", key[1]),
                            ("from", old),
                            ("to", dest),
                            ("source", src),
                            ("reason", str(row.get("reason") or "")),
                        ),
                    )
                )
            else:
                task.src = src
                task.started_us = now
            building[dest] = building.get(dest, 0) + (1 if r is None else 0)
            sent += 1
        if sent:
            self.metrics.inc("replica_tasks_total", sent)
        return sent

    def _other_source(self, view: LsView, tried: set[str]) -> str | None:
        for server, r in sorted(view.replicas.items()):
            s = self.servers.get(server)
            if server in tried or not r.in_service or s is None or not s.is_alive():
                continue
            return server
        return None

    def cancel_to(self, dests: set[str]) -> None:
        """CANCEL DELETE SERVER: forget the copies to ``dests`` (``'ip:port'``) and drop the
        replicas still being built there (not in service, or built by copy), in one
        ApplyReplicas per destination; failures are logged, not raised."""
        drops: dict[str, list[LsKey]] = {}
        for server, table in self.ls.reports().items():
            if server not in dests:
                continue
            for k, r in table.items():
                if not r.in_service or r.copy_from:
                    drops.setdefault(server, []).append(k)
        for tk in [tk for tk, t in self.tasks.items() if t.dest in dests]:
            self.tasks.pop(tk, None)
        for server, err in self.ls.apply_many({}, drops).items():
            log.warning("cancel: dropping partial replicas on %s failed: %s", server, err)
