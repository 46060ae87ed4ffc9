"""What every election round shares (docs/design/ha.md#epochs): its short transaction with
bounded waits, the database's clock, this RS's holder tuple, the check of the metadata
server the round runs on, and the record of epochs that went back.

The rounds themselves are :class:`rootservice.ha.election.Election` (taking office),
:class:`rootservice.ha.renewal.LeaseRenewal` (the leader's renewal) and
:class:`rootservice.ha.retake.EpochRetake` (raising the epoch above a conflicting report);
a handover (:mod:`rootservice.ha.handover`) runs in the same transactions.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import sqlalchemy as sa

from obcommon.addresses import parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, lease_repo
from rootservice.db.engine import io_deadline, set_local
from rootservice.db.event_repo import Event
from rootservice.db.server_identity import ServerIdentity, read_identity
from rootservice.ha.fence import EpochFence
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term, lease_timings
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: Shortest lock / statement timeout of one election round on PostgreSQL.
MIN_ROUND_TIMEOUT_US = 200_000


class LeaseRounds:
    """The shared parts of the election's rounds on the lease row.

    ``store`` gives the engine (rounds use their own short transactions, never the fenced
    ones, so a slow admin statement cannot delay a renewal); ``term`` gives this RS's
    address; ``lease_time()`` the lease length in microseconds, read at each round;
    ``db_clock`` replaces the database's clock (unit tests pass their FakeClock; None reads
    the database's); ``fence`` judges the metadata server of each round.
    """

    def __init__(
        self,
        store: MetaStore,
        term: Term,
        clock: Clock,
        lease_time: Callable[[], int],
        fence: EpochFence,
        metrics: Metrics,
        db_clock: Clock | None = None,
    ) -> None:
        """Nothing is read until a round."""
        self.store = store
        self.term = term
        self.clock = clock
        self.lease_time = lease_time
        self.fence = fence
        self.metrics = metrics
        self.db_clock = db_clock

    def db_now(self, conn: sa.Connection) -> int:
        """The database's clock (``db_clock`` when given), microseconds since the epoch."""
        return self.db_clock.now_us() if self.db_clock is not None else lease_repo.db_now_us(conn)

    def me(self) -> tuple[str, tuple[str, int]]:
        """This RS's address, as ``ip:port`` and as the lease row's holder tuple."""
        addr = self.term.address()
        return addr, parse_server(addr)

    @contextlib.contextmanager
    def txn(self, *, renewal: bool = False) -> Iterator[sa.Connection]:
        """A round's transaction: all its I/O within the time a lease is trusted (``lease -
        margin``), lock and statement timeouts of one renew interval, and an idle bound
        (:meth:`begin`). Raises what SQLAlchemy raises (and ``TimeoutError`` of the I/O
        bound as SQLAlchemy wraps it)."""
        with io_deadline(self.bound_s()), self.store.engine.begin() as conn:
            self.begin(conn, renewal=renewal)
            yield conn

    def begin(self, conn: sa.Connection, *, renewal: bool = False) -> None:
        """Set the round's PostgreSQL bounds on ``conn`` (a no-op on SQLite)."""
        # Bounded waits: a round must fail rather than hang behind a paused RS's lock. And a
        # round of ours must not hold the row for ever if this process is paused between its
        # UPDATE and COMMIT: the server ends the session once it has been idle that long
        # (MetaStore does the same for fenced transactions).
        lease = self.lease_time()
        renew, margin = lease_timings(lease)
        ms = str(max(MIN_ROUND_TIMEOUT_US, renew) // 1000)
        names = ("lock_timeout", "statement_timeout")
        settings = dict.fromkeys(names, ms)
        # A renewal may sit idle longer: the renew interval (2 s by default) ended the
        # session of a leader whose process was only starved (a clean-clone CI run: 2.4 s
        # without CPU, then a step-down over a lease still trusted for 6 s). Its row lock
        # is released within ``lease - margin - renew`` of the UPDATE, which itself comes
        # about ``renew`` after the last renewal: by the time that lease runs out, so a
        # paused leader still delays no standby.
        idle = lease - margin - renew if renewal else renew
        settings["idle_in_transaction_session_timeout"] = str(
            max(MIN_ROUND_TIMEOUT_US, idle) // 1000
        )
        set_local(conn, settings)

    def bound_s(self) -> float:
        """Seconds a round's database work may take: ``lease - margin``."""
        # Whatever the database does: a round stuck on a connection that never answers (a
        # blackhole, a hung server) would keep a deposed leader from finishing its
        # step-down and a standby from ever taking office.
        lease = self.lease_time()
        _, margin = lease_timings(lease)
        return max(MIN_ROUND_TIMEOUT_US, lease - margin) / 1e6

    def judge_server(self, conn: sa.Connection) -> ServerIdentity | None:
        """The metadata server this round runs on, read again and judged by the fence: one
        promoted while we were connected has moved to a higher timeline; one below the
        highest seen is refused (``ObError(OB_RS_NOT_MASTER)``, the connection dropped)."""
        server = read_identity(conn)
        why = self.fence.judge_server(server)
        if why is not None:
            conn.connection.invalidate()
            raise ObError("OB_RS_NOT_MASTER", detail=why)
        return server

    def went_back(self, conn: sa.Connection, now: int, high: int, low: int, what: str) -> None:
        """The metadata store lost committed writes: log at ERROR, count, and record the
        event ``epoch_went_back`` in the round's transaction."""
        self.metrics.inc("rs_epoch_went_back_total")
        log.error(
            "epoch went back from %d to %d (%s): the metadata store lost committed writes "
            "(an asynchronous standby promoted, a restored backup?); whatever was written "
            "with epochs above %d is lost; taking an epoch above %d",
            high,
            low,
            what,
            low,
            high,
            extra={"reason": "epoch_went_back"},
        )
        event_repo.insert_events(
            conn,
            [
                Event(
                    now,
                    "root_service",
                    "epoch_went_back",
                    (("from", high), ("to", low), ("seen_in", what), ("rs", self.term.address())),
                )
            ],
            self.store.rs_addr,
        )
