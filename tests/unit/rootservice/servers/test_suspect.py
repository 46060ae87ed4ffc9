"""SUSPECT servers and the sliding permanent-offline window in a whole RS:
a flapping server (down 11 s / up 1 s) is SUSPECT from each return, twice as long each time
up to 5 min, shown in ``__all_server``, the events, the status API and ``/metrics``, and is
permanently offline once its downtime adds up to ``server_permanent_offline_time``; a clean
return ends exactly ``server_suspect_time`` later; a new leader resumes the period. FakeClock,
both databases."""

from __future__ import annotations

from pathlib import Path

from rootservice.app import RootService
from rootservice.http.status import server_doc
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import SEEDED, A, events, flush, hb, hb_status, make_rs, server_row

S = 1_000_000
LEASE = 10 * S
OFFLINE = 60 * S
SUSPECT = 30 * S
OTHERS = [x for x in SEEDED if x[0] != A]


def _others(rs: RootService) -> None:
    for server, zone in OTHERS:
        rs.heartbeats.receive_hb(hb(server, zone))


def _pass(rs: RootService, us: int) -> None:
    """``us`` microseconds in 1 s steps: the others heartbeat, the checker ticks."""
    for _ in range(us // S):
        rs.clock.advance(S)
        _others(rs)
        rs.lease_checker.run_once()


def _back(rs: RootService) -> None:
    rs.heartbeats.receive_hb(hb(A, "z1"))


def test_a_flapping_server_is_suspect_longer_each_time_and_reaches_permanent_offline(
    db_url: str, tmp_path: Path
) -> None:
    rs = make_rs(db_url, tmp_path, server_permanent_offline_time="60s")
    try:
        rs.clock.advance(LEASE)  # past the take-office grace
        _others(rs)
        _back(rs)
        assert not rs.tenant_layer.health.is_suspect(A)  # the first heartbeat: no expiry seen
        suspect_times = []
        for outage in range(1, 7):
            # Up 1 s (one more heartbeat), then down 11 s: the lease expires after 10.
            _pass(rs, S)
            _back(rs)
            _pass(rs, 11 * S)
            s = rs.whitelist.get(A)
            if outage < 6:
                # 11 s per outage, from the last heartbeat to the return: 55 s < 60 s.
                assert s.hb_status is HeartbeatStatus.LEASE_EXPIRED, outage
                _back(rs)
                s = rs.whitelist.get(A)
                assert rs.tenant_layer.health.is_suspect(A)
                suspect_times.append(s.suspect_end_time - rs.clock.now_us())
                flush(rs)
                assert server_row(rs, A)["suspect_end_time"] == s.suspect_end_time
                doc = server_doc(s, rs.clock.now_us(), 0)
                assert doc["suspect"] and doc["suspect_end_time_us"] == s.suspect_end_time
                assert rs.readings().servers_suspect == 1
            else:
                # The sixth outage passes 60 s of downtime within the window: permanent
                # offline at its lease expiry (the old clock restarted at every heartbeat).
                assert s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
                assert s.suspect_end_time == 0
                assert rs.readings().servers_suspect == 0
        # The first return after an expiry: server_suspect_time; each repeat within the
        # watch window doubles it, up to 5 min.
        assert suspect_times == [SUSPECT, 2 * SUSPECT, 4 * SUSPECT, 8 * SUSPECT, 300 * S]
        flush(rs)
        assert len(events(rs, "suspect")) == 5
        [ev] = events(rs, "permanent_offline")
        assert ev["value1"] == A and ev["name4"] == "offline_in_window"
    finally:
        rs.shutdown()


def test_a_clean_return_ends_exactly_after_the_suspect_time(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    _others(rs)
    _back(rs)
    _pass(rs, 11 * S)
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    _back(rs)
    back_mono = rs.clock.monotonic_us()
    end = rs.whitelist.get(A).suspect_end_time
    assert end == rs.clock.now_us() + SUSPECT
    # Gap-free heartbeats until one microsecond before the end.
    for _ in range(SUSPECT // S - 1):
        rs.clock.advance(S)
        _others(rs)
        _back(rs)
        rs.lease_checker.run_once()
    rs.clock.advance(back_mono + SUSPECT - 1 - rs.clock.monotonic_us())
    rs.lease_checker.run_once()
    assert rs.tenant_layer.health.is_suspect(A)
    assert rs.whitelist.get(A).suspect_end_time == end
    rs.clock.advance(1)
    assert not rs.tenant_layer.health.is_suspect(A)
    rs.lease_checker.run_once()
    assert rs.whitelist.get(A).suspect_end_time == 0
    flush(rs)
    assert server_row(rs, A)["suspect_end_time"] == 0
    assert [e["value1"] for e in events(rs, "suspect_end")] == [A]


def test_a_new_leader_resumes_the_suspect_period(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    _others(rs)
    _back(rs)
    _pass(rs, 11 * S)
    _back(rs)
    end = rs.whitelist.get(A).suspect_end_time
    flush(rs)
    rs.clock.advance(10 * S)
    # A new term: memory comes from the tables (what a failover does).
    rs.whitelist.clear()
    rs.take_office_grace.clear()
    rs.server_loader.load(take_office=True)
    assert rs.whitelist.get(A).suspect_end_time == end
    _others(rs)
    _back(rs)  # a take-office candidate back: not a new SUSPECT period, the old one goes on
    assert rs.whitelist.get(A).suspect_end_time == end
    rs.clock.advance(end - 1 - rs.clock.now_us())
    assert rs.tenant_layer.health.is_suspect(A)
    rs.clock.advance(1)
    assert not rs.tenant_layer.health.is_suspect(A)
