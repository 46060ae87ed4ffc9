"""Unit moves off servers being emptied (docs/design/migration.md; OceanBase's ``ObRootBalancer`` /
``ObUnitManager`` unit migration), recorded in ``__all_unit``:

- **Start.** For each unit of a DELETING or permanently offline server the unit plan gives a
  target; :meth:`UnitMoves.apply_unit_plan` records the move (``svr_*`` = target,
  ``migrate_from_svr_*`` = source), in batches, re-checking the plan's premises in the same
  transaction (see :meth:`UnitMoves.stale_move`).
- **Completion.** A moving unit is done when no LS of its unit group has a replica on the
  source any more: ``migrate_from`` is cleared (:meth:`UnitMoves.finish_units`), only while
  the unit row is still the one the round read.
- **Manual moves.** ALTER SYSTEM MIGRATE UNIT records its move the same way
  (:mod:`rootservice.balancer.unit_migration`); its ``MIGRATE_UNIT`` job ends SUCCESS in the
  transaction that finishes the unit.
- **CANCEL DELETE.** Units still moving away from the server go back
  (:meth:`UnitMoves.move_back`, in the statement's own transaction); moved units stay.

A plan computed before a state change moves nothing: the rows whose premises no longer hold
are skipped, counted in ``stale_plan_rows_total`` and in :attr:`UnitMoves.last_stale`.
Every write is a fenced transaction (docs/design/ha.md#fenced-writes) with its events. Times are
microseconds since the epoch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import sqlalchemy as sa

from obcommon.clock import Clock
from rootservice.balancer.planner import Row
from rootservice.balancer.ports import LayoutVersion, LsKey, LsLayout, Store, Waker, Whitelist
from rootservice.db import event_repo, job_repo, ls_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics
from rootservice.servers.status import AdminStatus, HeartbeatStatus

log = logging.getLogger(__name__)

#: Units moved per transaction.
BATCH = 500


class UnitMoves:
    """Starts, finishes and reverts unit moves in ``__all_unit``.

    ``layout`` is raised after every change so the tenant layer re-reads the layout; ``wake``
    runs the ``empty_server_checker`` once units finished moving. :attr:`unplaced` holds the
    units the last unit plan found no server for (unit_id -> why), for the jobs' stall
    reasons: a dict replaced whole under a short lock, never changed in place, so readers
    take it without a lock. :attr:`last_stale` counts the plan rows the last
    :meth:`apply_unit_plan` or :meth:`finish_units` skipped as stale.
    """

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: LsLayout,
        layout: LayoutVersion,
        store: Store,
        clock: Clock,
        metrics: Metrics,
        wake: Waker,
    ) -> None:
        """Nothing is read until the first call."""
        self.servers = servers
        self.ls = ls
        self.layout = layout
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.wake = wake
        self.unplaced: dict[int, str] = {}  # unit_id -> why it found no server
        self.last_stale = 0
        # Guards ``unplaced`` only; never held across a transaction, an RPC or a plan.
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget the placement failures (step-down)."""
        with self._lock:
            self.unplaced = {}

    def stale_move(self, row: Row) -> str:
        """Why the planned unit move ``row`` (a unit plan row) must not be applied now, or
        ``''``: the source is no longer DELETING nor permanently offline (a CANCEL DELETE
        committed since the plan), or the destination is gone, not alive, DELETING, stopped
        or in another zone than the unit. Called inside the applying transaction, i.e.
        under the store's write lock, which every server statement holds while it writes
        the table and then the whitelist, so the whitelist read here is the committed one. That the unit is still on the source and not moving is
        :func:`rootservice.db.unit_repo.start_unit_move`'s check, in the same transaction."""
        src = self.servers.get(f"{row['from_svr_ip']}:{row['from_svr_port']}")
        if src is None:
            return "the source left the whitelist"
        if (
            src.admin_status is not AdminStatus.DELETING
            and src.hb_status is not HeartbeatStatus.PERMANENT_OFFLINE
        ):
            return "the source is no longer being emptied"
        dest = self.servers.get(f"{row['to_svr_ip']}:{row['to_svr_port']}")
        if dest is None:
            return "the destination left the whitelist"
        if not dest.is_alive():
            return "the destination is not alive"
        if dest.admin_status is AdminStatus.DELETING:
            return "the destination is being deleted"
        if dest.is_stopped():
            return "the destination is stopped"
        if row.get("zone") and dest.zone != row["zone"]:
            return "the destination is in another zone"
        return ""

    def moving(self) -> list[unit_repo.Unit]:
        """The units being moved (``migrate_from`` set), by unit id."""
        with self.store.read() as conn:
            return [u for u in unit_repo.load_units(conn) if u.migrate_from]

    def apply_unit_plan(self, rows: Sequence[Row]) -> int:
        """Record the planned unit moves (unit plan rows, see
        :meth:`rootservice.balancer.planner.Planner.unit_plan`) in ``__all_unit`` (batched
        fenced transactions), skipping stale rows (:meth:`stale_move`, or the unit is no
        longer on the source or already moving); remember the units that found no server
        (their reasons feed the jobs' stall messages). Returns the units moved; the stale
        rows skipped are in :attr:`last_stale` and ``stale_plan_rows_total``. Raises
        ``ObError`` when a transaction fails (the batches before it stay)."""
        placed = [r for r in rows if r.get("to_svr_ip")]
        unplaced = {int(r["unit_id"]): str(r["reason"]) for r in rows if not r.get("to_svr_ip")}
        with self._lock:
            self.unplaced = unplaced
        moved = stale = 0
        now = self.clock.now_us()
        for i in range(0, len(placed), BATCH):
            batch = placed[i : i + BATCH]
            events = []
            with self.store.txn() as conn:
                for r in batch:
                    src = (str(r["from_svr_ip"]), int(r["from_svr_port"]))
                    dest = (str(r["to_svr_ip"]), int(r["to_svr_port"]))
                    why = self.stale_move(r)
                    if why:
                        stale += 1
                        log.debug("balancer: unit %s not moved: %s", r["unit_id"], why)
                        continue
                    if not unit_repo.start_unit_move(conn, int(r["unit_id"]), src, dest, now):
                        stale += 1  # moved (or moved back) since the plan read it
                        continue
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
        self._count_stale(stale)
        if moved:
            self.metrics.inc("unit_moves_total", moved)
            self.layout_changed()
            log.info("balancer: %d unit(s) start moving", moved)
        return moved

    def _count_stale(self, n: int) -> None:
        self.last_stale = n
        if n:
            self.metrics.inc("stale_plan_rows_total", n)

    def layout_changed(self) -> None:
        """Make the tenant layer re-read the layout (after a committed change of
        ``__all_unit``)."""
        self.layout.version += 1

    def finish_units(self) -> int:
        """Clear ``migrate_from`` of moving units whose log streams no longer have a replica
        (reported by an alive server or in ``__all_ls_meta_table``) on the source. In the
        transaction, a unit is finished only while its row is still the one read here (on
        the same server, moving from the same source): one moved back by a CANCEL DELETE
        since is a stale row, counted in :attr:`last_stale`. Returns units
        finished; raises ``ObError`` when the transaction fails."""
        self.last_stale = 0
        topo = self.ls.topology()
        views = self.ls.views()
        with self.store.read() as conn:
            units = [u for u in unit_repo.load_units(conn) if u.migrate_from]
            meta = ls_repo.load_ls_meta(conn)
        if not units:
            return 0
        on_server: dict[str, set[LsKey]] = {}
        for k in meta:
            on_server.setdefault(f"{k[2]}:{k[3]}", set()).add((k[0], k[1]))
        # What a dead server last reported says nothing of what it holds now; its rows in
        # __all_ls_meta_table go with the member removal or the lost-replica cleanup.
        for key, view in views.items():
            for server in view.replicas:
                s = self.servers.get(server)
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
        units_done = list(done)
        if not done:
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            done = [
                u
                for u in done
                if unit_repo.finish_unit_move(
                    conn,
                    u.unit_id,
                    now,
                    on=(u.svr_ip, u.svr_port),
                    moving_from=(u.migrate_from_svr_ip, u.migrate_from_svr_port),
                )
            ]
            for u in done:
                if u.manual_migrate:
                    # ALTER SYSTEM MIGRATE UNIT's job ends with its move (OceanBase's
                    # end_migrate_unit COMMIT completes the MIGRATE_UNIT job).
                    job_repo.finish_unit_jobs(conn, "MIGRATE_UNIT", u.unit_id, "SUCCESS", now)
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
        self._count_stale(len(units_done) - len(done))
        if not done:
            return 0
        self.layout_changed()
        self.wake("empty_server_checker")
        return len(done)

    def move_back(self, conn: sa.Connection, server: str) -> list[unit_repo.Unit]:
        """CANCEL DELETE SERVER ``server`` (``'ip:port'``), in the statement's transaction
        ``conn`` (the units are back when the statement commits): units
        moving away from it go back (``svr`` = ``migrate_from``, event
        ``cancel_migrate_unit``); units that finished moving stay. Returns the units moved
        back as they were before (their ``server`` is the destination they leave). The
        caller calls :meth:`layout_changed` once committed. Database errors propagate (the
        caller's transaction turns them into ``ObError``)."""
        ip, _, port = server.rpartition(":")
        back = [
            u
            for u in unit_repo.load_units(conn)
            if u.migrate_from_svr_ip == ip and u.migrate_from_svr_port == int(port)
        ]
        now = self.clock.now_us()
        for u in back:
            unit_repo.move_unit_back(
                conn, u.unit_id, (u.migrate_from_svr_ip, u.migrate_from_svr_port), now
            )
        event_repo.insert_events(
            conn,
            [
                Event(
                    now,
                    "balancer",
                    "cancel_migrate_unit",
                    (("unit_id", u.unit_id), ("back_to", server), ("was_to", u.server)),
                )
                for u in back
            ],
            self.store.rs_addr,
        )
        return back
