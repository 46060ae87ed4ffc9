"""The RS's handle on its system-table database: one write lock, epoch-fenced transactions.

Every write to the system tables goes through :meth:`MetaStore.txn`, which holds the
process-wide write lock (so admin operations, the persistence queue and CheckAllServerTask
never interleave their read-memory / write-table / apply-memory sequences) and first checks
that this RS's epoch is still the one in the lease row, locking that row ``FOR KEY SHARE``
(docs/design/servers.md and docs/design/ha.md); the epoch is the :class:`rootservice.ha.term.Term`'s. Database failures become ``ObError(OB_ERR_SYS)`` with a
short reason, so callers have one error type.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import TracebackType

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db import lease_repo
from rootservice.db.engine import IDENTITY_KEY, db_error_summary, io_deadline, set_local
from rootservice.ha.fence import EpochFence
from rootservice.ha.term import Term

log = logging.getLogger(__name__)


class WriteLock:
    """The process-wide write lock: re-entrant, and able to say whether the calling thread
    holds it (:meth:`held`), so that a read made under it is bounded like a fenced write
    (:meth:`MetaStore.read`). Used as ``with lock:`` or ``acquire(timeout=s)`` /
    ``release()``, like ``threading.RLock``."""

    def __init__(self) -> None:
        """An unheld lock."""
        self._lock = threading.RLock()
        self._mine = threading.local()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """``threading.RLock.acquire``: True when taken (``timeout`` in seconds, -1 = none)."""
        if not self._lock.acquire(blocking, timeout):
            return False
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        return True

    def release(self) -> None:
        """Release one level. Raises ``RuntimeError`` when this thread does not hold it."""
        self._lock.release()
        self._mine.depth -= 1

    def held(self) -> bool:
        """Whether the calling thread holds the lock (at any depth)."""
        return getattr(self._mine, "depth", 0) > 0

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class MetaStore:
    """Engine + write lock, writing with the epoch of the current :class:`Term`.

    Every fenced transaction asks ``term`` first (its epoch, and :meth:`Term.guard` for why
    this RS must not write now) and, when the database refuses the epoch, ends the term
    (:meth:`Term.request_step_down`). ``idle_timeout_us()`` bounds, on PostgreSQL, how long
    one of our transactions may sit idle holding the lease row: a paused RS must not keep a
    standby from taking office. ``rejected_writes`` counts the fenced transactions refused
    (the "writes rejected" count). ``fence`` judges the PostgreSQL server each fenced
    transaction's connection reached (a lower timeline than seen, or another
    system, is refused and ends the term); None: not judged.
    """

    def __init__(
        self,
        engine: sa.Engine,
        rs_addr: tuple[str, int],
        term: Term,
        idle_timeout_us: Callable[[], int] | None = None,
        fence: EpochFence | None = None,
    ) -> None:
        """Wrap ``engine``; ``rs_addr`` is this RS's ``(ip, port)`` for event-history rows."""
        self.fence = fence
        self.engine = engine
        self.rs_addr = rs_addr
        self.term = term
        self.idle_timeout_us = idle_timeout_us
        self.write_lock = WriteLock()
        self.rejected_writes = 0

    @property
    def epoch(self) -> int:
        """The epoch fenced writes carry: the term's (0 = not in office)."""
        return self.term.epoch

    @contextmanager
    def txn(self, *, fenced: bool = True, wait_s: float | None = None) -> Iterator[sa.Connection]:
        """A transaction under the write lock that commits on normal exit.

        Raises ``ObError(OB_RS_NOT_MASTER)`` when fenced and this RS is not in office, its
        lease is not safely held (``guard``) or the epoch moved on, and ``ObError(OB_ERR_SYS)``
        when the database fails; in every case nothing is committed. ``wait_s`` (seconds)
        bounds the whole transaction, its wait for the write lock included: a lock not had
        by then raises ``ObError(OB_TIMEOUT)`` before anything ran, a database wait past it
        ``OB_ERR_SYS`` (a statement's audit record, which must not hold the statement's
        answer while other writes queue on a slow database).
        """
        deadline = None if wait_s is None else time.monotonic() + wait_s
        if not self.write_lock.acquire(timeout=-1 if wait_s is None else max(0.0, wait_s)):
            raise ObError(
                "OB_TIMEOUT",
                detail=f"the system tables stayed busy for {wait_s:g} s (other writes held "
                "them); nothing was changed",
            )
        try:
            epoch = self.epoch
            try:
                if fenced:
                    why = "not in office" if epoch <= 0 else self.term.guard()
                    if why:
                        raise ObError("OB_RS_NOT_MASTER", detail=why)
                bound = self._bound_s(fenced)
                if deadline is not None:
                    left = max(0.0, deadline - time.monotonic())
                    bound = left if bound is None else min(bound, left)
                with io_deadline(bound), self.engine.begin() as conn:
                    self._limit_idle(conn)
                    if fenced:
                        self._judge_server(conn)
                        lease_repo.check_epoch(conn, epoch)
                    yield conn
            except ObError as e:
                if e.name == "OB_RS_NOT_MASTER" and fenced:
                    self.rejected_writes += 1
                    log.warning("write of epoch %d rejected: %s", epoch, e.message)
                    # A fenced write of ``epoch`` was refused: the term is over (if current).
                    self.term.request_step_down(f"a write was refused: {e}", epoch)
                raise
            except sa.exc.SQLAlchemyError as e:
                raise ObError(
                    "OB_ERR_SYS",
                    detail=f"system tables unavailable, nothing was changed: {db_error_summary(e)}",
                ) from e
        finally:
            self.write_lock.release()

    def _judge_server(self, conn: sa.Connection) -> None:
        # The server this connection reached, judged again: a higher timeline may have been
        # seen since it was opened. Refused: the connection is dropped.
        if self.fence is None:
            return
        why = self.fence.judge_server(conn.info.get(IDENTITY_KEY))
        if why is not None:
            conn.invalidate()
            raise ObError("OB_RS_NOT_MASTER", detail=why)

    def _bound_s(self, fenced: bool) -> float | None:
        # A fenced transaction of a leader cut off from its database must end (with an
        # error) instead of holding the write lock for ever: it may run while the lease is
        # trusted, plus one lease (by then a standby may have taken office, and this RS's
        # write would be refused anyway). None: the engine's default bound per wait.
        left = self.term.trust_left_us() if fenced else None
        if left is None:
            return None
        return (left + self.term.lease_time()) / 1e6

    def read_bound_s(self) -> float | None:
        """Seconds a read may wait for the database: a fenced transaction's bound while the
        calling thread holds the write lock (how long the lease is still trusted, plus one
        lease), else None (the engine's default bound per wait). None too when the term is
        not supervised (unit tests that drive rounds by hand, SQLite)."""
        return self._bound_s(True) if self.write_lock.held() else None

    def _limit_idle(self, conn: sa.Connection) -> None:
        # A transaction of a paused (SIGSTOP) RS holds the lease row FOR KEY SHARE until its
        # session dies; the server ends it after this long idle instead of never.
        if self.idle_timeout_us is None:
            return
        ms = max(1, self.idle_timeout_us() // 1000)
        set_local(conn, {"idle_in_transaction_session_timeout": str(ms)})

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A read-only connection (no fencing). Raises ``ObError(OB_ERR_SYS)``.

        Made while the calling thread holds the write lock (check_all_server, the loader, a
        zone reload, ROOT_INSPECTION compare memory with the tables under it), the read is
        bounded like a fenced transaction (:meth:`read_bound_s`): every writer waits for the
        lock, and a leader cut off from its database once kept it for the engine's default
        30 s per wait, so a statement behind it outlived its client's timeout. Otherwise
        the engine's default bound applies."""
        bound = self.read_bound_s()
        try:
            with (
                io_deadline(bound) if bound is not None else nullcontext(),
                self.engine.connect() as conn,
            ):
                conn.execution_options(read_only=True)
                yield conn
        except sa.exc.SQLAlchemyError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"system tables unavailable: {db_error_summary(e)}"
            ) from e
