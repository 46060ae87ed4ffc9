"""Readiness that tells the truth: is this RS the leader in FULL_SERVICE with
its database reachable, and if not, why.

One :class:`Readiness` per RS answers the HTTP probes (``/readyz``, :mod:`rootservice.http`)
and the gRPC health service (:mod:`rootservice.api.grpc_server`), so both say the same thing:

- the term (:class:`rootservice.ha.term.Term`) says whether this RS leads, holds its lease
  within the safety margin and in which state it is (read live, it costs nothing);
- the database is probed with ``SELECT 1`` through the store's read connection, at most once
  per :data:`PROBE_INTERVAL_US` (a probe is a round trip; ``/readyz`` may be polled by many
  clients), with the engine's bounded timeouts. The probe blocks: callers on the event loop
  run :meth:`Readiness.probe` in a thread (:meth:`Readiness.refresh`).

What "ready" means per gRPC service name (:meth:`Readiness.services`):

- ``""`` (the server as a whole) and ``oceanbase.rs.RootService`` (the agents' leases): ready,
  as ``/readyz`` - a standby refuses leases with OB_RS_NOT_MASTER, a leader waiting for
  BOOTSTRAP accepts only the rs_list servers, a leader cut off from its database steps down.
- ``oceanbase.rs.AdminService`` (obadmin's statements): ready, OR the leader holding its lease
  before BOOTSTRAP with its database reachable (BOOTSTRAP is sent there: it is the only way
  out of WAIT_BOOTSTRAP), OR a standby that can forward statements (it has a forwarder and
  knows the leader) with its database reachable (logins read ``__all_user``).

Times are integer microseconds on the term's clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term

#: The database is probed at most this often (microseconds).
PROBE_INTERVAL_US = 1_000_000

SERVICE_ALL = ""
SERVICE_LEASE = "oceanbase.rs.RootService"
SERVICE_ADMIN = "oceanbase.rs.AdminService"
SERVICES = (SERVICE_ALL, SERVICE_LEASE, SERVICE_ADMIN)


@dataclass(frozen=True)
class Verdict:
    """``ready`` and, when not, ``reason`` (one line for an operator); ``leader`` is the
    leader's ``ip:port`` when known ("" otherwise)."""

    ready: bool
    reason: str
    leader: str
    #: Not "" while the RS is behind on its lease intake (ready or not: it still serves).
    intake: str = ""


def db_probe(store: MetaStore) -> str | None:
    """``SELECT 1`` on a read connection of ``store``: None when it answered, else the error
    in one line. Blocks (a database round trip)."""
    try:
        with store.read() as conn:
            conn.exec_driver_sql("SELECT 1").scalar()
    except ObError as e:
        # "System error, system tables unavailable: <why>": the why is what an operator needs.
        return e.message.rpartition("unavailable: ")[2] or e.message
    except sa.exc.SQLAlchemyError as e:  # pragma: no cover - read() translates these
        return str(e).splitlines()[0]
    return None


class Readiness:
    """The readiness of one RS. ``term`` is read live; ``probe_db()`` (default
    :func:`db_probe` on ``store``) returns None when the database answers, else why not;
    ``can_forward()`` tells whether a standby's admin service can forward statements.
    Thread-safe: the probe result is swapped under a lock."""

    def __init__(
        self,
        term: Term,
        store: MetaStore,
        *,
        can_forward: Callable[[], bool] = lambda: False,
        probe_db: Callable[[], str | None] | None = None,
        interval_us: int = PROBE_INTERVAL_US,
        intake: Callable[[], str] = lambda: "",
    ) -> None:
        """No probe has run yet: the database counts as unknown (not ready) until one did.
        ``intake()`` says how far behind the lease intake is ("" when it keeps up)."""
        self.term = term
        self.intake = intake
        self.can_forward = can_forward
        self._probe_db = probe_db or (lambda: db_probe(store))
        self.interval_us = interval_us
        self._lock = threading.Lock()
        self._db_error: str | None = "not probed yet"
        self._probed_at: int | None = None
        self._probing = threading.Lock()

    # --- the database probe --------------------------------------------------------------

    def stale(self) -> bool:
        """True when the last probe is older than the interval (or none ran)."""
        at = self._probed_at
        return at is None or self.term.clock.monotonic_us() - at >= self.interval_us

    def probe(self, *, force: bool = False) -> str | None:
        """Probe the database now if the last probe is stale (or ``force``); returns the
        current database error (None: reachable). Blocks; one probe at a time (a caller
        arriving during a probe gets the previous result)."""
        if (force or self.stale()) and self._probing.acquire(blocking=False):
            try:
                err = self._probe_db()
                with self._lock:
                    self._db_error = err
                    self._probed_at = self.term.clock.monotonic_us()
            finally:
                self._probing.release()
        return self.db_error

    @property
    def db_error(self) -> str | None:
        """The last probe's error (None: the database answered)."""
        with self._lock:
            return self._db_error

    async def refresh(self) -> None:
        """:meth:`probe` in a thread when stale (for callers on the event loop)."""
        if self.stale():
            await asyncio.to_thread(self.probe)

    # --- verdicts ------------------------------------------------------------------------

    def _leader(self) -> str:
        leader = self.term.leader
        return "" if leader == self.term.address() else leader

    def _not_leading(self) -> str | None:
        """Why this RS is not the leader in office (None: it is), from the term."""
        state = self.term.state
        if state is RsState.NOT_MASTER or (state is RsState.INIT and self.term.epoch == 0):
            leader = self._leader()
            return f"standby; the leader is {leader}" if leader else "standby; no leader known"
        if state is RsState.STOPPED:
            return "stopping"
        why = self.term.guard()
        if why is not None:
            return f"not holding the lease: {why}"
        return None

    def verdict(self) -> Verdict:
        """Ready = leader, lease held, FULL_SERVICE, database reachable (the last probe);
        otherwise the first reason in that order."""
        leader = self._leader()
        why = self._not_leading()
        if why is None:
            state = self.term.state
            if state in (RsState.WAIT_BOOTSTRAP, RsState.BOOTSTRAPPING):
                why = (
                    "waiting for BOOTSTRAP"
                    if state is RsState.WAIT_BOOTSTRAP
                    else "bootstrapping (BOOTSTRAP is running)"
                )
            elif state is not RsState.FULL_SERVICE:
                why = f"taking office (state {state.value})"
        if why is None:
            db = self.db_error
            if db is not None:
                why = f"database unreachable: {db}"
        return Verdict(why is None, why or "", leader, self.intake())

    def services(self) -> dict[str, bool]:
        """gRPC health per service name (see the module docstring): name -> SERVING."""
        v = self.verdict()
        admin = v.ready
        if not admin and self.db_error is None:
            state = self.term.state
            if self._not_leading() is None and state is RsState.WAIT_BOOTSTRAP:
                admin = True
            elif self.term.epoch == 0 and bool(v.leader) and self.can_forward():
                admin = state is RsState.NOT_MASTER
        return {SERVICE_ALL: v.ready, SERVICE_LEASE: v.ready, SERVICE_ADMIN: admin}
