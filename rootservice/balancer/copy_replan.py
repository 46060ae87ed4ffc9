"""Re-planning a copy's destination: a unit migration whose
destination stalls, or is being drained, is sent to another server of its zone.

A copy's destination is its unit's server (``__all_unit.svr_*``; the unit moves from
``migrate_from_svr_*``, :mod:`rootservice.balancer.unit_moves`). Two things make that server
a bad destination while the unit is still moving there:

- **A stalled copy.** The lag detector finds a copy whose bytes did not move for twice
  ``agent_lag_timeout`` (event ``copy_stalled``) and calls :meth:`CopyReplan.stalled`. The
  first time, when another healthy member can serve it, the copy is sent again from that
  member (:meth:`rootservice.balancer.copy_tasks.CopyTasks.restart_stalled`: a stalled
  *source*). When it stalls again after that resend, or at once when no other member can
  serve it, the destination is the problem (a receiving side that takes no bytes, e.g. the
  agent's ``FAULT_COPY_STALL``), and the unit's target is re-planned.
- **A drained destination.** DRAIN SERVER isolates its server, so it is no destination any
  more: each drain round calls :meth:`CopyReplan.leave`, and every unit still moving to it
  with a log stream not yet built there is re-planned. The drain's "copies left" is
  :meth:`CopyReplan.copies_left`: the copies in flight from or to it and those still to
  come (a log stream planned there and not built), so it ends only once they are done or
  went elsewhere.

The re-plan runs at the start of the balancer's round (:meth:`CopyReplan.run`, under the
round's lock, so no plan of that round predates it). In one fenced transaction the unit's
row is checked to be still on that destination moving from the same source, a new target is
chosen by the planner's own rule (:meth:`rootservice.tenants.rooms.ServerRooms.place`:
alive, NORMAL, not stopped, zone ACTIVE, room for the unit, anti-affinity, least load), here
also excluding SUSPECT and LAGGING servers, the unit's source, the destination it leaves and
the destinations re-planned away from for :data:`AVOID_TIMEOUTS` x ``agent_lag_timeout``
(memory; a stalled receiver is not LAGGING when its commands and disk answer), and the row
is updated with the event ``copy_replanned`` (module ``balancer``). Once committed, the
layout is re-read, the copies of that unit's log streams to the old destination are
forgotten and their partial replicas dropped there (as CANCEL DELETE does, plus a built one
that is not yet a member), and the same round's plan hands the copies to the new target.
When no server qualifies the event is ``copy_replan_failed`` with the placement's reason
(again only when it changes), a stalled copy keeps today's resend, and a drain waits for the
copy and names the reason among its blockers.

OceanBase's ``ObServerBalancer::distribute_for_migrate_in_blocked``
(``src/rootserver/ob_server_balancer.cpp``) handles a unit whose migration destination is
blocked: it reverses the migration when the source can take the unit back, and leaves
"choose a new machine C" (``get_excluded_servers`` + ``choose_server_for_unit``) as a
commented-out TODO for a source that cannot. Here the source is DELETING or permanently
offline, so it cannot: this is that second case. Times are microseconds (monotonic for the
avoid windows).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from obcommon.addresses import parse_server
from obcommon.clock import Clock
from rootservice.balancer.ports import (
    CopyLedger,
    LayoutVersion,
    LsKey,
    ReplicaWork,
    Store,
    UnitRooms,
    Waker,
    Whitelist,
)
from rootservice.config import RsSettings
from rootservice.db import event_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: A destination a stalled copy was re-planned away from gets no re-planned unit for this many
#: ``agent_lag_timeout`` (memory only).
AVOID_TIMEOUTS = 10


@dataclass(frozen=True)
class Replan:
    """A unit to send elsewhere: ``unit_id`` moving to ``dest`` (``'ip:port'``), because of
    ``reason``; ``key`` is the stalled copy's LS (None for a drain), whose resend is the
    fallback when nowhere else qualifies."""

    dest: str
    unit_id: int
    reason: str
    key: LsKey | None = None


def ls_text(key: LsKey) -> str:
    """``'1002.1001'`` for ``(tenant_id, ls_id)``."""
    return f"{key[0]}.{key[1]}"


class CopyReplan:
    """Re-plans the destination of unit migrations (see the module doc).

    ``copies`` are the copies in flight, ``ls`` the layout, reports and member lists,
    ``rooms`` the unit placement, ``servers`` the whitelist, ``store`` the fenced
    transactions (events written in them), ``layout`` the version raised after a change,
    ``wake`` runs the ``balancer`` when a re-plan is due; ``settings.agent_lag_timeout`` sizes
    the avoid window."""

    def __init__(
        self,
        *,
        copies: CopyLedger,
        ls: ReplicaWork,
        rooms: UnitRooms,
        servers: Whitelist,
        store: Store,
        layout: LayoutVersion,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
        wake: Waker,
    ) -> None:
        """Nothing due."""
        self.copies = copies
        self.ls = ls
        self.rooms = rooms
        self.servers = servers
        self.store = store
        self.layout = layout
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.wake = wake
        # Guards the four below; never held across a transaction or an RPC.
        self._lock = threading.Lock()
        self._due: dict[tuple[str, int], Replan] = {}  # (dest, unit_id) -> what to do
        self._leaving: set[str] = set()  # servers being drained
        self._avoid: dict[str, int] = {}  # server -> monotonic end of its avoid window
        self._failed: dict[tuple[str, int], str] = {}  # (dest, unit_id) -> why not

    def clear(self) -> None:
        """Forget everything (step-down: the next leader judges afresh)."""
        with self._lock:
            self._due.clear()
            self._leaving.clear()
            self._avoid.clear()
            self._failed.clear()

    def stalled(self, key: LsKey, dest: str, /) -> bool:
        """The lag detector found the copy of ``key`` to ``dest`` (``'ip:port'``) stalled:
        sent again from another healthy member the first time there is one, else its unit's
        destination re-planned at the next balancer round (woken now). False when no such
        copy is in flight."""
        n = self.copies.stall_count(key, dest)
        if n is None:
            return False
        if n == 0 and self.copies.other_source(key, dest) is not None:
            self.copies.restart_stalled(key, dest)
            self.wake("balancer")
            return True
        plan = self.ls.topology().plans.get(key)
        member = plan.members.get(dest) if plan is not None else None
        if member is None:  # no unit places it there (any more): a resend is all there is
            return self.copies.restart_stalled(key, dest)
        why = "again after a resend from another member" if n else "and no other member has it"
        reason = (
            f"the copy of LS {ls_text(key)} to {dest} moved no byte for twice "
            f"agent_lag_timeout {why}"
        )
        with self._lock:
            self._due[(dest, member[1])] = Replan(dest, member[1], reason, key)
        self.wake("balancer")
        return True

    def leave(self, server: str, /) -> list[str]:
        """DRAIN SERVER's round for ``server`` (``'ip:port'``): the units moving to it are
        re-planned from the next balancer round on (woken the first time) while it is
        drained. Returns why some could not be, one line each (``"unit 1003 moving to it:
        zone 'z1' has no other active server ..."``), for the drain's blockers."""
        with self._lock:
            new = server not in self._leaving
            self._leaving.add(server)
            lines = [
                f"unit {u} moving to it: {why}"
                for (d, u), why in sorted(self._failed.items())
                if d == server
            ]
        if new:
            self.wake("balancer")
        return lines

    def copies_left(self, server: str, /) -> int:
        """DRAIN SERVER's "copies left" for ``server`` (``'ip:port'``): the copies in flight
        from, to or replacing a replica on it, plus, while it is alive, the log streams
        planned on it whose replica there is not built and has no copy in flight yet (a
        copy still to come: without them a drain that started before the hand-out, or
        before the re-plan of a unit moving there, finished at once and left the unit
        moving to an isolated server). In-memory reads only."""
        n = self.copies.involving(server)
        s = self.servers.get(server)
        if s is None or not s.is_alive():
            return n
        inflight = self.copies.keys_to(server)
        built = self.ls.reports().get(server, {})
        for k, p in self.ls.topology().plans.items():
            if server in p.members and k not in inflight:
                r = built.get(k)
                if r is None or not r.in_service or r.copy_from:
                    n += 1
        return n

    def run(self) -> int:
        """Re-plan every unit due (see the module doc); returns the units sent elsewhere.
        Cheap when nothing is due (no read). Raises ``ObError`` when a transaction fails
        (what was not done stays due)."""
        with self._lock:
            due = dict(self._due)
            leaving = set(self._leaving)
        if leaving:
            due.update(self._drained(leaving))
        if not due:
            return 0
        done = 0
        for k, r in sorted(due.items()):
            if self._replan(r):
                done += 1
            with self._lock:
                if self._due.get(k) is r:
                    del self._due[k]
        if done:
            self.metrics.inc("copy_replans_total", done)
        return done

    def _drained(self, leaving: set[str]) -> dict[tuple[str, int], Replan]:
        """The units moving to a server still being drained with a log stream not yet built
        there; servers no longer drained are forgotten."""
        still = set()
        for key in leaving:
            s = self.servers.get(key)
            if s is not None and s.draining:
                still.add(key)
        with self._lock:
            self._leaving &= still
            for k in [k for k in self._failed if k[0] in leaving - still]:
                del self._failed[k]
        if not still:
            return {}
        with self.store.read() as conn:
            units = [u for u in unit_repo.load_units(conn) if u.server in still]
        moving = {(u.server, u.unit_id) for u in units if u.migrate_from}
        with self._lock:
            # A reason stays a blocker only while its unit still moves there.
            for k in [k for k in self._failed if k[0] in still and k not in moving]:
                del self._failed[k]
        reports = self.ls.reports()
        out = {}
        for u in units:
            if (u.server, u.unit_id) not in moving:
                continue
            table = reports.get(u.server, {})
            keys = self._keys(u.server, u.unit_id)
            if any((r := table.get(k)) is None or not r.in_service or r.copy_from for k in keys):
                reason = f"its destination {u.server} is being drained"
                out[(u.server, u.unit_id)] = Replan(u.server, u.unit_id, reason)
        return out

    def _keys(self, dest: str, unit_id: int) -> set[LsKey]:
        """The log streams whose member on ``dest`` is unit ``unit_id``'s."""
        return {
            k
            for k, p in self.ls.topology().plans.items()
            if (m := p.members.get(dest)) is not None and m[1] == unit_id
        }

    def _unfit(self, mono: int) -> set[str]:
        """Servers no re-planned unit goes to: SUSPECT or LAGGING (as the planner's
        ``suspect`` column says, or by the monotonic clock), or in an avoid window."""
        with self._lock:
            self._avoid = {s: end for s, end in self._avoid.items() if end > mono}
            out = set(self._avoid)
        for s in self.servers.snapshot():
            if s.is_suspect(mono) or s.suspect_end_time or s.lagging_time:
                out.add(s.key)
        return out

    def _replan(self, r: Replan) -> bool:
        """One unit (see the module doc). Returns whether it was sent elsewhere."""
        mono, now = self.clock.monotonic_us(), self.clock.now_us()
        keys = self._keys(r.dest, r.unit_id)
        dest = parse_server(r.dest)
        to = why = ""
        with self.store.txn() as conn:
            unit = next(
                (u for u in unit_repo.units_on_server(conn, *dest) if u.unit_id == r.unit_id),
                None,
            )
            if unit is None or not unit.migrate_from:
                why = "the unit is not moving there any more"
            elif unit.manual_migrate:
                # The operator chose this destination (MIGRATE UNIT): the copy is resent
                # there, and CANCEL MIGRATE UNIT is the way back.
                why = "ALTER SYSTEM MIGRATE UNIT chose this destination"
            else:
                placed = self.rooms.place(
                    conn, [unit], avoid=self._unfit(mono) | {r.dest, unit.migrate_from}
                )
                if placed.failures:
                    why = placed.failures[0].reason
                else:
                    to = placed.chosen[unit.unit_id]
                    src = parse_server(unit.migrate_from)
                    if unit_repo.retarget_unit_move(
                        conn, unit.unit_id, src, dest, parse_server(to), now
                    ):
                        event_repo.insert_events(
                            conn, [self._event(now, r, unit.migrate_from, to)], self.store.rs_addr
                        )
                    else:
                        to, why = "", "the unit's row changed meanwhile"
        if not to:
            self._not_replanned(r, why, now, stale=unit is None or not unit.migrate_from)
            return False
        self.layout.version += 1
        with self._lock:
            self._failed.pop((r.dest, r.unit_id), None)
            if r.key is not None:
                self._avoid[r.dest] = mono + AVOID_TIMEOUTS * self.settings.agent_lag_timeout
        log.warning("unit %d: migration target %s -> %s (%s)", r.unit_id, r.dest, to, r.reason)
        self.copies.drop(self._partial(r.dest, keys))
        return True

    def _event(self, now: int, r: Replan, source: str, to: str) -> Event:
        return Event(
            now,
            "balancer",
            "copy_replanned",
            (
                ("unit_id", r.unit_id),
                ("from", r.dest),
                ("to", to),
                ("migrate_from", source),
                ("ls", ls_text(r.key) if r.key is not None else ""),
                ("reason", r.reason),
            ),
        )

    def _partial(self, dest: str, keys: set[LsKey]) -> dict[str, list[LsKey]]:
        """Forget the copies of ``keys`` to ``dest`` and what to drop there: what
        :meth:`CopyLedger.cancel_to` names, and a replica built there that is not a member
        yet (no plan names it any more, and no member change will)."""
        drops = self.copies.cancel_to({dest}, keys)
        views = self.ls.views()
        plans = self.ls.topology().plans
        extra = set()
        for k, r in self.ls.reports().get(dest, {}).items():
            p, v = plans.get(k), views.get(k)
            if k not in keys or not r.in_service or p is None or v is None:
                continue
            if v.leader is not None and dest not in self.ls.members(p, v):
                extra.add(k)
        if extra:
            drops[dest] = sorted(set(drops.get(dest, [])) | extra)
        return drops

    def _not_replanned(self, r: Replan, why: str, now: int, *, stale: bool) -> None:
        """Nowhere else (or stale): a stalled copy is resent as before; the reason is
        logged and recorded once per change."""
        if r.key is not None:
            self.copies.restart_stalled(r.key, r.dest)
        if stale:
            log.info("unit %d: no re-plan away from %s: %s", r.unit_id, r.dest, why)
            return
        with self._lock:
            changed = self._failed.get((r.dest, r.unit_id)) != why
            self._failed[(r.dest, r.unit_id)] = why
        if not changed:
            return
        log.warning(
            "unit %d: its migration to %s cannot be re-planned (%s): %s",
            r.unit_id,
            r.dest,
            r.reason,
            why,
        )
        with self.store.txn() as conn:
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "balancer",
                        "copy_replan_failed",
                        (
                            ("unit_id", r.unit_id),
                            ("from", r.dest),
                            ("ls", ls_text(r.key) if r.key is not None else ""),
                            ("reason", r.reason),
                            ("why", why),
                        ),
                    )
                ],
                self.store.rs_addr,
            )
