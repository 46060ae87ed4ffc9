"""CheckAllServerTask (docs/design/servers.md#memory-and-the-table): the task ``check_all_server`` compares the
whitelist with ``__all_server`` on the checked columns and queues a repair for each difference.

Follows OceanBase's ``ObCheckServerTask``; what differs legitimately (a row queued in the
persistence queue, a take-office candidate) is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from obcommon.addresses import format_server
from rootservice.db import server_repo
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.servers.loader import TakeOfficeGrace, table_value
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.status import CHECKED_COLUMNS
from rootservice.servers.whitelist import Whitelist

log = logging.getLogger(__name__)


def _table_values(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The :data:`CHECKED_COLUMNS` of a :func:`server_repo.load_checked_page` row as
    :meth:`ServerStatus.checked_values` gives them (:func:`table_value`'s rule: ``status``
    compared case-insensitively). Only for a row whose plain tuple differed."""
    cols = dict(zip(CHECKED_COLUMNS, row[2:], strict=True))
    return tuple(table_value(cols, c) for c in CHECKED_COLUMNS)


class CheckAllServerTask:
    """``run_once()`` -> how many servers were queued for repair. ``sleep(seconds)`` paces the
    pages (tests pass one that advances a FakeClock)."""

    name = "check_all_server"

    def __init__(
        self,
        whitelist: Whitelist,
        persist: PersistQueue,
        grace: TakeOfficeGrace,
        term: Term,
        store: MetaStore,
        metrics: Metrics,
        sleep: Callable[[float], None],
    ) -> None:
        """Compare ``whitelist`` with the ``__all_server`` of ``store``; repairs go to
        ``persist``."""
        self.whitelist = whitelist
        self.persist = persist
        self.grace = grace
        self.term = term
        self.store = store
        self.metrics = metrics
        self.sleep = sleep

    def run_once(self, page_size: int = 200, pause_s: float = 0.05) -> int:
        """Compare memory with ``__all_server`` on the checked columns and queue a repair for
        each server that differs and is not already queued. Returns how many were queued.

        The table is read ``page_size`` rows at a time in key order, each page under the
        write lock (so the persistence queue cannot flush in the middle of a comparison) and
        with ``pause_s`` between pages: the heartbeat path shares the GIL with this thread,
        and one 10,000-row scan in a burst delayed heartbeats by 150 ms in ``make bench``,
        while 50 pages spread over 2.5 s of a 30 s period do not. Does nothing while
        this RS may not act, and stops (returning 0) when the term ends during the scan.
        Raises ``ObError(OB_ERR_SYS)`` when the table cannot be read.
        """
        if not self.term.may_act():
            return 0
        epoch = self.term.epoch
        repaired: list[str] = []
        seen: set[str] = set()
        extra: list[str] = []
        after: tuple[str, int] | None = None
        while True:
            with self.store.write_lock:
                with self.store.read() as conn:
                    page = server_repo.load_checked_page(conn, after, page_size, CHECKED_COLUMNS)
                if self.term.epoch != epoch:
                    # The term ended while the page was read (a slow database): memory was
                    # dropped meanwhile, so every row would read as "not in the whitelist".
                    log.info("check_all_server abandoned: the term of epoch %d ended", epoch)
                    return 0
                keys = [format_server(r[0], r[1]) for r in page]
                # Memory before the queue: a change that lands between the two reads is then
                # queued by the time the queue is read (the write lock keeps it from being
                # flushed), so it is skipped, not taken for a difference to repair.
                mine = self.whitelist.checked_chunked(keys)
                # A queued row differs legitimately: the queue will write it. So does a
                # take-office candidate's until the grace ends (see LeaseChecker._expire_candidates).
                pending = self.persist.pending_keys()
                with self.whitelist.lock:
                    pending |= self.grace.candidates
                for key, row in zip(keys, page, strict=True):
                    seen.add(key)
                    if key in pending:
                        continue
                    ours = mine.get(key)
                    if ours is None:
                        extra.append(key)
                        continue
                    # One tuple comparison for the common case: nothing differs.
                    if ours == row[2:]:
                        continue
                    diff = [
                        c
                        for c, a, b in zip(CHECKED_COLUMNS, ours, _table_values(row), strict=True)
                        if a != b
                    ]
                    if diff:
                        repaired.append(f"{key} ({', '.join(diff)})")
                        self.persist.mark(key)
            if len(page) < page_size:
                break
            after = (page[-1][0], page[-1][1])
            self.sleep(pause_s)
        with self.whitelist.lock:
            missing = sorted(self.whitelist.records.keys() - seen)
        if repaired:
            self.metrics.inc("check_all_server_repairs_total", len(repaired))
            log.warning(
                "__all_server differs from memory for %d servers, repairing: %s%s",
                len(repaired),
                "; ".join(repaired[:5]),
                " ..." if len(repaired) > 5 else "",
            )
        if missing:
            log.error(
                "%d whitelisted servers have no __all_server row: %s",
                len(missing),
                ", ".join(missing[:5]),
            )
        if extra:
            log.error(
                "%d __all_server rows are not in the whitelist (RELOAD SERVER loads them): %s",
                len(extra),
                ", ".join(extra[:5]),
            )
        return len(repaired)
