"""The server status state machine (docs/design/) checked against a small pure
model with Hypothesis.

One in-process RS on SQLite and a FakeClock (``tests.support.harness.make_rs``) with four
whitelisted servers in three zones; Hypothesis interleaves heartbeats, clock steps, checker
ticks, steps of the RS's wall clock alone (+-1 h, +-lease_time: NTP or ``date -s``; the
monotonic clock does not move), STOP / START / DELETE / CANCEL DELETE SERVER and persistence
flushes, and after every step the whitelist must show, for every server, the heartbeat
status, admin status and stop state the model computes from first principles: a heartbeat
makes a server alive, a lease expires at ``mono - last heartbeat >= lease_time`` on the
monotonic clock (a wall step changes nothing), a server is permanently
offline once its offline total within the last 2 x ``server_permanent_offline_time`` reaches
``>= server_permanent_offline_time`` (an outage runs from the last heartbeat
before an expiry to the return) unless the RS suspects itself (at least 3 and more than half of the servers alive at the start of a lease_time window
lost their lease in it; held until those still down are no longer such a share), nothing
expires in the first lease_time after the take office, the take-office grace is per server
(the servers the table showed ACTIVE at the take office keep their rows until
they come back or the grace ends, half a lease_time after the last of them came back and at
most MAX_GRACE_LEASES leases after the take office, except those with a request waiting in the
RS's lease queue, which stay candidates until it is handled; a server back is judged on its
own lease;
no permanent offline while the grace holds), STOP is refused while another zone has a stopped
server, DELETE of a DELETING server and CANCEL of a NORMAL one are refused. After a flush,
``__all_server`` shows the display status (ACTIVE for a candidate still held).

SUSPECT: a server back after a lease expiry this RS saw is SUSPECT for
``p`` (``server_suspect_time`` at first) from its return, exactly; an expiry whose last
heartbeat is within ``2p`` of the return doubles ``p`` (cap 5 min), and each full clean window
after the suspect period halves it (floor ``server_suspect_time``); ``suspect_end_time`` is
set at the return and cleared by the checker tick at the end (or by the expiry).

DRAIN and maintenance: DRAIN SERVER isolates the server (stopped) and,
with no log stream here, finishes at once (its ``__all_server_drain`` row FINISHED); DRAIN of
a DELETING server is refused. STOP SERVER ... FOR MAINTENANCE stops it with a window of
``MAINT``: no offline time before the window's end (monotonic) counts towards permanent
offline, neither of the open outage nor of one closed by a return; the maintenance ticker
ends the window once the RS's wall clock reaches its end, starting the server when it is
alive, leaving it stopped otherwise; START SERVER ends it early (the floor moves to now).

The RS's own lease queue: a request may reach the RS and wait in its queue (``send``) until
the worker's turn (``intake``) handles it as a heartbeat at that moment; while one of its
requests waits, a server's lease does not expire, however old its last handled heartbeat.

LAGGING: commands are sent and applied (a heartbeat reporting the highest
number sent) and disk probes reported; at a detector round a server with a command unapplied
for ``>= agent_lag_timeout`` or a probe ``> 5 s`` is LAGGING (SUSPECT for placement,
``lagging_time`` set); every condition clear for a whole timeout ends it; at ``since + 2 x
timeout`` (the third timeout) its heartbeats stop renewing its lease until the episode ends;
a server whose lease expired otherwise is not judged and its commands are forgotten.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.servers.loader import MAX_GRACE_LEASES
from rootservice.servers.status import AdminStatus, HeartbeatStatus, display_status
from tests.support.harness import SEEDED, hb, make_rs, server_row

S = 1_000_000
LEASE = 10 * S
OFFLINE = 30 * S
WINDOW = 2 * OFFLINE
SUSPECT = 4 * S
LAG = 5 * S  # agent_lag_timeout
DISK = 5 * S  # the disk limit at this timeout
CAP = 300 * S
MAINT = 60 * S
SERVERS = [s for s, _ in SEEDED]
ZONE = dict(SEEDED)


# --- the RS's operations, in one place (the test's only coupling to the layout) -------------


def receive_hb(rs: RootService, server: str, applied: int = 0, disk_us: int = 0) -> None:
    rs.heartbeats.receive_hb(
        hb(server, ZONE[server], applied_command_seq=applied, disk_probe_latency_us=disk_us)
    )


def tick(rs: RootService) -> None:
    rs.lease_checker.run_once()


def flush(rs: RootService) -> None:
    rs.persist.run_once()


def record(rs: RootService, server: str) -> tuple[HeartbeatStatus, AdminStatus, bool]:
    s = rs.whitelist.get(server)
    assert s is not None
    return s.hb_status, s.admin_status, s.stop_time != 0


def statement(rs: RootService, op: str, server: str) -> str:
    """Run one admin operation; returns "" or the OceanBase error name it raised."""
    m = rs.server_admin
    calls = {
        "stop": lambda: m.stop_servers([server], None, "STOP"),
        "start": lambda: m.start_servers([server], None),
        "delete": lambda: m.delete_servers([server], None),
        "cancel": lambda: m.cancel_delete_servers([server], None),
        "maintenance": lambda: m.stop_servers([server], None, "STOP", maintenance_us=MAINT),
        "drain": lambda: rs.drains.drain(server, "10s"),
    }
    try:
        calls[op]()
    except ObError as e:
        return e.name
    return ""


# --- the model -----------------------------------------------------------------------------


@dataclass
class ServerModel:
    """What one server's record should be."""

    hb: HeartbeatStatus
    last_hb: int
    admin: AdminStatus = AdminStatus.NORMAL
    stopped: bool = False
    # SUSPECT: the current suspect time, the last return, the end of the suspect
    # period, the last heartbeat before an expiry this RS saw (0: none since the return),
    # the closed outages, and whether suspect_end_time is set.
    p: int = SUSPECT
    returned: int = 0
    until: int = 0
    down_since: int = 0
    spans: list[tuple[int, int]] = field(default_factory=list)
    shown: bool = False
    # Maintenance: the window's wall end (0: none) and monotonic floor.
    maint_end: int = 0
    floor: int = 0

    def outage_start(self, since: int) -> int:
        return max(since, self.floor) if self.floor else since

    # LAGGING: send times of the unapplied commands, the last reported
    # disk latency, the episode's start / all-clear start (None: none) and its expiry.
    pending: list[int] = field(default_factory=list)
    disk: int = 0
    lag_since: int | None = None
    clear_since: int | None = None
    lag_expired: bool = False
    # Its requests waiting in the RS's lease queue (sent, not handled yet).
    queued: int = 0

    def suspect(self, now: int) -> bool:
        return self.hb is HeartbeatStatus.ALIVE and now < self.until

    def offline(self, now: int) -> int:
        """Offline within (now - WINDOW, now]: the closed outages and the open one."""
        left = now - WINDOW
        total = sum(max(0, min(b, now) - max(a, left)) for a, b in self.spans)
        if self.hb is not HeartbeatStatus.ALIVE:
            total += max(0, now - max(self.outage_start(self.last_hb), left))
        return total

    def expired(self) -> None:
        """A lease expiry this RS saw (last heartbeat ``last_hb``)."""
        if self.returned:
            run = self.last_hb - self.returned
            if run < 2 * self.p:
                self.p = min(2 * self.p, CAP)
            else:
                # Clean windows after the suspect period, each as long as p was then.
                end = self.returned + self.p
                while self.p > SUSPECT and self.last_hb >= end + self.p:
                    end += self.p
                    self.p = max(SUSPECT, self.p // 2)
        self.returned = self.until = 0
        self.down_since = self.last_hb
        self.shown = False


class ServerStatusMachine(RuleBasedStateMachine):
    """Drives one RS and the model side by side."""

    @initialize(table_alive=st.sets(st.sampled_from(SERVERS)))
    def start(self, table_alive: set[str]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="obrs-model-"))
        self.rs = make_rs(
            f"sqlite:///{self.tmp}/rs.db",
            self.tmp,
            lease_time="10s",
            server_permanent_offline_time="30s",
            server_suspect_time="4s",
            agent_lag_timeout="5s",
        )
        self.sent: dict[str, int] = {}  # the highest command number sent to each server
        self.waiting: list[str] = []  # the servers of the queued requests, oldest first
        now = self.now()
        # Seeded as BOOTSTRAP + ADD SERVER leave servers that never heartbeated: lease
        # expired at the load, the take-office grace running for one lease.
        self.grace_until = now + LEASE
        self.model = {
            s: ServerModel(HeartbeatStatus.LEASE_EXPIRED, last_hb=now - LEASE) for s in SERVERS
        }
        # The take-office grace: servers the table shows ACTIVE at the take
        # office are candidates until they come back or the grace ends.
        self.office = now
        self.candidates: set[str] = set()
        self.last_return = 0
        # Candidates whose row an admin statement rewrote (write-through): no longer ACTIVE.
        self.rewritten: set[str] = set()
        if table_alive:
            # Those servers heartbeated and their rows were written ACTIVE; then the RS took
            # office again (what a step-down and do_restart do to memory), the clock unmoved.
            for server in sorted(table_alive):
                receive_hb(self.rs, server)
            flush(self.rs)
            self.rs.whitelist.clear()
            self.rs.take_office_grace.clear()
            self.rs.server_loader.load(take_office=True)
            self.candidates = set(table_alive)
            for server in table_alive:
                self.model[server].last_hb = now
        # Self-suspicion: server -> when its lease expired, in the window or the episode.
        self.expired_at: dict[str, int] = {}
        self.suspected = False
        self.hold_until = 0

    def teardown(self) -> None:
        if hasattr(self, "rs"):
            self.rs.shutdown()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def now(self) -> int:
        """The model's time: the RS's monotonic clock (a wall step must change nothing)."""
        return self.rs.clock.monotonic_us()

    @rule(us=st.sampled_from([1, LEASE - 1, LEASE, OFFLINE - LEASE, 2 * S, SUSPECT]))
    def advance(self, us: int) -> None:
        self.rs.clock.advance(us)

    @rule(us=st.sampled_from([3600 * S, -3600 * S, LEASE, -LEASE, OFFLINE]))
    def wall_jump(self, us: int) -> None:
        # Only the wall clock steps; the model does not change.
        self.rs.clock.jump(us)

    @rule(
        server=st.sampled_from(SERVERS),
        limit=st.sampled_from([LEASE, OFFLINE]),
        offset=st.sampled_from([-1, 0, 1]),
    )
    def to_a_boundary(self, server: str, limit: int, offset: int) -> None:
        # Both sides of each boundary of one server: its lease, its permanent offline.
        target = self.model[server].last_hb + limit + offset
        if target > self.now():
            self.rs.clock.advance(target - self.now())

    @rule(
        which=st.sampled_from(["first_lease", "return", "cap"]), offset=st.sampled_from([-1, 0, 1])
    )
    def to_a_grace_boundary(self, which: str, offset: int) -> None:
        # Both sides of each boundary of the take-office grace.
        target = {
            "first_lease": self.office + LEASE,
            "return": self.last_return + LEASE // 2,
            "cap": self.office + MAX_GRACE_LEASES * LEASE,
        }[which] + offset
        if target > self.now():
            self.rs.clock.advance(target - self.now())

    @rule(server=st.sampled_from(SERVERS), offset=st.sampled_from([-1, 0, 1]))
    def to_a_suspect_boundary(self, server: str, offset: int) -> None:
        # Both sides of the end of a SUSPECT period and of its watch window (2p).
        m = self.model[server]
        for target in (m.until + offset, m.returned + 2 * m.p + offset):
            if m.returned and target > self.now():
                self.rs.clock.advance(target - self.now())
                return

    @rule(server=st.sampled_from(SERVERS), offset=st.sampled_from([-1, 0]))
    def to_the_offline_boundary(self, server: str, offset: int) -> None:
        # Both sides of the instant the offline total of a down server reaches the limit.
        m = self.model[server]
        if m.hb is not HeartbeatStatus.LEASE_EXPIRED:
            return
        t = self.now()
        for _ in range(100):
            short = OFFLINE - m.offline(t)
            if short <= 0:
                break
            t += short
        if t + offset > self.now():
            self.rs.clock.advance(t + offset - self.now())

    @rule(server=st.sampled_from(SERVERS), up=st.sampled_from([S, SUSPECT, 3 * SUSPECT]))
    def flap(self, server: str, up: int) -> None:
        # Down 11 s (its lease expires), back, up for a while: the pattern.
        self.rs.clock.advance(LEASE + S)
        self.checker_tick()
        self.heartbeat(server)
        self.rs.clock.advance(up)
        self.heartbeat(server)

    @rule(server=st.sampled_from(SERVERS))
    def command(self, server: str) -> None:
        self.sent[server] = self.rs.agents.ledger.issue(server, self.rs.term.epoch, self.now())
        self.model[server].pending.append(self.now())

    @rule(server=st.sampled_from(SERVERS), disk_us=st.sampled_from([0, DISK, DISK + 1]))
    def applied(self, server: str, disk_us: int) -> None:
        # A heartbeat reporting every command sent applied, and a disk-probe latency.
        self.heartbeat(server, self.sent.get(server, 0), disk_us)
        self.model[server].pending.clear()

    @rule(server=st.sampled_from(SERVERS), offset=st.sampled_from([-1, 0]))
    def to_a_lag_boundary(self, server: str, offset: int) -> None:
        # Both sides of: the oldest command overdue, the third timeout, the all-clear end.
        m = self.model[server]
        targets = [m.pending[0] + LAG] if m.pending else []
        if m.lag_since is not None:
            targets.append(m.lag_since + 2 * LAG)
        if m.clear_since is not None:
            targets.append(m.clear_since + LAG)
        for target in targets:
            if target + offset > self.now():
                self.rs.clock.advance(target + offset - self.now())
                break
        self.lag_round()

    @rule(
        server=st.sampled_from(SERVERS),
        step=st.sampled_from([LAG // 2, LAG - 1, LAG + 1]),
        apply_at=st.sampled_from([None, 1, 3]),
    )
    def lag_walk(self, server: str, step: int, apply_at: int | None) -> None:
        # A command left unapplied while the server heartbeats: through the timeout, the
        # third timeout and (applied at step ``apply_at``) the all-clear.
        self.command(server)
        for i in range(6):
            self.rs.clock.advance(step)
            if i == apply_at:
                self.applied(server, 0)
            else:
                self.heartbeat(server)
            self.lag_round()

    @rule()
    def lag_round(self) -> None:
        self.rs.lag_detector.run_once()
        now = self.now()
        for m in self.model.values():
            if m.hb is not HeartbeatStatus.ALIVE and not m.lag_expired:
                m.pending.clear()
                m.lag_since = m.clear_since = None
                continue
            lagging = (bool(m.pending) and now - m.pending[0] >= LAG) or m.disk > DISK
            if lagging:
                m.lag_since = now if m.lag_since is None else m.lag_since
                m.clear_since = None
                m.lag_expired = m.lag_expired or now - m.lag_since >= 2 * LAG
            elif m.lag_since is not None:
                m.clear_since = now if m.clear_since is None else m.clear_since
                if now - m.clear_since >= LAG:
                    m.lag_since = m.clear_since = None
                    m.lag_expired = False

    @rule(server=st.sampled_from(SERVERS))
    def heartbeat(self, server: str, applied: int = 0, disk_us: int = 0) -> None:
        receive_hb(self.rs, server, applied, disk_us)
        self.heard(server, disk_us)

    @rule(server=st.sampled_from(SERVERS))
    def send(self, server: str) -> None:
        # A request reaches the RS's own lease queue and waits there: from now until it is
        # handled the server's lease does not expire, however long the wait.
        req = hb(server, ZONE[server])
        # Dated at its arrival as the lease servicer dates it (LeaseServicer._answer).
        arrived = self.rs.clock.now_us()
        self.rs.lease_queue.submit(
            server,
            lambda waited_us: self.rs.heartbeats.receive_hb(req, None, waited_us, arrived),
            lambda resp: None,
            False,
        )
        self.model[server].queued += 1
        self.waiting.append(server)

    @rule()
    def intake(self) -> None:
        # The worker's turn: every waiting request, oldest first, each a heartbeat now.
        self.rs.lease_queue.turn_us = 10**12
        self.rs.lease_queue.run_turn()
        for server in self.waiting:
            self.model[server].queued -= 1
            self.heard(server, 0)
        self.waiting.clear()
        assert self.rs.lease_queue.depth() == 0

    def heard(self, server: str, disk_us: int) -> None:
        """The model of one handled heartbeat of ``server`` at the current time."""
        m = self.model[server]
        m.disk = disk_us
        if m.lag_expired:
            return  # a LAGGING server past its third timeout renews nothing
        now = self.now()
        if m.hb is not HeartbeatStatus.ALIVE and m.down_since:
            m.spans.append((min(now, m.outage_start(m.down_since)), now))
            m.returned, m.until, m.down_since, m.shown = now, now + m.p, 0, True
            s = self.rs.whitelist.get(server)
            assert s is not None
            assert s.suspect_end_time == self.rs.clock.now_us() + m.p, server
        m.hb = HeartbeatStatus.ALIVE
        m.last_hb = now
        if server in self.candidates:
            self.candidates.discard(server)
            self.last_return = self.now()

    @rule(offset=st.sampled_from([-1, 0]))
    def to_the_next_lease_end(self, offset: int) -> None:
        # Both sides of the earliest lease end among the alive servers.
        ends = [m.last_hb + LEASE for m in self.model.values() if m.hb is HeartbeatStatus.ALIVE]
        target = min(ends, default=0) + offset
        if target > self.now():
            self.rs.clock.advance(target - self.now())

    @rule()
    def storm_return(self) -> None:
        # A reconnect storm: the next candidate comes back just inside the grace's window
        # (half a lease after the last return), so the grace outlasts the first lease.
        if not self.candidates:
            return
        target = self.last_return + LEASE // 2 - 1 if self.last_return else self.office + LEASE // 2
        if target > self.now():
            self.rs.clock.advance(target - self.now())
        self.heartbeat(min(self.candidates))

    def grace_holds(self, now: int) -> bool:
        """The candidates still away keep their rows: in the first lease, then while one came
        back within half a lease, never past MAX_GRACE_LEASES leases."""
        if now < self.grace_until:
            return True
        return (
            bool(self.candidates)
            and now - self.last_return < LEASE // 2
            and now < self.office + MAX_GRACE_LEASES * LEASE
        )

    @rule()
    def checker_tick(self) -> None:
        tick(self.rs)
        now = self.now()
        if now < self.grace_until:
            self.maintenance_tick()
            return
        held = self.grace_holds(now)
        if not held:
            # A candidate whose first request waits in the RS's lease queue has reached the
            # RS: it stays a candidate (its row as the table had it) until that is handled.
            kept = {s for s in self.candidates if self.model[s].queued}
            for server in self.candidates - kept:
                self.model[server].expired()
            self.candidates = kept
        for server, m in self.model.items():
            if m.hb is HeartbeatStatus.ALIVE and now - m.last_hb >= LEASE and not m.queued:
                m.hb = HeartbeatStatus.LEASE_EXPIRED
                m.expired()
                self.expired_at[server] = now
            if m.shown and now >= m.until:
                m.shown = False
        if not self.suspected:
            self.expired_at = {k: t for k, t in self.expired_at.items() if now - t <= LEASE}
        self.expired_at = {
            k: t
            for k, t in self.expired_at.items()
            if self.model[k].hb is not HeartbeatStatus.ALIVE
        }
        down = len(self.expired_at)
        alive = sum(m.hb is HeartbeatStatus.ALIVE for m in self.model.values())
        was = self.suspected
        self.suspected = down >= 3 and down * 100 > 50 * (alive + down)
        assert self.rs.self_suspicion.suspected == self.suspected
        if was and not self.suspected:
            # One more lease for the stragglers before the held deadlines fire.
            self.hold_until = now + LEASE
        if not (self.suspected or now < self.hold_until or held):
            for m in self.model.values():
                if m.hb is HeartbeatStatus.LEASE_EXPIRED and m.offline(now) >= OFFLINE:
                    m.hb = HeartbeatStatus.PERMANENT_OFFLINE
        # The maintenance ticker runs with the lease checker.
        self.maintenance_tick()

    @rule(server=st.sampled_from(SERVERS))
    def stop(self, server: str) -> None:
        others_stopped = any(m.stopped for s, m in self.model.items() if ZONE[s] != ZONE[server])
        got = statement(self.rs, "stop", server)
        if others_stopped:
            assert got == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
        else:
            assert got == ""
            self.model[server].stopped = True
            self.rewritten.add(server)

    @rule(server=st.sampled_from(SERVERS))
    def start_server(self, server: str) -> None:
        assert statement(self.rs, "start", server) == ""
        m = self.model[server]
        m.stopped = False
        if m.maint_end:
            m.maint_end = 0
            m.floor = min(m.floor, self.now())
        self.rewritten.add(server)

    @rule(server=st.sampled_from(SERVERS))
    def stop_for_maintenance(self, server: str) -> None:
        others_stopped = any(m.stopped for s, m in self.model.items() if ZONE[s] != ZONE[server])
        got = statement(self.rs, "maintenance", server)
        if others_stopped:
            assert got == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
            return
        assert got == ""
        m = self.model[server]
        m.stopped = True
        m.maint_end = self.rs.clock.now_us() + MAINT
        m.floor = self.now() + MAINT
        self.rewritten.add(server)

    @rule()
    def maintenance_tick(self) -> None:
        self.rs.maintenance.run_once()
        wall = self.rs.clock.now_us()
        for server, m in self.model.items():
            if m.maint_end and wall >= m.maint_end:
                m.maint_end = 0
                if m.hb is HeartbeatStatus.ALIVE:
                    m.stopped = False
                self.rewritten.add(server)

    @rule(which=st.sampled_from(["floor", "wall", "offline"]), offset=st.sampled_from([-1, 0, 1]))
    def to_a_maintenance_boundary(self, which: str, offset: int) -> None:
        # Both sides of the next window's monotonic end (the floor), of its wall end, and of
        # the permanent-offline limit counted from the floor.
        wall = self.rs.clock.now_us()
        deltas = [
            {
                "floor": m.floor - self.now(),
                "wall": m.maint_end - wall,
                "offline": m.floor + OFFLINE - self.now(),
            }[which]
            + offset
            for m in self.model.values()
            if m.maint_end
        ]
        ahead = [d for d in deltas if d > 0]
        if ahead:
            self.rs.clock.advance(min(ahead))

    @rule(server=st.sampled_from(SERVERS))
    def drain(self, server: str) -> None:
        m = self.model[server]
        got = statement(self.rs, "drain", server)
        if m.admin is AdminStatus.DELETING:
            assert got == "OB_SERVER_ALREADY_DELETED"
            return
        # No log stream in this cluster: nothing to move, the drain finishes at once.
        assert got == ""
        m.stopped = True
        self.rewritten.add(server)
        s = self.rs.whitelist.get(server)
        assert s is not None and not s.draining

    @rule(server=st.sampled_from(SERVERS))
    def delete(self, server: str) -> None:
        m = self.model[server]
        got = statement(self.rs, "delete", server)
        if m.admin is AdminStatus.DELETING:
            assert got == "OB_SERVER_ALREADY_DELETED"
        else:
            assert got == ""
            m.admin = AdminStatus.DELETING
            self.rewritten.add(server)

    @rule(server=st.sampled_from(SERVERS))
    def cancel_delete(self, server: str) -> None:
        m = self.model[server]
        got = statement(self.rs, "cancel", server)
        if m.admin is not AdminStatus.DELETING:
            assert got == "OB_SERVER_NOT_DELETING"
        else:
            assert got == ""
            m.admin = AdminStatus.NORMAL
            self.rewritten.add(server)

    @rule()
    def persist(self) -> None:
        flush(self.rs)
        for server, m in self.model.items():
            row = server_row(self.rs, server)
            assert row is not None
            if server in self.candidates:
                # Held by the grace: the row as the table had it, unless a statement wrote it.
                if server not in self.rewritten:
                    assert row["status"] == "ACTIVE", server
            else:
                assert row["status"] == display_status(m.admin, m.hb).value, server
            assert (row["stop_time"] != 0) == m.stopped, server
            assert (row["suspect_end_time"] != 0) == m.shown, server
            assert row["maintenance_end_time"] == m.maint_end, server
            assert (row["lagging_time"] != 0) == (m.lag_since is not None), server

    @invariant()
    def whitelist_agrees_with_the_model(self) -> None:
        if not hasattr(self, "rs"):
            return
        now = self.now()
        for server, m in self.model.items():
            assert record(self.rs, server) == (m.hb, m.admin, m.stopped), server
            s = self.rs.whitelist.get(server)
            assert s is not None
            lagging = m.lag_since is not None
            alive = m.hb is HeartbeatStatus.ALIVE
            assert s.is_suspect(now) == (m.suspect(now) or (lagging and alive)), server
            assert (s.suspect_end_time != 0) == m.shown, server
            assert s.maintenance_end_time == m.maint_end, server
            assert s.lag.lagging == lagging and s.lag.expired == m.lag_expired, server
        assert self.rs.take_office_grace.candidates == self.candidates


ServerStatusMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_server_status_matches_its_model = ServerStatusMachine.TestCase
