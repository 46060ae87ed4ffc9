"""The lag detector in a whole RS, FakeClock, both databases: a command
unapplied for ``agent_lag_timeout`` (not one microsecond less) or a disk probe over 5 s makes
a heartbeating server LAGGING: event with the stack dump's outcome, SUSPECT for placement,
``__all_server.lagging_time`` / DBA_OB_SERVERS, the status API and ``/metrics``; its third
timeout stops its heartbeats renewing its lease; a stalled copy and a trailing follower are
reported. No agent runs here: DumpStacks fails, and the event says so."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.balancer.copy_tasks import CopyTask
from rootservice.http.status import server_doc
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import SEEDED, A, B, events, flush, hb, make_rs, server_row

S = 1_000_000
T = 5 * S  # agent_lag_timeout of these tests


def _beat(rs: RootService, **fields: object) -> None:
    for server, zone in SEEDED:
        rs.heartbeats.receive_hb(hb(server, zone, **(fields if server == A else {})))


def _rs(db_url: str, tmp_path: Path) -> RootService:
    rs = make_rs(db_url, tmp_path, agent_lag_timeout="5s")
    rs.clock.advance(10 * S)  # past the take-office grace
    _beat(rs)
    return rs


def test_an_unapplied_command_makes_a_server_lagging_exactly_at_the_timeout(
    db_url: str, tmp_path: Path
) -> None:
    rs = _rs(db_url, tmp_path)
    try:
        seq = rs.agents.ledger.issue(A, rs.term.epoch, rs.clock.monotonic_us())
        rs.clock.advance(T - 1)
        _beat(rs, applied_command_seq=seq - 1)
        rs.lag_detector.run_once()
        assert not rs.whitelist.get(A).lag.lagging
        assert not rs.tenant_layer.health.is_suspect(A)
        rs.clock.advance(1)
        t = rs.clock.now_us()
        assert rs.lag_detector.run_once() == 1
        s = rs.whitelist.get(A)
        assert s.lag.lagging and s.lagging_time == t
        # SUSPECT for placement: no new leaders, no copies.
        assert rs.tenant_layer.health.is_suspect(A)
        assert not rs.tenant_layer.health.is_suspect(B)
        flush(rs)
        [ev] = events(rs, "lagging")
        assert ev["value1"] == A and ev["value3"] == "command" and ev["event_time"] == t
        assert f"sent at {t - T} unapplied for 5s" in ev["value4"]
        assert "DumpStacks failed" in ev["extra_info"]  # no agent here
        assert server_row(rs, A)["lagging_time"] == t
        with rs.store.engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT lagging FROM dba_ob_servers WHERE svr_port = 3001")
            ).one()
        assert row[0] == "YES"
        doc = server_doc(s, rs.clock.now_us(), 0)
        assert doc["lagging"] and doc["lag_reasons"] == ["command"]
        assert rs.readings().servers_lagging == 1
        # Applied: clear for a whole timeout ends the episode, not one microsecond earlier.
        _beat(rs, applied_command_seq=seq)
        rs.lag_detector.run_once()
        rs.clock.advance(T - 1)
        _beat(rs, applied_command_seq=seq)
        rs.lag_detector.run_once()
        assert rs.whitelist.get(A).lag.lagging
        rs.clock.advance(1)
        _beat(rs, applied_command_seq=seq)
        rs.lag_detector.run_once()
        assert not rs.whitelist.get(A).lag.lagging
        assert rs.whitelist.get(A).lagging_time == 0
        flush(rs)
        assert len(events(rs, "lagging_end")) == 1
        assert rs.readings().servers_lagging == 0
    finally:
        rs.shutdown()


def test_the_third_timeout_treats_the_server_as_lease_expired(db_url: str, tmp_path: Path) -> None:
    rs = _rs(db_url, tmp_path)
    try:
        rs.agents.ledger.issue(A, rs.term.epoch, rs.clock.monotonic_us())
        rs.clock.advance(T)
        _beat(rs)
        rs.lag_detector.run_once()
        rs.clock.advance(2 * T - 1)
        _beat(rs)
        rs.lag_detector.run_once()
        assert not rs.whitelist.get(A).lag.expired
        rs.clock.advance(1)
        _beat(rs)
        rs.lag_detector.run_once()
        assert rs.whitelist.get(A).lag.expired
        flush(rs)
        assert len(events(rs, "lag_expire")) == 1
        # Its heartbeats go on but renew nothing: expired after lease_time like a silent one.
        for _ in range(10):
            rs.clock.advance(S)
            _beat(rs)
            rs.lease_checker.run_once()
        assert rs.whitelist.get(A).hb_status is HeartbeatStatus.LEASE_EXPIRED
        assert rs.whitelist.get(B).is_alive()
    finally:
        rs.shutdown()


def test_a_slow_disk_probe_makes_a_server_lagging_above_5s(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)  # agent_lag_timeout 30 s: the disk limit is 5 s
    try:
        rs.clock.advance(10 * S)
        _beat(rs, disk_probe_latency_us=5 * S)
        rs.lag_detector.run_once()
        assert not rs.whitelist.get(A).lag.lagging
        _beat(rs, disk_probe_latency_us=5 * S + 1)
        rs.lag_detector.run_once()
        assert rs.whitelist.get(A).lag.reasons == ("disk",)
    finally:
        rs.shutdown()


def _replica(**fields: object) -> obrpc_pb2.ReplicaInfo:
    r = obrpc_pb2.ReplicaInfo(tenant_id=1002, ls_id=1001, replica_type="FULL", term=3)
    for k, v in fields.items():
        setattr(r, k, v)
    return r


def test_a_stalled_copy_and_a_trailing_follower_are_reported_after_twice_the_timeout(
    db_url: str, tmp_path: Path
) -> None:
    rs = _rs(db_url, tmp_path)
    try:

        def beat(lag_us: int, copied: int) -> None:
            now = rs.clock.now_us()
            reps = {
                A: [_replica(role=obrpc_pb2.LEADER, in_service=True, log_end_ts=now)],
                B: [
                    _replica(
                        role=obrpc_pb2.FOLLOWER, in_service=True, log_end_ts=now - lag_us, leader=A
                    )
                ],
                SEEDED[2][0]: [_replica(copy_from=A, bytes_copied=copied)],
            }
            for server, zone in SEEDED:
                req = hb(server, zone)
                req.replicas.extend(reps.get(server, []))
                rs.heartbeats.receive_hb(req)
            rs.lag_detector.run_once()

        # The copy is one the balancer handed out: the stall sends it again.
        dest, key = SEEDED[2][0], (1002, 1001)
        rs.copy_tasks.tasks[(key, dest)] = CopyTask(key, dest, A, B, rs.clock.monotonic_us())
        trail = 3 * S + 1  # above ls_log_sync_threshold (3 s)
        start = rs.clock.monotonic_us()
        beat(trail, 100)
        rs.clock.advance(2 * T - 1)
        beat(trail, 100)
        flush(rs)
        assert not events(rs, "copy_stalled") and not events(rs, "follower_lagging")
        assert rs.copy_tasks.stalled() == frozenset()
        assert rs.lag_detector.lagging_followers() == {}
        rs.clock.advance(1)
        beat(trail, 100)
        flush(rs)
        # The lag rebuilder's input: the follower and when it became LAGGING.
        assert rs.lag_detector.lagging_followers() == {(key, B): start + 2 * T}
        [copy] = events(rs, "copy_stalled")
        [follower] = events(rs, "follower_lagging")
        assert copy["value3"] == SEEDED[2][0] and follower["value3"] == B
        assert rs.copy_tasks.stalled() == {(key, dest)}
        rs.clock.advance(S)
        beat(trail, 100)  # once per episode, which keeps its start
        flush(rs)
        assert rs.lag_detector.lagging_followers() == {(key, B): start + 2 * T}
        assert len(events(rs, "copy_stalled")) == 1
        # A follower exactly at the threshold is in sync; a copy that moved starts again.
        beat(3 * S, 101)
        rs.clock.advance(2 * T)
        beat(3 * S, 101)
        flush(rs)
        assert len(events(rs, "follower_lagging")) == 1
        assert rs.lag_detector.lagging_followers() == {}  # in sync: the episode ended
        assert len(events(rs, "copy_stalled")) == 2  # stalled again for 2 T at 101 bytes
    finally:
        rs.shutdown()


def test_a_copy_still_stalled_after_its_resend_is_judged_afresh(
    db_url: str, tmp_path: Path
) -> None:
    """Acted on, a stalled copy's watch starts again: the resent copy that makes no progress
    either (a stalled destination restarts it at the same byte count) is reported after
    twice the timeout, so that its destination can be re-planned."""
    rs = _rs(db_url, tmp_path)
    try:
        dest, key = SEEDED[2][0], (1002, 1001)

        def beat() -> None:
            reps = {
                A: [_replica(role=obrpc_pb2.LEADER, in_service=True)],
                B: [_replica(role=obrpc_pb2.FOLLOWER, in_service=True, leader=A)],
                dest: [_replica(copy_from=A, bytes_copied=100)],
            }
            for server, zone in SEEDED:
                req = hb(server, zone)
                req.replicas.extend(reps.get(server, []))
                rs.heartbeats.receive_hb(req)
            rs.lag_detector.run_once()

        rs.copy_tasks.tasks[(key, dest)] = CopyTask(key, dest, A, B, rs.clock.monotonic_us())
        beat()
        rs.clock.advance(2 * T)
        beat()
        flush(rs)
        assert len(events(rs, "copy_stalled")) == 1
        assert rs.copy_tasks.stalled() == {(key, dest)}  # sent again from B
        beat()  # the resend's first report: its window starts here
        rs.clock.advance(2 * T - 1)
        beat()
        flush(rs)
        assert len(events(rs, "copy_stalled")) == 1
        rs.clock.advance(1)
        beat()
        flush(rs)
        assert len(events(rs, "copy_stalled")) == 2
        # No unit places it there (no tenant in this RS): sent again once more, as before.
        assert rs.copy_tasks.tasks[(key, dest)].stalls == 2
    finally:
        rs.shutdown()


def test_a_server_hosting_replicas_is_probed_when_idle_and_one_hosting_none_is_not(
    db_url: str, tmp_path: Path
) -> None:
    # The probe (a RequestHeartbeat, a numbered command) keeps a command flowing to every
    # server that hosts replicas, so that one that stopped applying them is found; a server
    # hosting nothing is left alone, as is a hosting one that had a command lately.
    rs = _rs(db_url, tmp_path)
    try:
        ledger = rs.agents.ledger
        req = hb(A, "z1")
        req.replicas.append(_replica(role=obrpc_pb2.LEADER, in_service=True))
        rs.clock.advance(T // 2)  # the take-office heartbeat requests are half a timeout old
        rs.heartbeats.receive_hb(req)
        rs.heartbeats.receive_hb(hb(B, "z2"))
        before_a, before_b = ledger.last_issued(A), ledger.last_issued(B)
        rs.lag_detector.run_once()
        sent = ledger.last_issued(A)
        # Probed (no agent here: the call failed, the command was sent all the same).
        assert sent is not None and before_a is not None and sent > before_a
        assert ledger.last_issued(B) == before_b
        rs.clock.advance(T // 2 - 1)
        rs.heartbeats.receive_hb(req)
        rs.lag_detector.run_once()
        assert ledger.last_issued(A) == sent  # not idle yet: no second probe
    finally:
        rs.shutdown()


class _TickingClock:
    """``clock``'s readings, its wall clock one microsecond later at each read (as a real
    one moves between two reads of one round)."""

    def __init__(self, clock: object) -> None:
        self._clock = clock
        self._reads = 0

    def now_us(self) -> int:
        self._reads += 1
        return self._clock.now_us() + self._reads  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self._clock, name)


def test_the_event_shows_the_timeout_between_sent_at_and_its_own_time(
    db_url: str, tmp_path: Path
) -> None:
    """ "sent at" is the round's own wall reading minus the command's age: a second reading
    of the wall clock put it later than that, and the event (stamped with the first) then
    showed less than agent_lag_timeout since the send (a real-process run: 72 us short)."""
    rs = _rs(db_url, tmp_path)
    try:
        seq = rs.agents.ledger.issue(A, rs.term.epoch, rs.clock.monotonic_us())
        rs.clock.advance(T)
        _beat(rs, applied_command_seq=seq - 1)
        rs.lag_detector.clock = _TickingClock(rs.clock)  # type: ignore[assignment]
        assert rs.lag_detector.run_once() == 1
        flush(rs)
        [ev] = events(rs, "lagging")
        m = re.search(r"sent at (\d+) unapplied for 5s", ev["value4"])
        assert m, ev["value4"]
        assert int(m.group(1)) + T == ev["event_time"]
    finally:
        rs.shutdown()
