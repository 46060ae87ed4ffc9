"""Progress of DELETE_SERVER jobs (docs/design/migration.md; OceanBase's ``ObRsJobTableOperator``
rows of ``__all_rootservice_job``).

Each INPROGRESS ``DELETE_SERVER`` job carries ``progress`` (0-100) and, in ``extra_info``
(compact JSON), units / replicas moved of total, bytes copied, an estimate of the time left
and, when nothing moved for ``migration_stall_time``, ``stalled: <reason>`` naming what
blocks (:func:`stall_reason`; also an event ``migration_stalled`` each time the reason
changes). The totals are fixed at the job's first round and kept in ``extra_info`` with the
job's start and last progress, so a new leader reads them back and the percentage never falls
back after a failover. A planner that fails (:meth:`DeleteJobProgress.
planner_failed`) is the stall reason of every job (``planner failed: <cause>``) until it works
again. In the transaction that removes the emptied server,
:meth:`DeleteJobProgress.finalize_job` shows everything moved.

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
from rootservice.balancer.ports import (
    EventSink,
    LsKey,
    LsStatus,
    Reports,
    Store,
    Whitelist,
)
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.config import RsSettings
from rootservice.db import job_repo, ls_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.servers.status import ServerStatus
from rootservice.tenants.placement import format_bytes

log = logging.getLogger(__name__)

JOB_TYPE = "DELETE_SERVER"

#: Log streams a stall reason names at most (the count says how many there are).
NAMED_LS = 3

#: Prefix of the stall reason while the planner fails.
PLANNER_FAILED = "planner failed: "


@dataclass
class JobProgress:
    """What one DELETE_SERVER job has done: the totals are fixed at its first round
    (``bytes_total`` in bytes, times in microseconds; ``last_done`` units + replicas moved
    when last changed at ``last_change_us``, ``stalled`` the reported reason or ``''``).
    ``job_id``, ``percent`` (0-100) and ``bytes_done`` are those of the last round, for
    ``/metrics``; ``bytes_done`` never decreases (a restarted copy does not take
    back what the operator was shown)."""

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
    copied (also human-readable as ``copied``), ``eta``, ``stalled``, and the baseline a new
    leader reads back (:func:`restore_progress`): ``started_us`` and ``last_progress_us``."""
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
        "started_us": p.started_us,
        "last_progress_us": p.last_change_us,
    }
    return json.dumps(info, separators=(",", ":"))


