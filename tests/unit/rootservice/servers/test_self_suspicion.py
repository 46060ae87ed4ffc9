"""Self-suspicion of the RS after a mass lease expiry (
rootservice/servers/self_suspicion.py): both sides of the percentage and of the minimum
count, the lease_time window, the episode that outlives it, the end and its events; then in
the lease checker of an in-process RS (SQLite, FakeClock): permanent offline held while
suspected, released with its normal deadline after, and a lone loss unaffected."""

from __future__ import annotations

from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.servers.self_suspicion import SelfSuspicion
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import SEEDED, events, flush, hb, hb_status, make_rs

S = 1_000_000
LEASE = 10 * S


class World:
    def __init__(self, n: int, **settings: object) -> None:
        self.clock = FakeClock()
        self.alive = {f"s{i}" for i in range(n)}
        self.events: list[Event] = []
        st = RsSettings(lease_time="10s", **settings)  # type: ignore[arg-type]
        self.s = SelfSuspicion(self.clock, st, lambda k: k in self.alive, self.events.append)

    def lose(self, *keys: str) -> bool:
        self.alive -= set(keys)
        return self.s.observe(self.clock.now_us(), list(keys), len(self.alive))

    def back(self, *keys: str) -> bool:
        self.alive |= set(keys)
        return self.s.observe(self.clock.now_us(), [], len(self.alive))


@pytest.mark.parametrize(("lost", "suspected"), [(5, False), (6, True)])
def test_more_than_the_percentage_of_the_servers(lost: int, suspected: bool) -> None:
    w = World(10)
    assert w.lose(*[f"s{i}" for i in range(lost)]) is suspected  # 50% is not more than 50%


@pytest.mark.parametrize(("n", "lost", "suspected"), [(3, 2, False), (4, 3, True)])
def test_at_least_the_minimum_count(n: int, lost: int, suspected: bool) -> None:
    # A 3-server test cluster losing 2 agents is not a mass expiry; 3 of 4 is.
    w = World(n)
    assert w.lose(*[f"s{i}" for i in range(lost)]) is suspected


def test_settings_are_read_on_every_tick() -> None:
    w = World(10, server_mass_expire_percentage=20, server_mass_expire_min_count=2)
    assert w.lose("s0", "s1") is False  # 20% is not more than 20%
    assert w.lose("s2") is True


@pytest.mark.parametrize(("gap", "suspected"), [(LEASE, True), (LEASE + 1, False)])
def test_expiries_count_within_one_lease_time(gap: int, suspected: bool) -> None:
    w = World(6)
    w.lose("s0", "s1")
    w.clock.advance(gap)
    assert w.lose("s2", "s3") is suspected


def test_the_episode_outlives_the_window_holds_and_ends_when_they_come_back() -> None:
    w = World(8)
    assert w.lose(*[f"s{i}" for i in range(6)]) is True
    assert [e.event for e in w.events] == ["self_suspect"]
    assert dict(w.events[0].values) == {"expired": 6, "alive_at_start": 8, "percentage": 50}
    w.clock.advance(10 * LEASE)  # still silent long after the window: still suspected
    assert w.back() is True
    assert w.back("s0") is True  # 5 of 8 still down
    # 4 of 8: not more than 50%, the episode ends; the hold lasts one more lease.
    assert w.back("s1") is True and not w.s.suspected
    assert [e.event for e in w.events] == ["self_suspect", "self_suspect_end"]
    assert dict(w.events[1].values) == {"still_expired": 4, "servers": 8}
    assert w.s.episodes == 1


def test_the_episode_ends_below_the_minimum_count_and_a_new_one_can_start() -> None:
    w = World(4)
    assert w.lose("s0", "s1", "s2") is True
    assert w.back("s0") is True and not w.s.suspected  # 2 down: under the minimum count
    w.clock.advance(LEASE - 1)
    assert w.back() is True  # the stragglers' lease after the episode
    w.clock.advance(2)
    w.back()  # the window forgets the old expiries
    assert w.lose("s3") is False
    assert w.back("s1", "s2") is False
    assert w.lose("s0", "s1", "s2") is True
    assert w.s.episodes == 2


