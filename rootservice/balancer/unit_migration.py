"""ALTER SYSTEM MIGRATE UNIT and CANCEL MIGRATE UNIT: a unit moved by hand to another server
of its zone, and the move reversed (OceanBase's ``ObUnitManager::admin_migrate_unit``,
``migrate_unit_`` and ``end_migrate_unit``, src/rootserver/ob_unit_manager.cpp).

- **Migrate.** The unit must exist and be ACTIVE; a destination equal to the unit's server
  changes nothing; one equal to the server it is moving from cancels the move (as OceanBase
  does). Otherwise, in this order: the destination is whitelisted (``OB_ENTRY_NOT_EXIST``),
  in the unit's zone (``OB_NOT_SUPPORTED``), hosts no unit of the same tenant (or, before the
  pool is granted, of the same pool; ``OB_NOT_SUPPORTED``), can take units in (alive, not
  DELETING, not stopped, not blocked, not being drained, its zone ACTIVE:
  ``OB_SERVER_MIGRATE_IN_DENIED``) and has room for the unit (``OB_MACHINE_RESOURCE_NOT_ENOUGH``
  naming the zone, the server and the resource); the unit is not moving already
  (``OB_NOT_SUPPORTED``). Then one fenced transaction records the move in ``__all_unit``
  (``svr_*`` = destination, ``migrate_from_svr_*`` = the source, ``manual_migrate`` = 1), a
  ``MIGRATE_UNIT`` job INPROGRESS about the unit and the destination, and event
  ``unit``/``migrate_unit``. The balancer then copies the unit's replicas exactly as it does
  for DELETE SERVER (the replica plan, :mod:`rootservice.balancer.copy_tasks`, the
  reconciler's member change) and :meth:`rootservice.balancer.unit_moves.UnitMoves.finish_units`
  ends the move and the job (SUCCESS). A unit of a pool no tenant uses holds no replica: it
  goes at once and its job is SUCCESS when created.
- **Progress.** :meth:`ManualUnitMoves.update_jobs` (each balancer round) writes the job's
  ``progress`` (log streams moved of the unit's log streams) and ``extra_info``.
- **Cancel.** The unit must be moving (``OB_ERR_UNEXPECTED``, "no migrate task to cancel")
  and the server it moves from must take units in (``OB_SERVER_MIGRATE_IN_DENIED``). One
  fenced transaction reverses the move (``svr`` = the source, ``migrate_from`` = the
  destination, ``manual_migrate`` = 0), ends the job CANCELED with ``OB_CANCELED``
  and writes event ``unit``/``finish_migrate_unit`` (``end_op`` REVERSE). Then the copies to
  the destination are forgotten and their partial replicas dropped (off the statement's
  path); replicas that had already arrived move back as a move does.

Times are microseconds since the epoch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.balancer.ports import LsKey, ReplicaWork, Store, Waker, Whitelist
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.db import event_repo, job_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.unit_repo import Unit
from rootservice.tenants.ports import ZoneDirectory
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.vocabulary import affinity_of, demand_of

log = logging.getLogger(__name__)

JOB_TYPE = "MIGRATE_UNIT"


class LockedStore(Store, Protocol):
    """The fenced store with its write lock (:class:`rootservice.ha.store.MetaStore`), held
    across a cancel's commit and the forgetting of its copies."""

    @property
    def write_lock(self) -> AbstractContextManager[bool]:
        """The lock every fenced transaction takes (re-entrant)."""
        ...


