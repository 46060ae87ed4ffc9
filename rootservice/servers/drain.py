"""``ALTER SYSTEM DRAIN SERVER 'ip:port' [TIMEOUT d]``: isolate a server,
move its leaders off, re-plan the copies to it and wait for those from it, with progress in
``__all_server_drain`` (``DBA_OB_SERVER_DRAINS``) and a bounded wait.

The flow (docs/architecture.md, "DRAIN SERVER"):

1. The TIMEOUT is range-checked (:func:`rootservice.servers.maintenance_window.drain_timeout`,
   default 10 min); the server must be whitelisted, not DELETING and not being drained.
2. The disruption budget (:mod:`rootservice.servers.disruption_budget`) judges the drain
   together with every server already stopped, draining, SUSPECT or INACTIVE; a drain that
   would leave an LS below its majority is refused (OB_OP_NOT_ALLOW naming the LS).
3. One fenced transaction writes ``stop_time`` (the server is isolated as by ISOLATE SERVER:
   no new leader, no new copy destination), the DRAINING row with its deadline and the event
   ``drain_server``; then memory.
4. Every :data:`POLL_S` the tenant layer moves the leaders off, has the units still moving
   to the server sent to another server of their zone (the balancer's round does it,
   :mod:`rootservice.balancer.copy_replan`: their copies there are forgotten and their
   partial replicas dropped, not waited for; a copy *from* the server goes on, and one that
   stalls is sent again from another member by the lag detector) and counts what is left
   (:meth:`DrainWork.step`); the progress row is written when a count changes and at least
   every :data:`PROGRESS_INTERVAL_US`.
5. No leader and no copy left: the row is FINISHED (event ``drain_server_finished``) and the
   statement returns; the server stays isolated until START SERVER.
6. The deadline passed: the row is TIMEOUT with the blockers, one per LS and why
   (:meth:`DrainWork.blockers`; a unit moving to it that no other server could take,
   with why), and the statement fails with
   OB_WAIT_LEADER_SWITCH_TIMEOUT (leaders left) or OB_TIMEOUT (copies only) naming them.
   START SERVER during the drain ends it CANCELED.
7. The rows live in the table: a new RS leader's :meth:`DrainManager.run_once` (task
   ``drain_resumer``) takes over every DRAINING row with its original deadline.

OceanBase has no DRAIN. Its STOP / FORCE STOP SERVER (``ObAdminServerExecutor::execute``,
``src/sql/engine/cmd/ob_alter_system_executor.cpp``) sends ``stop_server`` to the RS (which
checks ``check_majority_and_log_in_sync_`` and writes ``stop_time``) and then, in
``wait_leader_switch_out_``, counts ``role = 'LEADER'`` rows of ``CDB_OB_LS_LOCATIONS`` for the
servers once a second until 0, retrying through ``OB_RS_NOT_MASTER`` and failing with
``OB_WAIT_LEADER_SWITCH_TIMEOUT`` when the statement's timeout is spent; ISOLATE does not
wait. It prints nothing while it waits ("waiting switching leaders out" in its log only) and
names no blocker. DRAIN keeps that shape (the count, the error code, the failover retry)
and adds the row, the deadline of its own and the blockers. CockroachDB's ``node drain`` prints
"remaining: N" while it waits (cockroach#101885, #102001 are what it looks like without a
bound); Kubernetes' ``kubectl drain --timeout`` is the bound.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.durations import format_duration
from obcommon.errors import ObError
from rootservice.db import drain_repo, event_repo, server_repo
from rootservice.ha.store import MetaStore
from rootservice.servers.events import log_transitions, server_event
from rootservice.servers.maintenance_window import drain_timeout
from rootservice.servers.ports import Background, Gate
from rootservice.servers.status import AdminStatus
from rootservice.servers.whitelist import Whitelist

log = logging.getLogger(__name__)

#: Period of the drain's rounds, seconds.
POLL_S = 0.5
#: The progress row is written at least this often while DRAINING, microseconds ("at least every 5
#: s"; 1 s leaves room for a slow round).
PROGRESS_INTERVAL_US = 1_000_000


#: Period of the ``drain_resumer`` task, microseconds.
DRAIN_RESUME_INTERVAL_US = 1_000_000


class DrainWork(Protocol):
    """The tenant layer's part of a drain (:class:`rootservice.tenants.drain_work.DrainWork`)."""

    def check_budget(self, targets: set[str], action: str, /) -> None:
        """The disruption budget for disrupting ``targets`` ('ip:port') by ``action``
        ("draining", "stopped", "in maintenance"). Raises OB_OP_NOT_ALLOW naming each LS."""
        ...

    def step(self, server: str, /) -> tuple[int, int]:
        """One round: fresh reports, leaders moved off ``server``, the units moving to it
        re-planned. Returns (log streams still led from it, copies from or to it in
        flight)."""
        ...

    def blockers(self, server: str, /) -> list[str]:
        """Per LS still led from ``server``: ``"LS 1001 (tenant 1002): why"``; per unit
        moving to it that could not be sent elsewhere: ``"unit 1003 moving to it: why"``."""
        ...


