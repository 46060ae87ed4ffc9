"""Emptying servers: the root balancer, disaster recovery and lost-replica cleanup as the RS
runs them (SPEC.md section 9; OceanBase's ``ObRootBalancer``, ``ObDRWorker`` and
``ObLostReplicaChecker``).

The plans are computed by Spark jobs (:mod:`rootservice.balancer.spark`) through a :class:`Planner`;
only this module writes, in fenced transactions (SPEC.md section 10):

- **Unit moves.** For each unit of a DELETING or permanently offline server the plan gives a
  target; :meth:`MigrationManager.apply_unit_plan` records the move in ``__all_unit``
  (``svr_*`` = target, ``migrate_from_svr_*`` = source), in batches, re-checking that the
  unit is still where the plan saw it.
- **Replica tasks.** For each replica whose server is not its unit's server (or that sits on
  a permanently offline server) the plan gives a source member and a destination; the task
  goes to the destination agent as an ApplyReplicas upsert with ``copy_from``. At most
  ``migration_concurrency_per_server`` copies run per destination; a copy that failed
  (``build_error``) or whose destination forgot it (agent restart) is sent again, from
  another healthy member when there is one. The member change that completes a move is the
  LS manager's (:meth:`rootservice.tenants.log_streams.LsManager.reconcile`).
- **Unit completion.** A moving unit is done when no LS of its unit group has a replica on
  the source any more: ``migrate_from`` is cleared.
- **Progress.** Each ``DELETE_SERVER`` job carries ``progress`` (0-100) and, in
  ``extra_info``, units / replicas moved of total, bytes copied, an estimate of the time left
  and, when nothing moved for ``migration_stall_time``, ``stalled: <reason>`` (also an event).
- **CANCEL DELETE** (:meth:`MigrationManager.cancel_server`): units still moving go back,
  replicas being built for them are dropped; moved units stay.
- **Lost replicas** (:meth:`MigrationManager.clean_lost_replicas`): the rows the plan calls
  lost are deleted from ``__all_ls_meta_table`` in batches, each logged.

Times are microseconds since the epoch; sizes bytes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db import event_repo, ls_repo, timestamps, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.tables import all_ls_meta_table, all_rootservice_job, all_unit
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from rootservice.tenants.placement import format_bytes

if TYPE_CHECKING:
    from rootservice.servers.manager import ServerManager
    from rootservice.tenants.log_streams import LsManager, LsView

log = logging.getLogger(__name__)

Row = dict[str, Any]
BATCH = 500

#: Columns of the servers input the planner gets from the RS's memory (capacity and health
#: are not in ``__all_server``).
SERVER_COLUMNS = (
    "svr_ip",
    "svr_port",
    "zone",
    "status",
    "hb_status",
    "stop_time",
    "cpu_total",
    "mem_total",
    "log_disk_total",
)


class Planner(Protocol):
    """Computes the three plans of SPEC.md section 9 from the system tables plus the
    ``servers`` rows (one dict per whitelisted server with :data:`SERVER_COLUMNS`)."""

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """Rows: unit_id, tenant_id, zone, from_svr_ip, from_svr_port, to_svr_ip (None when
        no room), to_svr_port, reason."""
        ...

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """Rows: tenant_id, ls_id, src_svr_ip, src_svr_port, dest_svr_ip, dest_svr_port,
        old_svr_ip, old_svr_port, reason."""
        ...

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """Rows: tenant_id, ls_id, svr_ip, svr_port, reason."""
        ...


@dataclass
class CopyTask:
    """A replica being built on ``dest`` by copying from ``src`` (in memory only: after an
    RS restart the next plan finds the same work again)."""

    key: tuple[int, int]
    dest: str
    src: str
    old: str
    started_us: int
    attempts: int = 1
    tried: set[str] = field(default_factory=set)


@dataclass
class JobProgress:
    """What one DELETE_SERVER job has done: the totals are fixed at its first round."""

    units_total: int
    replicas_total: int
    bytes_total: int
    started_us: int
    last_change_us: int
    last_done: int = -1
    stalled: str = ""


class MigrationManager:
    """The balancer task (``name = "balancer"``, woken by DELETE / CANCEL DELETE / a server
    going permanently offline or coming back) and the lost-replica checker.

    ``planner`` computes the plans (Spark); ``ls`` hands replica work to agents.
    """

    name = "balancer"

    def __init__(self, manager: ServerManager, ls: LsManager, planner: Planner) -> None:
        """Nothing runs until :meth:`run_once`."""
        self.manager = manager
        self.ls = ls
        self.planner = planner
        self.store = manager.store
        self.clock = manager.clock
        self.settings = manager.settings
        self.metrics = manager.metrics
        self._lock = threading.Lock()
        self.tasks: dict[tuple[tuple[int, int], str], CopyTask] = {}
        self.progress: dict[str, JobProgress] = {}
        self.unplaced: dict[int, str] = {}  # unit_id -> why it found no server

    def clear(self) -> None:
        """Forget in-flight copy tasks, job progress and placement failures (step-down).

        Without the round's lock: a step-down must not wait for a Spark job, and a round
        still running writes nothing once the epoch moved on (its transactions are fenced)."""
        self.tasks.clear()
        self.progress.clear()
        self.unplaced.clear()

    # --- inputs ----------------------------------------------------------------------------

    def servers_input(self) -> list[Row]:
        """The whitelist as planner rows (:data:`SERVER_COLUMNS`)."""
        out = []
        for s in self.manager.snapshot():
            r = s.resource_info
            out.append(
                {
                    "svr_ip": s.ip,
                    "svr_port": s.port,
                    "zone": s.zone,
                    "status": s.display_status().value,
                    "hb_status": s.hb_status.value,
                    "stop_time": s.stop_time,
                    "cpu_total": float(r.cpu_total),
                    "mem_total": int(r.mem_total),
                    "log_disk_total": int(r.log_disk_total),
                }
            )
        return out

    def _emptying(self) -> list[str]:
        return [
            s.key
            for s in self.manager.snapshot()
            if s.admin_status is AdminStatus.DELETING
            or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        ]

    # --- the round -------------------------------------------------------------------------

    def run_once(self) -> int:
        """One balancer round: plan and record unit moves, hand out replica copies, finish
        units whose replicas have moved, update job progress. Returns actions taken. Does
        nothing (and never starts Spark) while no server is being emptied and no unit or
        copy is in flight."""
        if not self.manager.term.in_service:
            return 0
        with self._lock:
            # Cheap checks first: with no tenant and no server to empty (the common case,
            # and the only one at 10k idle servers) a round costs one pass over the
            # whitelist's flags.
            emptying = self.manager.has_servers_to_empty()
            if not emptying and not self.tasks and not self.ls.topology().plans:
                return 0
            moving: list[unit_repo.Unit] = []
            with self.store.read() as conn:
                moving = [u for u in unit_repo.load_units(conn) if u.migrate_from]
            misplaced = self._misplaced_replicas()
            if not emptying and not moving and not self.tasks and not misplaced:
                return 0
            servers = self.servers_input()
            actions = 0
            if self._emptying():
                actions += self.apply_unit_plan(self.planner.unit_plan(servers))
            actions += self.hand_out(self.planner.replica_plan(servers))
            actions += self.finish_units()
            self.update_jobs()
            return actions

    def _misplaced_replicas(self) -> bool:
        """Some LS has a planned member without a replica while the LS exists (a replica to
        rebuild), so the replica plan is worth computing even with no unit moving."""
        topo = self.ls.topology()
        for key, view in self.ls.views().items():
            plan = topo.plans.get(key)
            if plan is None or not view.replicas or view.leader is None:
                continue
            for m in plan.members:
                s = self.manager.get(m)
                if s is not None and s.is_alive() and m not in view.replicas:
                    return True
        return False

    # --- unit moves ------------------------------------------------------------------------

    def apply_unit_plan(self, rows: Sequence[Row]) -> int:
        """Record the planned unit moves in ``__all_unit`` (batched fenced transactions),
        skipping units that moved meanwhile; remember the units that found no server (their
        reasons feed the jobs' stall messages). Returns the units moved."""
        placed = [r for r in rows if r.get("to_svr_ip")]
        self.unplaced = {
            int(r["unit_id"]): str(r["reason"]) for r in rows if not r.get("to_svr_ip")
        }
        moved = 0
        now = self.clock.now_us()
        for i in range(0, len(placed), BATCH):
            batch = placed[i : i + BATCH]
            events = []
            with self.store.txn() as conn:
                for r in batch:
                    t = all_unit
                    res = conn.execute(
                        sa.update(t)
                        .where(
                            t.c.unit_id == int(r["unit_id"]),
                            t.c.svr_ip == r["from_svr_ip"],
                            t.c.svr_port == int(r["from_svr_port"]),
                            t.c.migrate_from_svr_ip == "",
                        )
                        .values(
                            svr_ip=r["to_svr_ip"],
                            svr_port=int(r["to_svr_port"]),
                            migrate_from_svr_ip=r["from_svr_ip"],
                            migrate_from_svr_port=int(r["from_svr_port"]),
                            gmt_modified=timestamps.us_to_datetime(now),
                        )
                    )
                    if res.rowcount:
                        moved += 1
                        events.append(
                            Event(
                                now,
                                "balancer",
                                "migrate_unit",
                                (
                                    ("unit_id", int(r["unit_id"])),
                                    ("from", f"{r['from_svr_ip']}:{r['from_svr_port']}"),
                                    ("to", f"{r['to_svr_ip']}:{r['to_svr_port']}"),
                                    ("reason", r.get("reason") or ""),
                                ),
                            )
                        )
                event_repo.insert_events(conn, events, self.store.rs_addr)
        if moved:
            self.metrics.inc("unit_moves_total", moved)
            self._layout_changed()
            log.info("balancer: %d unit(s) start moving", moved)
        return moved

    def _layout_changed(self) -> None:
        tenants = self.ls.tenants
        if tenants is not None:
            tenants.version += 1

    # --- replica copies ----------------------------------------------------------------------

    def hand_out(self, rows: Sequence[Row]) -> int:
        """Send the planned copies to their destinations, at most
        ``migration_concurrency_per_server`` building at once per destination; resend
        failed or forgotten ones, from another healthy member when there is one. Returns the
        specs sent."""
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
            s = self.manager.get(dest)
            if plan is None or view is None or view.leader is None or s is None or not s.is_alive():
                continue
            r = reports.get(dest, {}).get(key)
            task = self.tasks.get((key, dest))
            if r is not None and not r.build_error:
                continue  # building (or built): nothing to send
            if r is not None and r.build_error and task is not None:
                task.tried.add(task.src)
                src = self._other_source(plan.key, view, task.tried) or src
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
                self.ls.apply(dest, [spec])
            except ObError as e:
                log.warning("handing the copy of LS %s to %s failed: %s", key, dest, e)
                continue
            if task is None:
                task = CopyTask(key, dest, src, old, now)
                self.tasks[(key, dest)] = task
                self.manager.persist.add_event(
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

    def _other_source(self, key: tuple[int, int], view: LsView, tried: set[str]) -> str | None:
        for server, r in sorted(view.replicas.items()):
            s = self.manager.get(server)
            if server in tried or not r.in_service or s is None or not s.is_alive():
                continue
            return server
        return None

    # --- finishing units ------------------------------------------------------------------

    def finish_units(self) -> int:
        """Clear ``migrate_from`` of moving units whose log streams no longer have a replica
        (reported or in ``__all_ls_meta_table``) on the source. Returns units finished."""
        topo = self.ls.topology()
        views = self.ls.views()
        with self.store.read() as conn:
            units = [u for u in unit_repo.load_units(conn) if u.migrate_from]
            meta = ls_repo.load_ls_meta(conn)
        if not units:
            return 0
        on_server: dict[str, set[tuple[int, int]]] = {}
        for k in meta:
            on_server.setdefault(f"{k[2]}:{k[3]}", set()).add((k[0], k[1]))
        # What a dead server last reported says nothing of what it holds now; its rows in
        # __all_ls_meta_table go with the member removal or the lost-replica cleanup.
        for key, view in views.items():
            for server in view.replicas:
                s = self.manager.get(server)
                if s is not None and s.is_alive():
                    on_server.setdefault(server, set()).add(key)
        done = []
        for u in units:
            keys = {
                k
                for k, p in topo.plans.items()
                if u.server in p.members and p.members[u.server][1] == u.unit_id
            }
            if not keys & on_server.get(u.migrate_from, set()):
                done.append(u)
        if not done:
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for u in done:
                conn.execute(
                    sa.update(all_unit)
                    .where(all_unit.c.unit_id == u.unit_id)
                    .values(
                        migrate_from_svr_ip="",
                        migrate_from_svr_port=0,
                        gmt_modified=timestamps.us_to_datetime(now),
                    )
                )
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "balancer",
                        "finish_migrate_unit",
                        (("unit_id", u.unit_id), ("from", u.migrate_from), ("to", u.server)),
                    )
                    for u in done
                ],
                self.store.rs_addr,
            )
        self._layout_changed()
        self.manager.wake("empty_server_checker")
        return len(done)

    # --- CANCEL DELETE ------------------------------------------------------------------

    def cancel_server(self, key: str) -> int:
        """CANCEL DELETE SERVER ``key``: units moving away from it go back (``svr`` =
        ``migrate_from``), replicas still being built for them are dropped on their
        destinations; units that finished moving stay. Returns units moved back."""
        ip, _, port = key.rpartition(":")
        with self._lock:
            with self.store.read() as conn:
                back = [
                    u
                    for u in unit_repo.load_units(conn)
                    if u.migrate_from_svr_ip == ip and u.migrate_from_svr_port == int(port)
                ]
            now = self.clock.now_us()
            if back:
                with self.store.txn() as conn:
                    for u in back:
                        conn.execute(
                            sa.update(all_unit)
                            .where(all_unit.c.unit_id == u.unit_id)
                            .values(
                                svr_ip=u.migrate_from_svr_ip,
                                svr_port=u.migrate_from_svr_port,
                                migrate_from_svr_ip="",
                                migrate_from_svr_port=0,
                                gmt_modified=timestamps.us_to_datetime(now),
                            )
                        )
                    event_repo.insert_events(
                        conn,
                        [
                            Event(
                                now,
                                "balancer",
                                "cancel_migrate_unit",
                                (("unit_id", u.unit_id), ("back_to", key), ("was_to", u.server)),
                            )
                            for u in back
                        ],
                        self.store.rs_addr,
                    )
                self._layout_changed()
            dests = {u.server for u in back}
            drops: dict[str, list[tuple[int, int]]] = {}
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
            self.progress.pop(key, None)
            return len(back)

    # --- progress -------------------------------------------------------------------------

    def update_jobs(self) -> None:
        """Refresh ``progress`` and ``extra_info`` of every INPROGRESS DELETE_SERVER job."""
        with self.store.read() as conn:
            jobs = (
                conn.execute(
                    sa.select(all_rootservice_job).where(
                        all_rootservice_job.c.job_type == "DELETE_SERVER",
                        all_rootservice_job.c.job_status == "INPROGRESS",
                    )
                )
                .mappings()
                .all()
            )
            if not jobs:
                return
            units = unit_repo.load_units(conn)
            meta = ls_repo.load_ls_meta(conn)
        now = self.clock.now_us()
        reports = self.ls.reports()
        updates = []
        for j in jobs:
            key = f"{j['svr_ip']}:{j['svr_port']}"
            units_left = [u for u in units if key in (u.server, u.migrate_from)]
            replicas_left = [k for k in meta if f"{k[2]}:{k[3]}" == key]
            bytes_left = sum(int(meta[k]["data_size"]) for k in replicas_left)
            p = self.progress.get(key)
            if p is None:
                p = JobProgress(len(units_left), len(replicas_left), bytes_left, now, now)
                self.progress[key] = p
            copied = 0
            for task in self.tasks.values():
                if task.old == key:
                    r = reports.get(task.dest, {}).get(task.key)
                    if r is not None:
                        copied += r.data_size if r.in_service else r.bytes_copied
            units_moved = max(0, p.units_total - len(units_left))
            replicas_moved = max(0, p.replicas_total - len(replicas_left))
            bytes_done = max(0, p.bytes_total - bytes_left) + copied
            total = p.units_total + p.replicas_total
            done = units_moved + replicas_moved
            percent = 99 if total and done >= total else (100 * done // total if total else 0)
            if done != p.last_done:
                p.last_done, p.last_change_us, p.stalled = done, now, ""
            elif now - p.last_change_us >= self.settings.migration_stall_time and not p.stalled:
                p.stalled = self._stall_reason(key, units_left)
                self.manager.persist.add_event(
                    Event(
                        now,
                        "balancer",
                        "migration_stalled",
                        (("server", key), ("reason", p.stalled)),
                    )
                )
                log.warning("DELETE SERVER %s makes no progress: %s", key, p.stalled)
            elapsed = max(1, now - p.started_us)
            eta = ""
            if 0 < bytes_done < p.bytes_total:
                eta_s = (p.bytes_total - bytes_done) * elapsed / bytes_done / 1e6
                eta = f"{eta_s:.0f}s"
            info = {
                "units_moved": units_moved,
                "units_total": p.units_total,
                "replicas_moved": replicas_moved,
                "replicas_total": p.replicas_total,
                "bytes_copied": bytes_done,
                "bytes_total": p.bytes_total,
                "copied": format_bytes(bytes_done),
                "eta": eta,
                "stalled": p.stalled,
            }
            updates.append((int(j["job_id"]), percent, json.dumps(info, separators=(",", ":"))))
        with self.store.txn() as conn:
            for job_id, percent, text in updates:
                conn.execute(
                    sa.update(all_rootservice_job)
                    .where(
                        all_rootservice_job.c.job_id == job_id,
                        all_rootservice_job.c.job_status == "INPROGRESS",
                    )
                    .values(
                        progress=percent,
                        extra_info=text,
                        gmt_modified=timestamps.us_to_datetime(now),
                    )
                )

    def finalize_job(self, conn: sa.Connection, ip: str, port: int) -> None:
        """In the transaction that removes the emptied server ``ip:port``: its job's
        ``extra_info`` shows everything moved (the job itself becomes SUCCESS in the same
        transaction, SPEC.md section 9)."""
        key = f"{ip}:{port}"
        p = self.progress.pop(key, None)
        if p is None:
            return
        info = {
            "units_moved": p.units_total,
            "units_total": p.units_total,
            "replicas_moved": p.replicas_total,
            "replicas_total": p.replicas_total,
            "bytes_copied": p.bytes_total,
            "bytes_total": p.bytes_total,
            "copied": format_bytes(p.bytes_total),
            "eta": "",
            "stalled": "",
        }
        t = all_rootservice_job
        conn.execute(
            sa.update(t)
            .where(
                t.c.job_type == "DELETE_SERVER",
                t.c.svr_ip == ip,
                t.c.svr_port == port,
                t.c.job_status == "INPROGRESS",
            )
            .values(extra_info=json.dumps(info, separators=(",", ":")))
        )

    def _stall_reason(self, key: str, units_left: list[unit_repo.Unit]) -> str:
        for u in units_left:
            if u.unit_id in self.unplaced:
                return f"unit {u.unit_id}: no room ({self.unplaced[u.unit_id]})"
        for task in self.tasks.values():
            if task.old == key:
                r = self.ls.reports().get(task.dest, {}).get(task.key)
                if r is not None and r.build_error:
                    return f"LS {task.key[1]} copy to {task.dest}: {r.build_error}"
        s = self.manager.get(key)
        if s is not None and not s.is_alive():
            return "the server is not alive and some LS has no healthy source"
        return "waiting for replicas to catch up and for member changes"

    # --- lost replicas ------------------------------------------------------------------

    def clean_lost_replicas(self) -> int:
        """ObLostReplicaChecker's round: delete the rows of ``__all_ls_meta_table`` the plan
        calls lost, in batches of 500, each logged. Returns rows deleted. Runs only when some
        row sits on a server that is gone or permanently offline (no Spark job otherwise)."""
        if not self.manager.term.in_service:
            return 0
        with self.store.read() as conn:
            servers = {
                f"{r[0]}:{r[1]}"
                for r in conn.execute(
                    sa.select(all_ls_meta_table.c.svr_ip, all_ls_meta_table.c.svr_port).distinct()
                )
            }
        suspects = [
            k
            for k in servers
            if (s := self.manager.get(k)) is None
            or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        ]
        if not suspects:
            return 0
        rows = self.planner.lost_replicas(self.servers_input())
        deleted = 0
        for i in range(0, len(rows), BATCH):
            batch = rows[i : i + BATCH]
            keys = [
                (int(r["tenant_id"]), int(r["ls_id"]), str(r["svr_ip"]), int(r["svr_port"]))
                for r in batch
            ]
            with self.store.txn() as conn:
                deleted += ls_repo.delete_ls_meta(conn, keys)
            for r in batch:
                log.info(
                    "lost replica removed: tenant %s ls %s on %s:%s (%s)",
                    r["tenant_id"],
                    r["ls_id"],
                    r["svr_ip"],
                    r["svr_port"],
                    r["reason"],
                )
        if deleted:
            self.ls.forget_meta()
            self.metrics.inc("lost_replicas_removed_total", deleted)
            self.manager.wake("empty_server_checker")
        return deleted


class LostReplicaChecker:
    """The scheduled lost-replica task (``name = "lost_replica_checker"``)."""

    name = "lost_replica_checker"

    def __init__(self, migration: MigrationManager) -> None:
        """Run ``migration.clean_lost_replicas`` on each round."""
        self.migration = migration

    def run_once(self) -> int:
        """One round; see :meth:`MigrationManager.clean_lost_replicas`."""
        return self.migration.clean_lost_replicas()
