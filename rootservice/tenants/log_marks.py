"""The ``ls_log_marks`` task: the highest log end index any replica of each
log stream ever reported, kept in ``__all_ls_log_mark``.

RECOVER LS shows what its survivor lacks (``HIGHEST_LOG_END``, ``LOST_ENTRIES``). The replicas
that had the longest log are the dead ones; their last reports live in this RS's memory only,
and a new leader never saw them. So every :data:`INTERVAL_US` the marks that rose are written
(one row per LS, only when it rose: a leaderless LS writes nothing), and the plan reads the
highest of the table and the reports. The mark is the highest ever, across terms: after a
recovery it stays above the new log until that log passes it, so a later DRY RUN still shows
what the earlier recovery lost.
"""

from __future__ import annotations

import threading

from obcommon.clock import Clock
from rootservice.db import log_mark_repo
from rootservice.db.log_mark_repo import LogMark
from rootservice.ha.store import MetaStore
from rootservice.tenants.pause import ActGate
from rootservice.tenants.reports import ReplicaReports
from rootservice.tenants.vocabulary import LsKey

#: How often the marks that rose are written (microseconds).
INTERVAL_US = 5_000_000


class LogMarks:
    """``run_once()`` -> rows written; :meth:`highest` -> the marks by LS."""

    name = "ls_log_marks"

    def __init__(
        self, term: ActGate, store: MetaStore, clock: Clock, reports: ReplicaReports
    ) -> None:
        """Nothing read until a round (or :meth:`highest`)."""
        self.term = term
        self.store = store
        self.clock = clock
        self.reports = reports
        self._lock = threading.Lock()
        self._saved: dict[LsKey, LogMark] | None = None
        self._epoch = 0

    def _load(self) -> dict[LsKey, LogMark]:
        """The table's marks, read once per term (another leader may have written)."""
        epoch = self.store.epoch
        with self._lock:
            if self._saved is not None and self._epoch == epoch:
                return dict(self._saved)
        with self.store.read() as conn:
            saved = log_mark_repo.load_marks(conn)
        with self._lock:
            self._saved, self._epoch = saved, epoch
        return dict(saved)

    def _reported(self) -> dict[LsKey, LogMark]:
        out: dict[LsKey, LogMark] = {}
        for server, table in self.reports.reports().items():
            for key, r in table.items():
                cur = out.get(key)
                if cur is None or r.log_end_index > cur.log_end_index:
                    out[key] = LogMark(r.log_end_index, r.term, server)
        return out

    def highest(self) -> dict[LsKey, int]:
        """The highest log end index ever reported per LS: the table's and the reports'.
        Raises ``ObError`` when the table cannot be read."""
        marks = {k: m.log_end_index for k, m in self._load().items()}
        for k, m in self._reported().items():
            marks[k] = max(marks.get(k, 0), m.log_end_index)
        return marks

    def run_once(self) -> int:
        """Write the marks the reports raised, in one fenced transaction; returns rows
        written (0 while this RS may not act). Raises ``ObError`` from the store."""
        if not self.term.may_act():
            return 0
        saved = self._load()
        rose = {
            k: m
            for k, m in self._reported().items()
            if k not in saved or m.log_end_index > saved[k].log_end_index
        }
        if not rose:
            return 0
        with self.store.txn() as conn:
            log_mark_repo.put_marks(conn, rose, set(saved), self.clock.now_us())
        with self._lock:
            if self._saved is not None:
                self._saved.update(rose)
        return len(rose)