class DrainManager:
    """The DRAIN SERVER statement and the ``drain_resumer`` task (``name``)."""

    name = "drain_resumer"

    def __init__(
        self,
        *,
        whitelist: Whitelist,
        store: MetaStore,
        clock: Clock,
        term: Gate,
        work: DrainWork,
        sleep: Callable[[float], None],
        background: Background,
    ) -> None:
        """Nothing runs until :meth:`drain` or :meth:`run_once`; ``sleep`` waits between
        rounds (seconds), ``background`` runs the drains a new leader resumes."""
        self.whitelist = whitelist
        self.store = store
        self.clock = clock
        self.term = term
        self.work = work
        self.sleep = sleep
        self.background = background
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def drain(self, server: str, timeout: str | None) -> drain_repo.DrainRow:
        """DRAIN SERVER ``server`` with ``timeout`` as written (None: 10 min): steps 1-6 of
        the module's flow; returns the FINISHED row. Raises OB_INVALID_ARGUMENT (address,
        timeout range), OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ALREADY_DELETED,
        OB_OP_NOT_ALLOW (being drained already; the disruption budget),
        OB_WAIT_LEADER_SWITCH_TIMEOUT / OB_TIMEOUT (deadline, blockers named), OB_CANCELED
        (START SERVER meanwhile), OB_RS_NOT_MASTER (this RS lost office: the new leader
        resumes the drain)."""
        timeout_us = drain_timeout(timeout)
        ip, port = parse_server(server)
        key = format_server(ip, port)
        with self.store.write_lock:
            with self.whitelist.lock:
                cur = self.whitelist.records.get(key)
                s = replace(cur) if cur is not None else None
            if s is None:
                raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
            if s.admin_status is AdminStatus.DELETING:
                raise ObError("OB_SERVER_ALREADY_DELETED", detail=f"server '{key}'")
            with self._lock:
                if key in self._running or s.draining:
                    raise ObError(
                        "OB_OP_NOT_ALLOW",
                        f"drain server '{key}' while it is being drained "
                        "(see DBA_OB_SERVER_DRAINS); it is",
                    )
            self.work.check_budget({key}, "draining")
            now = self.clock.now_us()
            deadline = now + timeout_us
            s.stop_time = s.stop_time or now
            ev = server_event(now, "drain_server", s, ("timeout", format_duration(timeout_us)))
            with self.store.txn() as conn:
                server_repo.update_servers(conn, [s.to_row()], now)
                drain_repo.start_drain(conn, ip, port, now, deadline, self._rs())
                event_repo.insert_events(conn, [ev], self.store.rs_addr)
            with self.whitelist.lock:
                cur = self.whitelist.records.get(key)
                if cur is not None:
                    cur.stop_time = s.stop_time
                    cur.draining = True
            with self._lock:
                self._running.add(key)
        log_transitions([(ev, "ALTER SYSTEM DRAIN SERVER")])
        try:
            return self._run(key, ip, port, now, deadline)
        finally:
            with self._lock:
                self._running.discard(key)

    def _rs(self) -> str:
        return format_server(*self.store.rs_addr)

    def draining(self) -> set[str]:
        """The servers this RS is draining now ('ip:port')."""
        with self._lock:
            return set(self._running)

    def run_once(self) -> int:
        """The ``drain_resumer`` task: every DRAINING row this RS does not run yet (a drain
        its predecessor started) is resumed in the background with its original deadline.
        Returns the number resumed. Does nothing unless this RS may act."""
        if not self.term.may_act():
            return 0
        with self.store.read() as conn:
            rows = drain_repo.load_drains(conn, drain_repo.DRAINING)
        n = 0
        for r in rows:
            key = format_server(r.ip, r.port)
            with self._lock:
                if key in self._running:
                    continue
                self._running.add(key)
            with self.whitelist.lock:
                cur = self.whitelist.records.get(key)
                if cur is not None:
                    cur.draining = True
            log.info("resuming the drain of %s (deadline %d)", key, r.deadline)
            self.background(functools.partial(self._resume, key, r))
            n += 1
        return n

    def _resume(self, key: str, r: drain_repo.DrainRow) -> None:
        try:
            self._run(key, r.ip, r.port, r.start_time, r.deadline)
        except ObError as e:
            log.warning("resumed drain of %s ended: %s", key, e)
        finally:
            with self._lock:
                self._running.discard(key)

    def _run(self, key: str, ip: str, port: int, start: int, deadline: int) -> drain_repo.DrainRow:
        """Steps 4-6: rounds until nothing is left, the deadline, a START SERVER or the loss
        of office."""
        last: tuple[int, int] | None = None
        written = 0
        while True:
            if not self.term.may_act():
                raise ObError(
                    "OB_RS_NOT_MASTER",
                    detail=f"the drain of '{key}' goes on under the new root service leader "
                    "(DBA_OB_SERVER_DRAINS)",
                )
            with self.whitelist.lock:
                cur = self.whitelist.records.get(key)
                stopped = cur is not None and cur.is_stopped()
            if not stopped:
                self._end(key, ip, port, drain_repo.CANCELED, last or (-1, -1), "")
                raise ObError("OB_CANCELED", detail=f"server '{key}' was started or removed")
            leaders, copies = self.work.step(key)
            now = self.clock.now_us()
            if leaders == 0 and copies == 0:
                return self._end(key, ip, port, drain_repo.FINISHED, (0, 0), "")
            if now >= deadline:
                blockers = self.work.blockers(key)
                if copies:
                    blockers.append(f"{copies} cop{'y' if copies == 1 else 'ies'} from or to it")
                text = "; ".join(blockers) or "nothing named (the counts changed meanwhile)"
                self._end(key, ip, port, drain_repo.TIMEOUT, (leaders, copies), text)
                raise ObError(
                    "OB_WAIT_LEADER_SWITCH_TIMEOUT" if leaders else "OB_TIMEOUT",
                    detail=(
                        f"drain server '{key}' timed out after "
                        f"{format_duration(deadline - start)} with {leaders} leader(s) and "
                        f"{copies} copy(ies) left: {text}; the server stays isolated "
                        "(START SERVER ends it)"
                    ),
                )
            if (leaders, copies) != last or now - written >= PROGRESS_INTERVAL_US:
                with self.store.txn() as conn:
                    drain_repo.record_progress(conn, ip, port, now, leaders, copies, "", self._rs())
                last, written = (leaders, copies), now
            self.sleep(POLL_S)

    def _end(
        self, key: str, ip: str, port: int, status: str, counts: tuple[int, int], blockers: str
    ) -> drain_repo.DrainRow:
        now = self.clock.now_us()
        with self.whitelist.lock:
            cur = self.whitelist.records.get(key)
            s = replace(cur) if cur is not None else None
            if cur is not None:
                cur.draining = False
        name = {
            drain_repo.FINISHED: "drain_server_finished",
            drain_repo.TIMEOUT: "drain_server_timeout",
            drain_repo.CANCELED: "drain_server_canceled",
        }[status]
        with self.store.txn() as conn:
            changed = drain_repo.record_progress(
                conn, ip, port, now, counts[0], counts[1], blockers, self._rs(), status
            )
            # 0: START SERVER ended the row (and wrote the event) in its own transaction.
            if s is not None and changed:
                ev = server_event(now, name, s, ("blockers", blockers))
                event_repo.insert_events(conn, [ev], self.store.rs_addr)
                log_transitions([(ev, status)])
        with self.store.read() as conn:
            rows = [r for r in drain_repo.load_drains(conn) if (r.ip, r.port) == (ip, port)]
        return rows[0] if rows else drain_repo.DrainRow(ip, port, status, 0, 0)
