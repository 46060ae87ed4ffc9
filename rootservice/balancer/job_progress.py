"""Progress of DELETE_SERVER jobs (SPEC.md section 9; OceanBase's ``ObRsJobTableOperator``
rows of ``__all_rootservice_job``).

Each INPROGRESS ``DELETE_SERVER`` job carries ``progress`` (0-100) and, in ``extra_info``
(compact JSON), units / replicas moved of total, bytes copied, an estimate of the time left
and, when nothing moved for ``migration_stall_time``, ``stalled: <reason>`` (also an event
``migration_stalled``). The totals are fixed at the job's first round; in the transaction
that removes the emptied server, :meth:`DeleteJobProgress.finalize_job` shows everything
moved.

Times are microseconds since the epoch; sizes bytes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from obcommon.clock import Clock
from rootservice.balancer.copy_tasks import CopyTask, CopyTasks
from rootservice.balancer.ports import EventSink, ReplicaReports, Reports, Store, Whitelist
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.config import RsSettings
from rootservice.db import job_repo, ls_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.servers.status import ServerStatus
from rootservice.tenants.placement import format_bytes

log = logging.getLogger(__name__)

JOB_TYPE = "DELETE_SERVER"


@dataclass
class JobProgress:
    """What one DELETE_SERVER job has done: the totals are fixed at its first round
    (``bytes_total`` in bytes, times in microseconds; ``last_done`` units + replicas moved
    when last changed, ``stalled`` the reported reason or ``''``). ``job_id``, ``percent``
    (0-100) and ``bytes_done`` are those of the last round, for ``/metrics`` (issue 12)."""

    units_total: int
    replicas_total: int
    bytes_total: int
    started_us: int
    last_change_us: int
    last_done: int = -1
    stalled: str = ""
    job_id: int = 0
    percent: int = 0
    bytes_done: int = 0


def job_info(
    p: JobProgress, units_moved: int, replicas_moved: int, bytes_done: int, eta: str
) -> str:
    """The job's ``extra_info``: compact JSON with units / replicas moved of total, bytes
    copied (also human-readable as ``copied``), ``eta`` and ``stalled``."""
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
    return json.dumps(info, separators=(",", ":"))


def stall_reason(
    key: str,
    units_left: Sequence[unit_repo.Unit],
    unplaced: Mapping[int, str],
    copies: Iterable[CopyTask],
    reports: Reports,
    server: ServerStatus | None,
) -> str:
    """Why the emptying of ``key`` (``'ip:port'``, whitelist entry ``server``) moves nothing,
    first match wins: a unit left found no room (``unplaced``: unit_id -> the plan's reason),
    a copy off it reports a build error, the server is dead with no healthy source, else it
    waits for replicas to catch up."""
    for u in units_left:
        if u.unit_id in unplaced:
            return f"unit {u.unit_id}: no room ({unplaced[u.unit_id]})"
    for task in copies:
        r = reports.get(task.dest, {}).get(task.key)
        if r is not None and r.build_error:
            return f"LS {task.key[1]} copy to {task.dest}: {r.build_error}"
    if server is not None and not server.is_alive():
        return "the server is not alive and some LS has no healthy source"
    return "waiting for replicas to catch up and for member changes"


class DeleteJobProgress:
    """Refreshes the INPROGRESS DELETE_SERVER jobs each balancer round and finalizes a job
    when its server is removed.

    ``units`` and ``copies`` are the balancer's unit moves and copies in flight (read only);
    ``events`` queues the ``migration_stalled`` events; ``settings`` give
    ``migration_stall_time``. :attr:`progress` (by ``'ip:port'``) is guarded by a short lock
    of its own (CANCEL DELETE forgets a job while a round may be updating the jobs; issue 13
    item 2), never held across a transaction, an RPC or a plan.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: ReplicaReports,
        events: EventSink,
        store: Store,
        clock: Clock,
        settings: RsSettings,
        units: UnitMoves,
        copies: CopyTasks,
    ) -> None:
        """No job known yet: each job's totals are taken at its first round."""
        self.servers = servers
        self.ls = ls
        self.events = events
        self.store = store
        self.clock = clock
        self.settings = settings
        self.units = units
        self.copies = copies
        self.progress: dict[str, JobProgress] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every job's progress (step-down)."""
        with self._lock:
            self.progress.clear()

    def forget(self, server: str) -> None:
        """Forget the progress of ``server``'s job (``'ip:port'``; CANCEL DELETE)."""
        with self._lock:
            self.progress.pop(server, None)

    def update_jobs(self) -> None:
        """Refresh ``progress`` and ``extra_info`` of every INPROGRESS DELETE_SERVER job, and
        report a stall (log and event, once) when nothing moved for
        ``migration_stall_time``. A job that ended since it was read (CANCEL DELETE) keeps
        its final row and its progress is forgotten here too, so that a later DELETE of the
        same server starts afresh (issue 13 item 2). Raises ``ObError`` when the transaction
        fails."""
        with self.store.read() as conn:
            jobs = job_repo.inprogress_jobs(conn, JOB_TYPE)
            if not jobs:
                return
            units = unit_repo.load_units(conn)
            meta = ls_repo.load_ls_meta(conn)
        now = self.clock.now_us()
        reports = self.ls.reports()
        updates = []
        for j in jobs:
            key = j.server
            units_left = [u for u in units if key in (u.server, u.migrate_from)]
            replicas_left = [k for k in meta if f"{k[2]}:{k[3]}" == key]
            bytes_left = sum(int(meta[k]["data_size"]) for k in replicas_left)
            with self._lock:
                p = self.progress.setdefault(
                    key, JobProgress(len(units_left), len(replicas_left), bytes_left, now, now)
                )
            copied = 0
            for task in self.copies.from_server(key):
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
                self.events.add_event(
                    Event(
                        now,
                        "balancer",
                        "migration_stalled",
                        (("server", key), ("reason", p.stalled)),
                    )
                )
                log.warning("DELETE SERVER %s makes no progress: %s", key, p.stalled)
            p.job_id, p.percent, p.bytes_done = j.job_id, percent, bytes_done
            elapsed = max(1, now - p.started_us)
            eta = ""
            if 0 < bytes_done < p.bytes_total:
                eta_s = (p.bytes_total - bytes_done) * elapsed / bytes_done / 1e6
                eta = f"{eta_s:.0f}s"
            updates.append(
                (key, j.job_id, percent, job_info(p, units_moved, replicas_moved, bytes_done, eta))
            )
        ended = []
        with self.store.txn() as conn:
            for key, job_id, percent, text in updates:
                if not job_repo.set_job_progress(conn, job_id, percent, text, now):
                    ended.append((key, job_id))
        with self._lock:
            for key, job_id in ended:
                ended_p = self.progress.get(key)
                if ended_p is not None and ended_p.job_id == job_id:
                    del self.progress[key]

    def _stall_reason(self, key: str, units_left: list[unit_repo.Unit]) -> str:
        return stall_reason(
            key,
            units_left,
            self.units.unplaced,
            self.copies.from_server(key),
            self.ls.reports(),
            self.servers.get(key),
        )

    def finalize_job(self, conn: sa.Connection, ip: str, port: int) -> None:
        """In the transaction ``conn`` that removes the emptied server ``ip:port``: its job's
        ``extra_info`` shows everything moved (the job itself becomes SUCCESS in the same
        transaction, SPEC.md section 9). Nothing when this RS kept no progress for it."""
        key = f"{ip}:{port}"
        with self._lock:
            p = self.progress.pop(key, None)
        if p is None:
            return
        p.stalled = ""
        text = job_info(p, p.units_total, p.replicas_total, p.bytes_total, "")
        job_repo.set_job_extra_info(conn, JOB_TYPE, ip, port, text)