def restore_progress(job_id: int, extra_info: str) -> JobProgress | None:
    """The progress a former leader kept in the job's ``extra_info`` (:func:`job_info`), or
    None when it holds none (a new job, or text that is not such JSON)."""
    try:
        info = json.loads(extra_info) if extra_info else None
        if not isinstance(info, dict):
            return None
        started = int(info["started_us"])
        return JobProgress(
            units_total=int(info["units_total"]),
            replicas_total=int(info["replicas_total"]),
            bytes_total=int(info["bytes_total"]),
            started_us=started,
            last_change_us=int(info.get("last_progress_us", started)),
            last_done=int(info["units_moved"]) + int(info["replicas_moved"]),
            stalled=str(info.get("stalled", "")),
            job_id=job_id,
            bytes_done=int(info.get("bytes_copied", 0)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _ls_list(keys: Sequence[LsKey]) -> str:
    named = ", ".join(f"{t}/{ls}" for t, ls in sorted(keys)[:NAMED_LS])
    more = f" and {len(keys) - NAMED_LS} more" if len(keys) > NAMED_LS else ""
    return f"{named}{more}"


def stall_reason(
    key: str,
    units_left: Sequence[unit_repo.Unit],
    unplaced: Mapping[int, str],
    copies: Iterable[CopyTask],
    reports: Reports,
    server: ServerStatus | None,
    *,
    replicas_left: Sequence[LsKey] = (),
    leaderless: Sequence[LsKey] = (),
    planner_failure: str = "",
) -> str:
    """Why the emptying of ``key`` (``'ip:port'``, whitelist entry ``server``) moves nothing,
    naming what blocks, first match wins:

    1. the planner fails (``planner_failure``): ``planner failed: <cause>``;
    2. a unit left found no room (``unplaced``: unit_id -> the unit plan's reason, which
       names the resource short, how much is needed and how much is free);
    3. a copy off the server reports a build error;
    4. some LS with a replica on the server has no leader (``leaderless``, ``(tenant_id,
       ls_id)``): no member change can happen;
    5. the server is dead with no healthy source;
    6. else the replicas still on it (``replicas_left``): how many and the first few
       ``tenant/ls``, waiting for their copies and member changes.

    LS are written ``tenant_id/ls_id``."""
    if planner_failure:
        return PLANNER_FAILED + planner_failure
    for u in units_left:
        if u.unit_id in unplaced:
            return f"unit {u.unit_id} in zone {u.zone} has no room: {unplaced[u.unit_id]}"
    for task in copies:
        r = reports.get(task.dest, {}).get(task.key)
        if r is not None and r.build_error:
            return f"LS {task.key[0]}/{task.key[1]} copy to {task.dest}: {r.build_error}"
    if leaderless:
        n = len(leaderless)
        return f"{n} LS without a leader ({_ls_list(leaderless)}): no member change can happen"
    if server is not None and not server.is_alive():
        return "the server is not alive and some LS has no healthy source"
    if replicas_left:
        n = len(replicas_left)
        return (
            f"{n} replica(s) still on the server ({_ls_list(replicas_left)}): waiting for "
            "their copies to catch up and for member changes"
        )
    return "waiting for member changes"


class DeleteJobProgress:
    """Refreshes the INPROGRESS DELETE_SERVER jobs each balancer round and finalizes a job
    when its server is removed.

    ``units`` and ``copies`` are the balancer's unit moves and copies in flight (read only);
    ``ls`` gives the replica reports and the LS views (their leaders, for stall reasons);
    ``events`` queues the ``migration_stalled`` events; ``settings`` give
    ``migration_stall_time``. :attr:`planner_failure` is the cause of the last failed plan
    (``''`` while the planner works), set by the balancer.
    :attr:`progress` (by ``'ip:port'``) is guarded by a short lock
    of its own (CANCEL DELETE forgets a job while a round may be updating the jobs), never held across a transaction, an RPC or a plan.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: LsStatus,
        events: EventSink,
        store: Store,
        clock: Clock,
        settings: RsSettings,
        units: UnitMoves,
        copies: CopyTasks,
    ) -> None:
        """No job known yet: each job's totals are taken at its first round here, or read
        back from its row (a former leader's)."""
        self.servers = servers
        self.ls = ls
        self.events = events
        self.store = store
        self.clock = clock
        self.settings = settings
        self.units = units
        self.copies = copies
        self.progress: dict[str, JobProgress] = {}
        self.planner_failure = ""
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every job's progress and the planner's failure (step-down)."""
        with self._lock:
            self.progress.clear()
        self.planner_failure = ""

    def planner_failed(self, cause: str) -> None:
        """The planner failed with ``cause`` (a short line): every job whose stall time has
        passed reports ``planner failed: <cause>`` at the next :meth:`update_jobs`."""
        self.planner_failure = cause

    def planner_works(self) -> None:
        """The planner computed a plan again: a ``planner failed`` stall clears, and the job
        gets a fresh ``migration_stall_time`` before another reason is reported."""
        if not self.planner_failure:
            return
        self.planner_failure = ""
        now = self.clock.now_us()
        with self._lock:
            for p in self.progress.values():
                if p.stalled.startswith(PLANNER_FAILED):
                    p.stalled, p.last_change_us = "", now

    def forget(self, server: str) -> None:
        """Forget the progress of ``server``'s job (``'ip:port'``; CANCEL DELETE)."""
        with self._lock:
            self.progress.pop(server, None)

    def update_jobs(self) -> None:
        """Refresh ``progress`` and ``extra_info`` of every INPROGRESS DELETE_SERVER job
        (a job this RS has not seen yet resumes from the baseline in its row), and report a
        stall (log and event ``migration_stalled``, again only when the reason changes) when
        nothing moved for ``migration_stall_time``. A job that ended since it was read
        (CANCEL DELETE) keeps its final row and its progress is forgotten here too, so that a
        later DELETE of the same server starts afresh. Raises ``ObError`` when the transaction
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
                p = self.progress.get(key)
                if p is None:
                    p = restore_progress(j.job_id, j.extra_info) or JobProgress(
                        len(units_left), len(replicas_left), bytes_left, now, now
                    )
                    self.progress[key] = p
            copied = 0
            for task in self.copies.from_server(key):
                r = reports.get(task.dest, {}).get(task.key)
                if r is not None:
                    copied += r.data_size if r.in_service else r.bytes_copied
            units_moved = max(0, p.units_total - len(units_left))
            replicas_moved = max(0, p.replicas_total - len(replicas_left))
            bytes_done = max(p.bytes_done, max(0, p.bytes_total - bytes_left) + copied)
            total = p.units_total + p.replicas_total
            done = units_moved + replicas_moved
            percent = 99 if total and done >= total else (100 * done // total if total else 0)
            if done != p.last_done:
                p.last_done, p.last_change_us, p.stalled = done, now, ""
            elif now - p.last_change_us >= self.settings.migration_stall_time:
                ls_left = [(k[0], k[1]) for k in replicas_left]
                reason = self._stall_reason(key, units_left, ls_left)
                if reason != p.stalled:
                    p.stalled = reason
                    self.events.add_event(
                        Event(
                            now,
                            "balancer",
                            "migration_stalled",
                            (("server", key), ("reason", reason)),
                        )
                    )
                    log.warning("DELETE SERVER %s makes no progress: %s", key, reason)
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

    def _stall_reason(
        self, key: str, units_left: list[unit_repo.Unit], ls_left: list[LsKey]
    ) -> str:
        views = self.ls.views()
        leaderless = [k for k in ls_left if (v := views.get(k)) is not None and v.leader is None]
        return stall_reason(
            key,
            units_left,
            self.units.unplaced,
            self.copies.from_server(key),
            self.ls.reports(),
            self.servers.get(key),
            replicas_left=ls_left,
            leaderless=leaderless,
            planner_failure=self.planner_failure,
        )

    def finalize_job(self, conn: sa.Connection, ip: str, port: int) -> None:
        """In the transaction ``conn`` that removes the emptied server ``ip:port``: its job's
        ``extra_info`` shows everything moved (the job itself becomes SUCCESS in the same
        transaction, docs/design/migration.md). Without progress in this RS's memory the baseline a
        former leader left in the row is used; nothing when there is none either."""
        key = f"{ip}:{port}"
        with self._lock:
            p = self.progress.pop(key, None)
        if p is None:
            for j in job_repo.inprogress_jobs(conn, JOB_TYPE):
                if j.server == key:
                    p = restore_progress(j.job_id, j.extra_info)
        if p is None:
            return
        p.stalled = ""
        text = job_info(p, p.units_total, p.replicas_total, p.bytes_total, "")
        job_repo.set_job_extra_info(conn, JOB_TYPE, ip, port, text)
