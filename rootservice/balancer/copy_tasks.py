"""Replica copies in flight: the hand-out of the replica plan to destination agents
(docs/design/migration.md, "disaster recovery"; OceanBase's ``ObDRWorker`` and its task manager's
per-server limits).

For each replica whose server is not its unit's server (or that sits on a permanently
offline server) the plan gives a source member and a destination; the task goes to the
destination agent as an ApplyReplicas upsert with ``copy_from``. At most
``migration_concurrency_per_server`` copies run per destination; a copy that failed
(``build_error``) or whose destination forgot it (agent restart) is sent again, from another
healthy member when there is one. The member change that completes a move is the LS
reconciler's (:meth:`rootservice.tenants.reconciler.LsReconciler.reconcile`).

No stale plan row is handed out: under the store's write lock (a fenced
transaction, which every server statement also holds while it writes the table and then
memory, and inside which a CANCEL DELETE moves its units back and forgets its copies) each
row is checked against the *current* layout (:meth:`CopyTasks.stale_copy`) and a new task
is recorded before its ApplyReplicas leaves; a CANCEL that lands while that call is in
flight pops the task, and the hand-out then drops what it just sent. The tasks are guarded by
a short lock of their own, never held across an RPC, a transaction or a plan, so CANCEL
DELETE never waits for a balancer round.

Nothing here waits for the next balancer round to notice that a copy ended:
:class:`CopyWatch` looks at the in-memory reports every :data:`COPY_WATCH_INTERVAL_US` while
copies are in flight or servers are being emptied, and wakes the balancer when a copy is done
or failed or its old replica left the member list (a slot is free, a retry or a unit
completion is due), and the empty-server checker when a DELETING server holds nothing any
more; with the product's 10 s ``balancer_interval`` and ``empty_server_check_interval`` a
2 GiB DELETE SERVER otherwise spent most of its time waiting for those two periods. This is
OceanBase's ``ObDRTaskMgr``, whose finished task wakes the disaster-recovery worker
(``ObDRWorker``) at once rather than at its next check.

Times are microseconds since the epoch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.balancer.planner import Row
from rootservice.balancer.ports import (
    EventSink,
    Gate,
    LsKey,
    LsPlan,
    LsView,
    ReplicaWork,
    Store,
    Waker,
    Whitelist,
)
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics
from rootservice.servers.status import AdminStatus, HeartbeatStatus

log = logging.getLogger(__name__)

#: Period of :class:`CopyWatch`, microseconds: how late at most a finished copy or an emptied
#: server is noticed (beside the agent's heartbeat that reports it). Cheap when idle.
COPY_WATCH_INTERVAL_US = 300_000

#: What a copy task's destination reports of it (:meth:`CopyTasks.outcomes`).
COPY_READY = "ready"
COPY_FAILED = "failed"
#: Its old replica left the leader's member list: the move is complete.
COPY_REPLACED = "replaced"
#: (:class:`CopyWatch` only) an LS whose row the hand-out skipped for want of a leader has one.
COPY_LEADER = "leader"


@dataclass
class CopyTask:
    """A replica of LS ``key`` (``(tenant_id, ls_id)``) being built on ``dest`` by copying
    from ``src``, replacing the one on ``old`` (servers as ``'ip:port'``; ``started_us``, monotonic, when
    last sent; ``stalls``, the times the lag detector found it stalled and it was marked to be
    sent again). In memory only: after an RS restart the next plan finds the same work
    again."""

    key: LsKey
    dest: str
    src: str
    old: str
    started_us: int
    attempts: int = 1
    tried: set[str] = field(default_factory=set)
    stalls: int = 0


class CopyTasks:
    """The copies handed out and not finished yet, keyed ``(ls key, dest)``.

    ``servers`` tells which destinations and sources are alive, ``ls`` gives the layout, the
    reports and the ApplyReplicas calls, ``events`` queues the ``migrate_replica`` events;
    ``store`` gives the fenced transaction the premises are checked in; ``settings`` give
    ``migration_concurrency_per_server`` and ``rpc_timeout``. :attr:`last_stale` counts the
    rows the last :meth:`hand_out` skipped as stale.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: ReplicaWork,
        events: EventSink,
        store: Store,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
    ) -> None:
        """No copy in flight."""
        self.servers = servers
        self.ls = ls
        self.events = events
        self.store = store
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.tasks: dict[tuple[LsKey, str], CopyTask] = {}
        self.last_stale = 0
        # The log streams whose rows the last hand-out skipped only because they had no
        # leader (one moving off a DELETING server): CopyWatch wakes the balancer once one
        # has a leader again rather than leaving the copy to the next period.
        self.leaderless: frozenset[LsKey] = frozenset()
        # Copies the lag detector found stalled: the next hand-out sends
        # them again from another member, as a failed one.
        self._stalled: set[tuple[LsKey, str]] = set()
        # Guards ``tasks`` (read by the job progress and CANCEL DELETE while a round runs).
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Copies in flight."""
        with self._lock:
            return len(self.tasks)

    def clear(self) -> None:
        """Forget every copy (step-down)."""
        with self._lock:
            self.tasks.clear()
            self._stalled.clear()

    def from_server(self, old: str) -> list[CopyTask]:
        """The copies that replace a replica on ``old`` (``'ip:port'``)."""
        with self._lock:
            return [t for t in self.tasks.values() if t.old == old]

    def restart_stalled(self, key: LsKey, dest: str, /) -> bool:
        """Mark the copy of ``key`` to ``dest`` (``'ip:port'``) as stalled: bytes that did not
        move for twice ``agent_lag_timeout`` (found by
        :class:`rootservice.servers.lag_detector.LagDetector`). The next :meth:`hand_out`
        sends it again from another healthy member, as it does a failed copy (the agent then
        restarts it from byte 0). False when no such copy is in flight (nothing marked)."""
        with self._lock:
            task = self.tasks.get((key, dest))
            if task is None:
                return False
            task.stalls += 1
            self._stalled.add((key, dest))
            return True

    def stall_count(self, key: LsKey, dest: str, /) -> int | None:
        """How often the copy of ``key`` to ``dest`` was marked by :meth:`restart_stalled`;
        None when no such copy is in flight."""
        with self._lock:
            task = self.tasks.get((key, dest))
            return None if task is None else task.stalls

    def other_source(self, key: LsKey, dest: str, /) -> str | None:
        """A healthy member (alive, in service) that the copy of ``key`` to ``dest`` has not
        been sent from yet, or None (none, or no such copy in flight). Reads the in-memory
        reports; no lock held while it does."""
        with self._lock:
            task = self.tasks.get((key, dest))
            if task is None:
                return None
            tried = task.tried | {task.src}
        view = self.ls.views().get(key)
        return None if view is None else self._other_source(view, tried)

    def stalled(self) -> frozenset[tuple[LsKey, str]]:
        """The ``(key, dest)`` copies marked by :meth:`restart_stalled` and not sent again
        yet."""
        with self._lock:
            return frozenset(self._stalled)

    def involving(self, server: str) -> int:
        """Copies in flight from, to or replacing a replica on ``server`` (``'ip:port'``;
        DRAIN SERVER's "copies left")."""
        with self._lock:
            return sum(1 for t in self.tasks.values() if server in (t.dest, t.src, t.old))

    def keys_to(self, dest: str, /) -> set[LsKey]:
        """The log streams with a copy in flight to ``dest`` (``'ip:port'``)."""
        with self._lock:
            return {t.key for t in self.tasks.values() if t.dest == dest}

    def stale_copy(self, plan: LsPlan | None, dest: str, old: str) -> str:
        """Why a copy to ``dest`` replacing the replica on ``old`` (``'ip:port'``) must not
        be handed out under the current layout ``plan`` of its LS, or ``''``: the LS is
        gone, ``dest`` is no longer a planned member (its unit went back), or ``old`` is
        again a planned member on a server that is not permanently offline (a CANCEL
        DELETE moved the unit back). OceanBase's ``ObDRWorker`` likewise
        re-checks a task against the current locality before it runs it."""
        if plan is None:
            return "the log stream is gone"
        if dest not in plan.members:
            return "the destination is no longer a planned member"
        if old in plan.members:
            s = self.servers.get(old)
            if s is None or s.hb_status is not HeartbeatStatus.PERMANENT_OFFLINE:
                return "the old replica's server is its unit's server again"
        return ""

    def hand_out(self, rows: Sequence[Row]) -> int:
        """Send the planned copies (replica plan rows, see
        :meth:`rootservice.balancer.planner.Planner.replica_plan`) to their destinations, at
        most ``migration_concurrency_per_server`` building at once per destination; resend
        failed or forgotten ones, from another healthy member when there is one. Rows whose
        premises no longer hold (:meth:`stale_copy`, checked in a fenced transaction against
        the current layout) are skipped and counted (:attr:`last_stale`,
        ``stale_plan_rows_total``). Returns the specs sent. A destination that refuses
        (``ObError``) is logged and tried again next round; ``ObError`` of the transaction
        (not in office, database down) propagates and nothing is sent."""
        views = self.ls.views()
        reports = self.ls.reports()
        now = self.clock.now_us()
        building: dict[str, int] = {}
        for server, table in reports.items():
            building[server] = sum(1 for r in table.values() if not r.in_service)
        limit = self.settings.migration_concurrency_per_server
        # (task, is it new, plan, view, src, reason) to send once the locks are released
        sends: list[tuple[CopyTask, bool, LsPlan, LsView, str, str]] = []
        stale = 0
        leaderless: set[LsKey] = set()
        with self.store.txn():
            topo = self.ls.topology()
            with self._lock:
                # A task ends when its LS is gone or its old replica left the member list (its
                # bytes count as copied until then).
                for tk, done in list(self.tasks.items()):
                    if self._ended(done, topo.plans.get(done.key), views.get(done.key)):
                        self.tasks.pop(tk, None)
                for row in rows:
                    if not row.get("src_svr_ip") or not row.get("dest_svr_ip"):
                        # not ready: the unit still has to move, or no healthy member can serve
                        continue
                    key = (int(row["tenant_id"]), int(row["ls_id"]))
                    dest = f"{row['dest_svr_ip']}:{row['dest_svr_port']}"
                    src = f"{row['src_svr_ip']}:{row['src_svr_port']}"
                    # No old replica: a replica added (rootservice.balancer.replica_adds).
                    old = f"{row['old_svr_ip']}:{row['old_svr_port']}" if row["old_svr_ip"] else ""
                    plan = topo.plans.get(key)
                    why = self.stale_copy(plan, dest, old)
                    if why or plan is None:
                        stale += 1
                        log.debug("copy of LS %s to %s not handed out: %s", key, dest, why)
                        continue
                    view = views.get(key)
                    s = self.servers.get(dest)
                    if view is None or view.leader is None or s is None or not s.is_alive():
                        if view is not None and view.leader is None:
                            leaderless.add(key)
                        continue
                    if s.is_suspect(self.clock.monotonic_us()):
                        # No copy to a SUSPECT server: it waits for the
                        # suspicion to end (the planner no longer sends units there).
                        continue
                    r = reports.get(dest, {}).get(key)
                    task = self.tasks.get((key, dest))
                    stalled = (key, dest) in self._stalled and r is not None and not r.in_service
                    self._stalled.discard((key, dest))
                    if r is not None and not r.build_error and not stalled:
                        continue  # building (or built): nothing to send
                    if r is not None and (r.build_error or stalled) and task is not None:
                        task.tried.add(task.src)
                        src = self._other_source(view, task.tried) or src
                        task.attempts += 1
                        log.warning(
                            "copy of LS %s to %s failed (%s): retrying from %s",
                            key,
                            dest,
                            r.build_error or "stalled: no byte moved for twice agent_lag_timeout",
                            src,
                        )
                    elif (
                        task is not None
                        and r is None
                        and self.clock.monotonic_us() - task.started_us < self.settings.rpc_timeout
                    ):
                        continue  # just sent; the report may not have it yet
                    if r is None and building.get(dest, 0) >= limit:
                        continue
                    new = task is None
                    if task is None:
                        # Recorded before the call leaves, so that a CANCEL DELETE landing while
                        # it is in flight finds (and pops) it.
                        task = CopyTask(key, dest, src, old, self.clock.monotonic_us())
                        self.tasks[(key, dest)] = task
                    sends.append((task, new, plan, view, src, str(row.get("reason") or "")))
                    building[dest] = building.get(dest, 0) + (1 if r is None else 0)
        self._count_stale(stale)
        self.leaderless = frozenset(leaderless)
        sent = 0
        for task, new, plan, view, src, reason in sends:
            if self._send(task, new, plan, view, src, reason, now):
                sent += 1
        if sent:
            self.metrics.inc("replica_tasks_total", sent)
        return sent

    def outcomes(self) -> frozenset[tuple[LsKey, str, str]]:
        """The copies in flight that the balancer has something to do about, as
        ``(ls key, dest, what)`` with ``what`` one of :data:`COPY_READY` (in service at the
        destination: its slot is free), :data:`COPY_FAILED` (``build_error``: to resend) and
        :data:`COPY_REPLACED` (the old replica left the member list: the task ends, its unit
        may complete). In-memory reads only (no transaction, no RPC); empty when no copy is
        in flight."""
        with self._lock:
            tasks = list(self.tasks.values())
        if not tasks:
            return frozenset()
        reports = self.ls.reports()
        views = self.ls.views()
        plans = self.ls.topology().plans
        out: set[tuple[LsKey, str, str]] = set()
        for t in tasks:
            r = reports.get(t.dest, {}).get(t.key)
            if r is not None and r.build_error:
                out.add((t.key, t.dest, COPY_FAILED))
            elif r is not None and r.in_service:
                out.add((t.key, t.dest, COPY_READY))
            if self._ended(t, plans.get(t.key), views.get(t.key)):
                out.add((t.key, t.dest, COPY_REPLACED))
        return frozenset(out)

    def _ended(self, task: CopyTask, plan: LsPlan | None, view: LsView | None) -> bool:
        """The task is over: its LS is gone, or (with a leader) its old replica left the
        member list, or, for a replica added where none was replaced (``old`` empty,
        :mod:`rootservice.balancer.replica_adds`), its destination joined it."""
        if plan is None or view is None:
            return True
        if view.leader is None:
            return False
        members = self.ls.members(plan, view)
        return task.dest in members if not task.old else task.old not in members

    def led_again(self) -> frozenset[LsKey]:
        """The log streams whose rows the last :meth:`hand_out` skipped for want of a leader
        and that have one now (each returned once: the next hand-out sets what it still
        waits for). In-memory reads only; empty at once when nothing waits."""
        waiting = self.leaderless
        if not waiting:
            return frozenset()
        views = self.ls.views()
        led = frozenset(k for k in waiting if (v := views.get(k)) is not None and v.leader)
        if led:
            self.leaderless = waiting - led
        return led

    def _count_stale(self, n: int) -> None:
        self.last_stale = n
        if n:
            self.metrics.inc("stale_plan_rows_total", n)

    def _send(
        self,
        task: CopyTask,
        new: bool,
        plan: LsPlan,
        view: LsView,
        src: str,
        reason: str,
        now: int,
    ) -> bool:
        """One hand-out's ApplyReplicas, outside every lock. Returns whether it was sent and
        is still wanted: when a CANCEL DELETE popped the task meanwhile, the replica just
        asked for is dropped again (logged, not raised)."""
        key, dest = task.key, task.dest
        try:
            # The source and the leader serve a copy only to a learner; the spec
            # names the leader as of the announcement (one may have moved since the plan).
            view = self.ls.announce_copy(plan, view, dest, src)
            self.ls.apply(dest, [self.ls.copy_spec(plan, view, dest, src)])
        except ObError as e:
            log.warning("handing the copy of LS %s to %s failed: %s", key, dest, e)
            if new:
                with self._lock:
                    if self.tasks.get((key, dest)) is task:
                        self.tasks.pop((key, dest))
            return False
        with self._lock:
            wanted = self.tasks.get((key, dest)) is task
            if wanted and not new:
                task.src = src
                task.started_us = self.clock.monotonic_us()
        if not wanted:
            log.info("copy of LS %s to %s cancelled while it was sent: dropping it", key, dest)
            self.drop({dest: [key]})
            return False
        if new and not task.old:
            self.events.add_event(
                Event(
                    now,
                    "disaster_recovery",
                    "add_replica",
                    (
                        ("tenant_id", key[0]),
                        ("ls", f"{key[0]}.{key[1]}"),
                        ("to", dest),
                        ("source", src),
                        ("reason", reason),
                    ),
                )
            )
            log.warning("LS %d.%d: adding a replica on %s, copied from %s", *key, dest, src)
        elif new:
            self.events.add_event(
                Event(
                    now,
                    "disaster_recovery",
                    "migrate_replica",
                    (
                        ("tenant_id", key[0]),
                        ("ls_id", key[1]),
                        ("from", task.old),
                        ("to", dest),
                        ("source", src),
                        ("reason", reason),
                    ),
                )
            )
        return True

    def _other_source(self, view: LsView, tried: set[str]) -> str | None:
        for server, r in sorted(view.replicas.items()):
            s = self.servers.get(server)
            if server in tried or not r.in_service or s is None or not s.is_alive():
                continue
            return server
        return None

    def cancel_to(self, dests: set[str], keys: Set[LsKey] | None = None) -> dict[str, list[LsKey]]:
        """CANCEL DELETE SERVER, once its transaction committed (or the re-plan of a copy's
        destination, :mod:`rootservice.balancer.copy_replan`, with ``keys``): forget the
        copies to ``dests`` (``'ip:port'``; of the log streams ``keys`` only, when given)
        and return what to drop there, by destination: the replicas being built (reported
        not in service, or built by copy) and those of the forgotten copies the destination
        does not report yet (possibly still in flight). Cheap (the short lock, no RPC):
        :meth:`drop` does the calls."""
        with self._lock:
            gone = [
                t
                for t in self.tasks.values()
                if t.dest in dests and (keys is None or t.key in keys)
            ]
            for t in gone:
                self.tasks.pop((t.key, t.dest), None)
                self._stalled.discard((t.key, t.dest))
        drops: dict[str, set[LsKey]] = {}
        reports = self.ls.reports()
        for server, table in reports.items():
            if server not in dests:
                continue
            for k, r in table.items():
                if keys is not None and k not in keys:
                    continue
                if not r.in_service or r.copy_from:
                    drops.setdefault(server, set()).add(k)
        for t in gone:
            if t.key not in reports.get(t.dest, {}):  # sent, not reported yet
                drops.setdefault(t.dest, set()).add(t.key)
        return {server: sorted(keys) for server, keys in drops.items()}

    def drop(self, drops: dict[str, list[LsKey]]) -> None:
        """Drop replicas (``drops``: by ``'ip:port'``) with one ApplyReplicas per server, in
        parallel, each bounded by ``rpc_timeout``; failures are logged, not raised (an agent
        that missed it keeps a replica no plan names until the next CANCEL or its
        restart)."""
        if not drops:
            return
        for server, err in self.ls.apply_many({}, drops).items():
            log.warning("cancel: dropping partial replicas on %s failed: %s", server, err)


class ServerContents(Protocol):
    """Whether a server still holds something (the tenant layer's
    :class:`rootservice.tenants.server_probes.ServerProbes`, as the empty-server checker
    asks it)."""

    def has_units(self, server: str, /) -> bool:
        """``server`` hosts a unit, or a unit is migrating away from it."""
        ...

    def has_replicas(self, server: str, /) -> bool:
        """Some LS leader has ``server`` in its member list, or ``__all_ls_meta_table`` has a
        replica on it."""
        ...


class CopyWatch:
    """The ``copy_watch`` task (every :data:`COPY_WATCH_INTERVAL_US`): wakes the
    ``balancer`` when :meth:`CopyTasks.outcomes` shows an event it has not seen yet or an LS
    whose copy the last hand-out skipped for want of a leader has one again
    (:meth:`CopyTasks.led_again`: a copy of an LS whose leader was moving off the DELETING
    server waited for the next ``balancer_interval``), and the
    ``empty_server_checker`` when a DELETING server with no copy in flight from it has no
    unit and no replica left (once per server until it is DELETING again). See the module
    doc; OceanBase's ``ObDRTaskMgr`` wakes ``ObDRWorker`` when a task finishes.

    ``copies`` are the copies in flight, ``servers`` the whitelist, ``contents`` answers
    the emptiness questions (two indexed reads per DELETING server per run), ``wake`` runs a
    task by name, ``term`` gates every run (a standby wakes nothing). ``run_once`` returns
    the wakes it made.
    """

    name = "copy_watch"

    def __init__(
        self,
        *,
        copies: CopyTasks,
        servers: Whitelist,
        contents: ServerContents,
        wake: Waker,
        term: Gate,
    ) -> None:
        """Nothing seen yet."""
        self.copies = copies
        self.servers = servers
        self.contents = contents
        self.wake = wake
        self.term = term
        self._seen: frozenset[tuple[LsKey, str, str]] = frozenset()
        self._emptied: set[str] = set()

    def run_once(self) -> int:
        """One look (see the class doc). Raises ``ObError`` when a read fails (the task
        registry logs it; the next run starts afresh)."""
        if not self.term.may_act():
            self._seen, self._emptied = frozenset(), set()
            return 0
        woke = 0
        events = self.copies.outcomes()
        led = self.copies.led_again()
        if led:
            events |= {(k, "", COPY_LEADER) for k in led}
        if events - self._seen:
            self.wake("balancer")
            woke += 1
        self._seen = events
        if not self.servers.has_servers_to_empty():
            self._emptied.clear()
            return woke
        deleting = {
            s.key for s in self.servers.snapshot() if s.admin_status is AdminStatus.DELETING
        }
        self._emptied &= deleting
        for key in sorted(deleting - self._emptied):
            if self.copies.from_server(key):
                continue
            if self.contents.has_units(key) or self.contents.has_replicas(key):
                continue
            self._emptied.add(key)
            self.wake("empty_server_checker")
            woke += 1
        return woke