class ManualUnitMoves:
    """MIGRATE UNIT / CANCEL MIGRATE UNIT and the progress of their jobs.

    ``rooms`` gives each server's capacity, load and tenants (as CREATE RESOURCE POOL sees
    them); ``units`` bumps the layout after a change; ``copies`` forgets the copies of a
    cancelled move; ``background`` runs the drop of partial replicas off the statement's
    path; ``wake`` wakes the ``balancer``.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        zones: ZoneDirectory,
        rooms: ServerRooms,
        ls: ReplicaWork,
        units: UnitMoves,
        copies: CopyTasks,
        store: LockedStore,
        clock: Clock,
        wake: Waker,
        background: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        """Nothing is read until the first call; ``background`` None drops inline."""
        self.servers = servers
        self.zones = zones
        self.rooms = rooms
        self.ls = ls
        self.units = units
        self.copies = copies
        self.store = store
        self.clock = clock
        self.wake = wake
        self.background = background
        # job_id -> (progress, extra_info) last written, so an unchanged job is not rewritten.
        self._written: dict[int, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget what was written (step-down)."""
        with self._lock:
            self._written = {}

    # --- the statements -------------------------------------------------------------------

    def migrate(self, unit_id: int, destination: str, sql_text: str = "") -> int:
        """ALTER SYSTEM MIGRATE UNIT ``unit_id`` DESTINATION ``destination`` (``'ip:port'``).
        Returns the job id (0 when the unit is on the destination already; a destination
        equal to the server the unit moves from cancels the move and returns the cancelled
        job's id). Raises OB_INVALID_ARGUMENT (a bad address), OB_ENTRY_NOT_EXIST,
        OB_OP_NOT_ALLOW, OB_NOT_SUPPORTED, OB_SERVER_MIGRATE_IN_DENIED,
        OB_MACHINE_RESOURCE_NOT_ENOUGH (see the module doc); nothing changes then."""
        ip, port = parse_server(destination)
        dest = format_server(ip, port)
        now = self.clock.now_us()
        with self.store.write_lock:
            with self.store.txn() as conn:
                unit = self._unit(conn, unit_id)
                if dest == unit.server:
                    return 0
                if dest == unit.migrate_from:
                    cancelled = self._cancel_in(conn, unit, now)
                else:
                    cancelled = None
                    job_id = self._start(conn, unit, dest, now, sql_text)
            if cancelled is not None:
                return self._after_cancel(cancelled)
        self.units.layout_changed()
        self.wake("balancer")
        log.info("unit %d: migrating %s -> %s by hand (job %d)", unit_id, unit.server, dest, job_id)
        return job_id

    def _start(self, conn: sa.Connection, unit: Unit, dest: str, now: int, sql_text: str) -> int:
        """The checks and the writes of a move by hand (see the module doc); returns the job
        id."""
        ip, port = parse_server(dest)
        s = self.servers.get(dest)
        if s is None:
            raise ObError("OB_ENTRY_NOT_EXIST", "destination server not found in the cluster")
        if s.zone != unit.zone:
            raise ObError("OB_NOT_SUPPORTED", "migrate unit between zones")
        pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
        pool = pools[unit.resource_pool_id]
        rooms = {r.key: r for r in self.rooms.rooms(conn)}
        room = rooms.get(dest)
        if room is not None and affinity_of(pool) in room.affinity:
            raise ObError("OB_NOT_SUPPORTED", "hold two units of a tenant in the same server")
        why = self._migrate_in_denied(dest)
        if why:
            raise ObError("OB_SERVER_MIGRATE_IN_DENIED", detail=f"server '{dest}' {why}")
        configs = {c.unit_config_id: c for c in unit_repo.load_unit_configs(conn).values()}
        short = room.short_resource(demand_of(configs[pool.unit_config_id])) if room else None
        if room is None or short is not None:
            raise ObError("OB_MACHINE_RESOURCE_NOT_ENOUGH", unit.zone, dest, short or "MEMORY_SIZE")
        if unit.migrate_from:
            raise ObError("OB_NOT_SUPPORTED", "migrate unit already in migrating status")
        granted = pool.tenant_id != -1
        tenant_id = pool.tenant_id if granted else None
        job_id = job_repo.create_job(
            conn,
            JOB_TYPE,
            ip,
            port,
            now,
            self.store.rs_addr,
            sql_text,
            tenant_id=tenant_id,
            unit_id=unit.unit_id,
        )
        if granted:
            if not unit_repo.start_unit_move(
                conn, unit.unit_id, (unit.svr_ip, unit.svr_port), (ip, port), now, manual=True
            ):
                raise ObError("OB_NOT_SUPPORTED", "migrate unit already in migrating status")
        else:
            # Nothing to copy: the move is done when written (OceanBase completes the job
            # at once for a pool not granted).
            unit_repo.place_unit(conn, unit.unit_id, (ip, port), now)
            job_repo.finish_job(conn, job_id, "SUCCESS", now)
        event_repo.insert_events(
            conn,
            [
                Event(
                    now,
                    "unit",
                    "migrate_unit",
                    (
                        ("unit_id", unit.unit_id),
                        ("migrate_from_server", unit.server if granted else ""),
                        ("server", dest),
                        ("tenant_id", pool.tenant_id),
                        ("manual_migrate", "YES"),
                    ),
                )
            ],
            self.store.rs_addr,
        )
        return job_id

    def cancel(self, unit_id: int) -> int:
        """ALTER SYSTEM CANCEL MIGRATE UNIT ``unit_id``: reverse its move (see the module
        doc). Returns the cancelled job's id (0 when the move had no job: one the balancer
        started). Raises OB_ENTRY_NOT_EXIST, OB_OP_NOT_ALLOW, OB_ERR_UNEXPECTED (not moving),
        OB_SERVER_MIGRATE_IN_DENIED (the server it moves from cannot take it back)."""
        now = self.clock.now_us()
        with self.store.write_lock:
            with self.store.txn() as conn:
                unit = self._unit(conn, unit_id)
                if not unit.migrate_from:
                    raise ObError("OB_ERR_UNEXPECTED", "no migrate task to cancel")
                cancelled = self._cancel_in(conn, unit, now)
            return self._after_cancel(cancelled)

    # --- progress -------------------------------------------------------------------------

    def update_jobs(self) -> int:
        """Write ``progress`` (0-99: the unit's log streams whose replica is in service on
        the destination and gone from the source, of all its log streams) and ``extra_info``
        of every INPROGRESS MIGRATE_UNIT job whose unit still moves; SUCCESS is written when
        the move ends (:meth:`UnitMoves.finish_units`). Returns the jobs written. Raises
        ``ObError`` when a transaction fails."""
        with self.store.read() as conn:
            jobs = job_repo.inprogress_unit_jobs(conn, JOB_TYPE)
            if not jobs:
                return 0
            units = {u.unit_id: u for u in unit_repo.load_units(conn)}
        views = self.ls.views()
        writes = []
        for uid, job_id in jobs.items():
            u = units.get(uid)
            if u is None or not u.migrate_from:
                continue
            keys = self._keys(u)
            moved = 0
            for k in keys:
                view = views.get(k)
                if view is None:
                    continue
                r = view.replicas.get(u.server)
                if r is not None and r.in_service and u.migrate_from not in view.replicas:
                    moved += 1
            progress = min(99, moved * 100 // len(keys)) if keys else 0
            info = f"moved {moved} of {len(keys)} log stream(s) from {u.migrate_from} to {u.server}"
            with self._lock:
                if self._written.get(job_id) == (progress, info):
                    continue
            writes.append((job_id, progress, info))
        if not writes:
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for job_id, progress, info in writes:
                job_repo.set_job_progress(conn, job_id, progress, info, now)
        with self._lock:
            for job_id, progress, info in writes:
                self._written[job_id] = (progress, info)
        return len(writes)

    # --- helpers --------------------------------------------------------------------------

    def _unit(self, conn: sa.Connection, unit_id: int) -> Unit:
        unit = next((u for u in unit_repo.load_units(conn) if u.unit_id == unit_id), None)
        if unit is None:
            raise ObError("OB_ENTRY_NOT_EXIST", "unit_id not existed")
        if unit.status != "ACTIVE":
            raise ObError("OB_OP_NOT_ALLOW", "migrate a unit which is in deleting status")
        return unit

    def _migrate_in_denied(self, server: str) -> str:
        """Why ``server`` may not take a unit in (``''``: it may): OceanBase's
        ``can_migrate_in`` (ACTIVE, not DELETING, migrate-in not blocked), and here also in
        service, not stopped, not being drained, its zone ACTIVE."""
        s = self.servers.get(server)
        if s is None:
            return "is not in the whitelist"
        if not s.is_alive():
            return "is not ACTIVE"
        if not s.can_migrate_in():
            return "is being deleted or blocks migrations in"
        if not s.in_service() or s.is_stopped():
            return "is not in service (stopped or not started)"
        if s.draining:
            return "is being drained"
        if not self.zones.is_active(s.zone):
            return f"is in zone '{s.zone}', which is not ACTIVE"
        return ""

    def _keys(self, u: Unit) -> set[LsKey]:
        """The log streams the unit serves (its server a member with its unit id)."""
        return {
            k
            for k, p in self.ls.topology().plans.items()
            if u.server in p.members and p.members[u.server][1] == u.unit_id
        }

    def _cancel_in(self, conn: sa.Connection, unit: Unit, now: int) -> _Cancelled:
        """Reverse ``unit``'s move in the statement's transaction ``conn``. Returns the
        cancelled job id and what :meth:`_after_cancel` forgets once committed."""
        why = self._migrate_in_denied(unit.migrate_from)
        if why:
            raise ObError(
                "OB_SERVER_MIGRATE_IN_DENIED", detail=f"server '{unit.migrate_from}' {why}"
            )
        keys = self._keys(unit)
        on = (unit.svr_ip, unit.svr_port)
        src = (unit.migrate_from_svr_ip, unit.migrate_from_svr_port)
        if not unit_repo.reverse_unit_move(conn, unit.unit_id, on, src, now):
            raise ObError("OB_ERR_UNEXPECTED", "no migrate task to cancel")
        jobs = job_repo.inprogress_unit_jobs(conn, JOB_TYPE)
        job_id = jobs.get(unit.unit_id, 0)
        job_repo.finish_unit_jobs(
            conn,
            JOB_TYPE,
            unit.unit_id,
            "CANCELED",
            now,
            ObError("OB_CANCELED").code,
        )
        event_repo.insert_events(
            conn,
            [
                Event(
                    now,
                    "unit",
                    "finish_migrate_unit",
                    (
                        ("unit_id", unit.unit_id),
                        ("end_op", "REVERSE"),
                        ("migrate_from_server", unit.migrate_from),
                        ("server", unit.server),
                        ("manual_migrate", "YES" if unit.manual_migrate else "NO"),
                    ),
                )
            ],
            self.store.rs_addr,
        )
        return _Cancelled(job_id, unit.server, frozenset(keys))

    def _after_cancel(self, c: _Cancelled) -> int:
        """Once the reverse committed (the statement still holds the write lock, so a
        round's premise checks see it whole or not at all): the layout is re-read, the copies
        of the unit's log streams to the destination it left are forgotten and their partial
        replicas dropped. Returns the cancelled job id."""
        self.units.layout_changed()
        drops = self.copies.cancel_to({c.dest}, set(c.keys))
        if self.background is None:
            self.copies.drop(drops)
        else:
            self.background(lambda: self.copies.drop(drops))
        self.wake("balancer")
        log.info("unit move to %s cancelled (job %d)", c.dest, c.job_id)
        return c.job_id


@dataclass(frozen=True)
class _Cancelled:
    """A reversed move: its job (0: none), the destination it left, its log streams."""

    job_id: int
    dest: str
    keys: frozenset[LsKey]
