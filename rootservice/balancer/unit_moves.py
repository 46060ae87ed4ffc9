"""Unit moves off servers being emptied (SPEC.md section 9; OceanBase's ``ObRootBalancer`` /
``ObUnitManager`` unit migration), recorded in ``__all_unit``:

- **Start.** For each unit of a DELETING or permanently offline server the unit plan gives a
  target; :meth:`UnitMoves.apply_unit_plan` records the move (``svr_*`` = target,
  ``migrate_from_svr_*`` = source), in batches, re-checking that the unit is still where the
  plan saw it.
- **Completion.** A moving unit is done when no LS of its unit group has a replica on the
  source any more: ``migrate_from`` is cleared (:meth:`UnitMoves.finish_units`).
- **CANCEL DELETE.** Units still moving away from the server go back
  (:meth:`UnitMoves.move_back`); moved units stay.

Every write is a fenced transaction (SPEC.md section 10) with its events. Times are
microseconds since the epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from obcommon.clock import Clock
from rootservice.balancer.planner import Row
from rootservice.balancer.ports import LayoutVersion, LsKey, LsLayout, Store, Waker, Whitelist
from rootservice.db import event_repo, ls_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: Units moved per transaction.
BATCH = 500


class UnitMoves:
    """Starts, finishes and reverts unit moves in ``__all_unit``.

    ``layout`` is raised after every change so the tenant layer re-reads the layout; ``wake``
    runs the ``empty_server_checker`` once units finished moving. :attr:`unplaced` holds the
    units the last unit plan found no server for (unit_id -> why), for the jobs' stall
    reasons.
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

    def clear(self) -> None:
        """Forget the placement failures (step-down)."""
        self.unplaced.clear()

    def moving(self) -> list[unit_repo.Unit]:
        """The units being moved (``migrate_from`` set), by unit id."""
        with self.store.read() as conn:
            return [u for u in unit_repo.load_units(conn) if u.migrate_from]

    def apply_unit_plan(self, rows: Sequence[Row]) -> int:
        """Record the planned unit moves (unit plan rows, see
        :meth:`rootservice.balancer.planner.Planner.unit_plan`) in ``__all_unit`` (batched
        fenced transactions), skipping units that moved meanwhile; remember the units that
        found no server (their reasons feed the jobs' stall messages). Returns the units
        moved. Raises ``ObError`` when a transaction fails (the batches before it stay)."""
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
                    src = (str(r["from_svr_ip"]), int(r["from_svr_port"]))
                    dest = (str(r["to_svr_ip"]), int(r["to_svr_port"]))
                    if unit_repo.start_unit_move(conn, int(r["unit_id"]), src, dest, now):
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
        self.layout.version += 1

    def finish_units(self) -> int:
        """Clear ``migrate_from`` of moving units whose log streams no longer have a replica
        (reported by an alive server or in ``__all_ls_meta_table``) on the source. Returns
        units finished; raises ``ObError`` when the transaction fails."""
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
        if not done:
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for u in done:
                unit_repo.finish_unit_move(conn, u.unit_id, now)
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
        self.wake("empty_server_checker")
        return len(done)

    def move_back(self, server: str) -> list[unit_repo.Unit]:
        """CANCEL DELETE SERVER ``server`` (``'ip:port'``): units moving away from it go back
        (``svr`` = ``migrate_from``, event ``cancel_migrate_unit``); units that finished
        moving stay. Returns the units moved back as they were before (their ``server`` is
        the destination they leave). Raises ``ObError`` when the transaction fails."""
        ip, _, port = server.rpartition(":")
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
            self._layout_changed()
        return back
