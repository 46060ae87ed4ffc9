"""The history pruner: the leader deletes ``__all_rootservice_event_history`` rows (and their
copies in ``__all_server_event_history``) older than ``event_history_retention`` and ended ``__all_rootservice_job`` rows older than
``job_history_retention``.

OceanBase's event-history operators do the same for their tables
(``ObRsEventHistoryTableOperator::async_delete``: ``DELETE ... WHERE gmt_create < now -
ob_event_history_recycle_interval LIMIT 1024``). Here each batch is one short fenced
transaction of at most ``batch_rows`` rows and a round runs at most ``max_batches`` of them
per table, so a backlog of millions of rows is worked off over several rounds without ever
holding the write lock (which heartbeats' persistence shares) for long.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa

from obcommon.clock import Clock
from obcommon.durations import format_duration
from rootservice.db import event_repo, job_repo
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: How often the leader prunes, in microseconds.
PRUNE_INTERVAL_US = 60_000_000

#: Rows deleted per transaction, and transactions per table per round.
BATCH_ROWS = 1_000
MAX_BATCHES = 10


class Retention(Protocol):
    """The retention parameters (:class:`rootservice.config.RsSettings`), microseconds."""

    @property
    def event_history_retention(self) -> int:
        """Events older than this are deleted."""
        ...

    @property
    def job_history_retention(self) -> int:
        """Ended jobs whose last change is older than this are deleted."""
        ...


@dataclass(frozen=True)
class Pruned:
    """Rows deleted by one round: ``events`` and ``jobs``; ``batches`` transactions run."""

    events: int = 0
    jobs: int = 0
    batches: int = 0


class HistoryPruner:
    """``run_once()`` -> :class:`Pruned`. Only the leader prunes: a round does nothing while
    ``term.may_act()`` is False, and every batch is a fenced transaction."""

    name = "history_pruner"

    def __init__(
        self,
        retention: Retention,
        term: Term,
        store: MetaStore,
        clock: Clock,
        metrics: Metrics,
        *,
        batch_rows: int = BATCH_ROWS,
        max_batches: int = MAX_BATCHES,
    ) -> None:
        """Prune at ``clock``'s time with ``retention``'s (live) parameters; counts go to
        ``metrics`` as ``history_pruned_rows_total.event`` / ``.job``."""
        if batch_rows < 1 or max_batches < 1:
            raise ValueError("batch_rows and max_batches must be positive")
        self.retention = retention
        self.term = term
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.batch_rows = batch_rows
        self.max_batches = max_batches

    def run_once(self) -> Pruned:
        """One round: events whose ``event_time`` is before ``now - event_history_retention``,
        then ended jobs whose ``gmt_modified`` is before ``now - job_history_retention``, each
        in at most ``max_batches`` transactions of at most ``batch_rows`` rows. Raises
        ``ObError(OB_RS_NOT_MASTER)`` when deposed mid-round and ``ObError(OB_ERR_SYS)`` when
        the database fails (the scheduler logs and counts the failed round; the rows deleted
        by earlier batches stay deleted)."""
        if not self.term.may_act():
            return Pruned()
        now = self.clock.now_us()
        ev_keep = self.retention.event_history_retention
        job_keep = self.retention.job_history_retention
        events, b1 = self._prune(event_repo.delete_events_before, now - ev_keep, "event")
        jobs, b2 = self._prune(job_repo.delete_ended_jobs_before, now - job_keep, "job")
        if events or jobs:
            log.info(
                "pruned %d events older than %s and %d ended jobs older than %s",
                events,
                format_duration(ev_keep),
                jobs,
                format_duration(job_keep),
                extra={"event": "history_pruned", "events": events, "jobs": jobs},
            )
        return Pruned(events, jobs, b1 + b2)

    def _prune(
        self, delete: Callable[[sa.Connection, int, int], int], cutoff_us: int, what: str
    ) -> tuple[int, int]:
        total = batches = 0
        while batches < self.max_batches and self.term.may_act():
            with self.store.txn() as conn:
                n = delete(conn, cutoff_us, self.batch_rows)
            batches += 1
            total += n
            if n:
                self.metrics.inc(f"history_pruned_rows_total.{what}", n)
            if n < self.batch_rows:
                break
        return total, batches
