"""Fencing against a metadata store that went back in time.

The epoch in the lease row is unique only as long as the database never forgets a commit.
Promote an asynchronous PostgreSQL standby that missed the last epoch bump, or let a libpq
multi-host URL reach an old primary restarted writable, and two root services can hold the
same epoch. :class:`EpochFence` holds what one RS process knows beyond the lease row:

- **the agents' reports**: every lease request carries the highest token the agent obeyed
  (``rs_epoch``, ``rs_incarnation``). One above our own, or of our epoch with another
  incarnation (:func:`obcommon.fencing.reports_conflict`), means our epoch was handed out
  before: :meth:`EpochFence.report` records the demand and the election re-takes the lease
  row with :func:`choose_epoch` at its next round. A command this RS sends in between is not
  held back here: the agents that reported the higher token refuse it
  (:mod:`observer_agent.fence`), so it takes no effect. A take-office likewise starts above
  every epoch reported to this process, standby or leader;
- **the metadata server**: the PostgreSQL ``system_identifier`` and the highest timeline
  seen (:mod:`rootservice.db.server_identity`). A server of another system, or of a lower
  timeline (an old primary restarted writable), is refused at connect
  (:meth:`EpochFence.judge_server`; the engine tries the next server of a multi-host URL)
  and by every fenced transaction (:meth:`rootservice.ha.store.MetaStore.txn`, which steps
  down).
  A move to a higher timeline (a failover) starts :meth:`EpochFence.holding`: for one
  ``lease_time`` this RS neither takes office nor expires agents' leases, because the new
  server's clock and its copy of the lease row may differ from what the old one showed.

Times are integer microseconds (monotonic for the hold).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from obcommon.bounds import MAX_TERM_JUMP
from obcommon.clock import Clock
from obcommon.fencing import FenceToken, reports_conflict
from obcommon.files import write_atomic
from rootservice.db.server_identity import ServerIdentity
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: The file in the RS's data directory keeping the metadata server seen.
METADATA_SERVER_FILE = "metadata_server.json"


def choose_epoch(row_epoch: int, reported: Iterable[int]) -> int:
    """The epoch a root service takes office (or re-takes the lease row) with: one above the
    lease row's ``row_epoch`` and every epoch an agent reported. Without
    the reports an RS on a store that lost the last bump would reuse that epoch."""
    return max([row_epoch, *reported]) + 1


class EpochFence:
    """What this RS knows of the epochs agents obeyed and of the metadata servers it saw.

    ``lease_time()`` gives the hold after a change of primary (microseconds);
    ``on_primary_change(until_mono)`` is told when one starts (the take-office grace then
    holds agents' leases until ``until_mono``); ``metrics`` counts
    ``rs_epoch_conflicts_total``, ``rs_db_servers_refused_total`` and
    ``rs_primary_changes_total``. ``state_file`` keeps the server seen across restarts of
    this RS (a restarted RS must not take the old primary listed first in its URL for the
    one it wrote through; None: memory only). Thread-safe.
    """

    def __init__(
        self,
        clock: Clock,
        lease_time: Callable[[], int],
        metrics: Metrics | None = None,
        on_primary_change: Callable[[int], None] | None = None,
        state_file: Path | None = None,
    ) -> None:
        """Nothing reported; the server seen is the one ``state_file`` keeps (an unreadable
        file is logged and ignored)."""
        self.state_file = state_file
        self.clock = clock
        self.lease_time = lease_time
        self.metrics = metrics or Metrics()
        self.on_primary_change = on_primary_change
        self._lock = threading.Lock()
        #: The highest epoch this process knows was used: its own terms' and every epoch an
        #: agent reported to it.
        self.highest_known = 0
        # A report that conflicts with the term's token, not yet answered by a re-take:
        # (token, server).
        self._demand: tuple[FenceToken, str] | None = None
        #: The highest-timeline server seen (None before the first, and on SQLite).
        self.seen: ServerIdentity | None = self._load()
        self._hold_until_mono = 0

    # --- agents' reports ------------------------------------------------------------------

    def report(self, server: str, reported: FenceToken, own: FenceToken) -> bool:
        """An agent at ``server`` reports ``reported`` (the highest token it obeyed) to the
        RS holding ``own`` (epoch 0: not in office). True when it conflicts with ``own``:
        the demand is recorded for :meth:`take_demand` (the caller refuses the agent and
        wakes the election). Cheap when it does not conflict."""
        if not self.note_epoch(reported.epoch, server):
            return False
        if own.epoch == 0 or not reports_conflict(own, reported):
            return False
        with self._lock:
            if self._demand is None or reported.epoch > self._demand[0].epoch:
                self._demand = (reported, server)
        self.metrics.inc("rs_epoch_conflicts_total")
        return True

    def note_epoch(self, epoch: int, reporter: str = "") -> bool:
        """``epoch`` was used (a term of ours, an agent's report from ``reporter``): a later
        take-office starts above it. Cheap when it is not above :attr:`highest_known`.
        A report more than :data:`~obcommon.bounds.MAX_TERM_JUMP` above every epoch known is
        ignored and False returned (a forged or corrupt one must not push the epoch out of
        the agents' bounds)."""
        if epoch <= self.highest_known:
            return True
        if reporter and epoch > max(self.highest_known, 1) + MAX_TERM_JUMP:
            self.metrics.inc("rs_epoch_reports_ignored_total")
            log.warning("ignoring epoch %d reported by %s: an absurd jump", epoch, reporter)
            return False
        with self._lock:
            self.highest_known = max(self.highest_known, epoch)
        return True

    def take_demand(self) -> tuple[FenceToken, str] | None:
        """The highest conflicting report since the last call (then forgotten), or None."""
        with self._lock:
            demand, self._demand = self._demand, None
        return demand

    def pending(self) -> bool:
        """True while a conflicting report waits for a re-take."""
        return self._demand is not None

    # --- the metadata server --------------------------------------------------------------

    def judge_server(self, ident: ServerIdentity | None) -> str | None:
        """Why this RS must not use the server ``ident`` names (another system identifier,
        or a timeline below the highest seen), or None; an accepted higher timeline becomes
        the one seen and starts the hold (:meth:`holding`). None (SQLite, unreadable) is
        accepted."""
        if ident is None:
            return None
        changed = False
        with self._lock:
            seen = self.seen
            if seen is not None:
                if ident.system_id != seen.system_id:
                    why = (
                        f"server {ident} is another PostgreSQL system than {seen} this root "
                        "service wrote through (a restored or re-initialised database?)"
                    )
                    self.metrics.inc("rs_db_servers_refused_total")
                    return why
                if ident.timeline < seen.timeline:
                    self.metrics.inc("rs_db_servers_refused_total")
                    return (
                        f"server {ident} is on timeline {ident.timeline}, below timeline "
                        f"{seen.timeline} already seen on {seen.server}: an old primary that "
                        "missed a failover"
                    )
            if seen is None or ident.timeline > seen.timeline:
                changed = seen is not None
                self.seen = ident
                self._save(ident)
                if changed:
                    until = self.clock.monotonic_us() + self.lease_time()
                    self._hold_until_mono = max(self._hold_until_mono, until)
        if changed:
            self.metrics.inc("rs_primary_changes_total")
            log.warning(
                "the metadata server changed from %s to %s (a failover): no take-office and "
                "no lease expiry for one lease_time",
                seen,
                ident,
            )
            if self.on_primary_change is not None:
                self.on_primary_change(self._hold_until_mono)
        return None

    def _load(self) -> ServerIdentity | None:
        if self.state_file is None or not self.state_file.exists():
            return None
        try:
            d = json.loads(self.state_file.read_text())
            return ServerIdentity(int(d["system_id"]), int(d["timeline"]), str(d["server"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.error("ignoring %s: %s", self.state_file, e)
            return None

    def _save(self, ident: ServerIdentity) -> None:
        # Under the lock: the file follows the memory in order. A failed write is logged:
        # this process still remembers.
        if self.state_file is None:
            return
        d = {"system_id": ident.system_id, "timeline": ident.timeline, "server": ident.server}
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.state_file, json.dumps(d).encode())
        except OSError as e:
            log.error("cannot keep the metadata server seen in %s: %s", self.state_file, e)

    def holding(self, mono: int) -> bool:
        """True within one ``lease_time`` (monotonic ``mono``) after a change of primary."""
        return mono < self._hold_until_mono