# --- in the lease checker ------------------------------------------------------------------


def test_mass_expiry_holds_permanent_offline_until_the_agents_return(tmp_path: Path) -> None:
    rs = make_rs(f"sqlite:///{tmp_path}/rs.db", tmp_path, server_permanent_offline_time="30s")
    try:
        rs.clock.advance(LEASE)  # past the take-office grace
        for server, zone in SEEDED:
            rs.heartbeats.receive_hb(hb(server, zone))
        lost, kept = SEEDED[:3], SEEDED[3]
        rs.clock.advance(LEASE)
        rs.heartbeats.receive_hb(hb(*kept))
        assert rs.lease_checker.run_once() == 3  # three lease_expire, no more
        assert rs.self_suspicion.suspected and rs.readings().self_suspect
        rs.clock.advance(60 * S)  # far past the permanent-offline deadline
        rs.heartbeats.receive_hb(hb(*kept))
        assert rs.lease_checker.run_once() == 0
        assert all(hb_status(rs, s) is HeartbeatStatus.LEASE_EXPIRED for s, _ in lost)
        # Two agents come back: one of four still down, the episode ends; the last one gets
        # one more lease_time to come back, then its held deadline applies.
        for server, zone in lost[:2]:
            rs.heartbeats.receive_hb(hb(server, zone))
        assert rs.lease_checker.run_once() == 0
        assert not rs.self_suspicion.suspected
        rs.clock.advance(LEASE - 1)
        for server, zone in [*lost[:2], kept]:
            rs.heartbeats.receive_hb(hb(server, zone))
        assert rs.lease_checker.run_once() == 0
        rs.clock.advance(1)
        assert rs.lease_checker.run_once() == 1
        assert hb_status(rs, lost[2][0]) is HeartbeatStatus.PERMANENT_OFFLINE
        flush(rs)
        assert [e["event"] for e in events(rs) if e["module"] == "root_service"][-2:] == [
            "self_suspect",
            "self_suspect_end",
        ]
        assert [e["value1"] for e in events(rs, "permanent_offline")] == [lost[2][0]]
    finally:
        rs.shutdown()


def test_a_single_loss_still_goes_permanent_offline(tmp_path: Path) -> None:
    rs = make_rs(f"sqlite:///{tmp_path}/rs.db", tmp_path, server_permanent_offline_time="30s")
    try:
        rs.clock.advance(LEASE)
        for server, zone in SEEDED:
            rs.heartbeats.receive_hb(hb(server, zone))
        for _ in range(4):  # 40 s, the other three heartbeating
            rs.clock.advance(LEASE)
            for server, zone in SEEDED[1:]:
                rs.heartbeats.receive_hb(hb(server, zone))
            rs.lease_checker.run_once()
        assert not rs.self_suspicion.suspected
        assert hb_status(rs, SEEDED[0][0]) is HeartbeatStatus.PERMANENT_OFFLINE
    finally:
        rs.shutdown()


@pytest.mark.parametrize(
    ("raw", "ok"),
    [("1", True), ("100", True), (55, True), ("0", False), ("101", False), ("x", False)],
)
def test_the_percentage_parameter_is_range_checked(raw: object, ok: bool) -> None:
    from obcommon.errors import ObError
    from rootservice.config import validate_parameter

    if ok:
        assert validate_parameter(RsSettings(), "server_mass_expire_percentage", raw) == int(raw)  # type: ignore[arg-type, call-overload]
    else:
        with pytest.raises(ObError) as e:
            validate_parameter(RsSettings(), "server_mass_expire_percentage", raw)  # type: ignore[arg-type]
        assert e.value.name == "OB_INVALID_CONFIG"
