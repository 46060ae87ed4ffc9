"""Permanent offline is declared once per episode of being gone: a flapping server past the
limit turns permanently offline at each outage, but the event ``permanent_offline`` and the
counter ``servers_permanent_offline_total`` count it once; the episode ends when its
earlier outages within the window add up to less than ``server_permanent_offline_time``
at the start of a new outage, which is then declared on its own count. FakeClock, both
databases."""

from __future__ import annotations

from pathlib import Path

from rootservice.app import RootService
from rootservice.servers.offline_window import episode_over
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import SEEDED, A, events, flush, hb, make_rs

S = 1_000_000
LEASE = 10 * S
OFFLINE = 60 * S
OTHERS = [x for x in SEEDED if x[0] != A]
COUNTER = "servers_permanent_offline_total"


def _tick(rs: RootService, us: int, a_up: bool) -> None:
    """Advance ``us``; the others (and A when ``a_up``) heartbeat; the checker ticks."""
    rs.clock.advance(us)
    for server, zone in OTHERS:
        rs.heartbeats.receive_hb(hb(server, zone))
    if a_up:
        rs.heartbeats.receive_hb(hb(A, "z1"))
    rs.lease_checker.run_once()


def _pass(rs: RootService, us: int, a_up: bool) -> None:
    for _ in range(us // S):
        _tick(rs, S, a_up)


def _declared(rs: RootService) -> int:
    flush(rs)
    n = len(events(rs, "permanent_offline"))
    assert rs.metrics.get(COUNTER) == n  # the events and the counter agree
    return n


def _rs(db_url: str, tmp_path: Path) -> RootService:
    rs = make_rs(db_url, tmp_path, server_permanent_offline_time="60s")
    rs.clock.advance(LEASE)  # past the take-office grace
    _tick(rs, 0, a_up=True)
    return rs


def test_a_flapper_is_declared_once_for_its_whole_flapping(db_url: str, tmp_path: Path) -> None:
    rs = _rs(db_url, tmp_path)
    try:
        # Down 11 s, up 1 s: the sixth outage passes 60 s within the window (declared);
        # twenty more outages follow, each permanently offline again at its lease expiry.
        statuses = []
        for _ in range(26):
            _pass(rs, 11 * S, a_up=False)
            statuses.append(rs.whitelist.get(A).hb_status)
            _pass(rs, S, a_up=True)
        assert statuses[:5] == [HeartbeatStatus.LEASE_EXPIRED] * 5
        assert statuses[5:] == [HeartbeatStatus.PERMANENT_OFFLINE] * 21
        assert _declared(rs) == 1
    finally:
        rs.shutdown()


def _one_long_outage_then_up(rs: RootService, up_us: int) -> None:
    """A gone 65 s (declared at 60 s), then back and heartbeating for ``up_us``, then gone
    again for a lease and a second."""
    _pass(rs, 65 * S, a_up=False)
    assert rs.whitelist.get(A).hb_status is HeartbeatStatus.PERMANENT_OFFLINE
    assert _declared(rs) == 1
    _tick(rs, 0, a_up=True)  # back at r
    _pass(rs, up_us - up_us % S, a_up=True)
    if up_us % S:
        _tick(rs, up_us % S, a_up=True)  # its last heartbeat: r + up_us
    _pass(rs, 11 * S, a_up=False)


def test_back_for_exactly_the_limit_is_still_the_same_episode(db_url: str, tmp_path: Path) -> None:
    rs = _rs(db_url, tmp_path)
    try:
        # The 65 s outage is still 60 s of the window at the next outage's start.
        _one_long_outage_then_up(rs, OFFLINE)
        s = rs.whitelist.get(A)
        assert not episode_over(s.offline_spans, s.last_hb_mono_us, OFFLINE)
        assert s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        assert _declared(rs) == 1
    finally:
        rs.shutdown()


def test_back_longer_than_the_limit_ends_the_episode(db_url: str, tmp_path: Path) -> None:
    rs = _rs(db_url, tmp_path)
    try:
        # One microsecond more: the old outage counts 60 s - 1 us at the new one's start, a
        # new episode. The window slides as the new outage grows: it is declared again, with
        # a second event, once it has been offline the limit in the window once more.
        _one_long_outage_then_up(rs, OFFLINE + 1)
        s = rs.whitelist.get(A)
        assert episode_over(s.offline_spans, s.last_hb_mono_us, OFFLINE)
        assert s.hb_status is HeartbeatStatus.LEASE_EXPIRED
        assert _declared(rs) == 1
        for _ in range(OFFLINE // S):
            if rs.whitelist.get(A).hb_status is HeartbeatStatus.PERMANENT_OFFLINE:
                break
            _tick(rs, S, a_up=False)
        assert rs.whitelist.get(A).hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        assert _declared(rs) == 2
    finally:
        rs.shutdown()
