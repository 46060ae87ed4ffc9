"""The server status state machine (SPEC.md sections 3, 5-7) checked against a small pure
model with Hypothesis.

One in-process RS on SQLite and a FakeClock (``tests.support.harness.make_rs``) with four
whitelisted servers in three zones; Hypothesis interleaves heartbeats, clock steps, checker
ticks, steps of the RS's wall clock alone (+-1 h, +-lease_time: NTP or ``date -s``; the
monotonic clock does not move), STOP / START / DELETE / CANCEL DELETE SERVER and persistence
flushes, and after every step the whitelist must show, for every server, the heartbeat
status, admin status and stop state the model computes from first principles: a heartbeat
makes a server alive, a lease expires at ``mono - last heartbeat >= lease_time`` on the
monotonic clock (a wall step changes nothing, issue 14 item 7), a server is permanently
offline at ``>= server_permanent_offline_time`` unless the RS suspects itself (issue 14 item
7: at least 3 and more than half of the servers alive at the start of a lease_time window
lost their lease in it; held until those still down are no longer such a share), nothing
expires in the first lease_time after the take office, the take-office grace is per server
(issue 23 item 3: the servers the table showed ACTIVE at the take office keep their rows until
they come back or the grace ends, half a lease_time after the last of them came back and at
most MAX_GRACE_LEASES leases after the take office; a server back is judged on its own lease;
no permanent offline while the grace holds), STOP is refused while another zone has a stopped
server, DELETE of a DELETING server and CANCEL of a NORMAL one are refused. After a flush,
``__all_server`` shows the display status (ACTIVE for a candidate still held).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
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
SERVERS = [s for s, _ in SEEDED]
ZONE = dict(SEEDED)


# --- the RS's operations, in one place (the test's only coupling to the layout) -------------


def receive_hb(rs: RootService, server: str) -> None:
    rs.heartbeats.receive_hb(hb(server, ZONE[server]))


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
        )
        now = self.now()
        # Seeded as BOOTSTRAP + ADD SERVER leave servers that never heartbeated: lease
        # expired at the load, the take-office grace running for one lease.
        self.grace_until = now + LEASE
        self.model = {
            s: ServerModel(HeartbeatStatus.LEASE_EXPIRED, last_hb=now - LEASE) for s in SERVERS
        }
        # The take-office grace (issue 23 item 3): servers the table shows ACTIVE at the take
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

    @rule(us=st.sampled_from([1, LEASE - 1, LEASE, OFFLINE - LEASE, 2 * S]))
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

    @rule(server=st.sampled_from(SERVERS))
    def heartbeat(self, server: str) -> None:
        receive_hb(self.rs, server)
        m = self.model[server]
        m.hb = HeartbeatStatus.ALIVE
        m.last_hb = self.now()
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
            return
        held = self.grace_holds(now)
        if not held:
            self.candidates.clear()
        for server, m in self.model.items():
            if m.hb is HeartbeatStatus.ALIVE and now - m.last_hb >= LEASE:
                m.hb = HeartbeatStatus.LEASE_EXPIRED
                self.expired_at[server] = now
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
        if self.suspected or now < self.hold_until or held:
            return
        for m in self.model.values():
            if m.hb is HeartbeatStatus.LEASE_EXPIRED and now - m.last_hb >= OFFLINE:
                m.hb = HeartbeatStatus.PERMANENT_OFFLINE

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
        self.model[server].stopped = False
        self.rewritten.add(server)

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

    @invariant()
    def whitelist_agrees_with_the_model(self) -> None:
        if not hasattr(self, "rs"):
            return
        for server, m in self.model.items():
            assert record(self.rs, server) == (m.hb, m.admin, m.stopped), server
        assert self.rs.take_office_grace.candidates == self.candidates


ServerStatusMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_server_status_matches_its_model = ServerStatusMachine.TestCase
