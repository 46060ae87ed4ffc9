"""The lag detector with real processes: ``rootservice`` and three
``observer-agent`` processes hosting one log stream (leader in z1), ``agent_lag_timeout`` 2 s;
the fault flags on both databases, the pauses on SQLite (the database plays no part in what
they show; ``make soak-lag`` is their 10-minute run).

Each fault flag is set while the agents heartbeat on; the RS's events are the measure (their
times are the RS's clock, compared with the wall clock of the same host when the flag was
set). Only order and cause are asserted, never how soon:

- ``FAULT_APPLY_FREEZE`` on the leader's agent: the first command the RS sends it afterwards
  (sent after the flag) is found unapplied, no sooner than ``agent_lag_timeout`` after it was
  sent; the ``lagging`` event carries the agent's stacks, which show the command held in
  ``hold_apply``; the leader is then moved off because it cannot lead (a ``switch_leader``
  from it, after the ``lagging`` event); the server is LAGGING in DBA_OB_SERVERS and
  ``/metrics``; thawed, the episode ends.
- ``FAULT_FSYNC_SLOW_MS`` (3 s) on another agent: LAGGING for its disk after the flag, with
  a probe over the disk limit at this timeout (2 s) named in the event.
- ``FAULT_LOG_FREEZE`` on the third: its follower trails by more than
  ``ls_log_sync_threshold`` (1 s) and is reported ``follower_lagging``, no sooner than twice
  the timeout after the flag.

A separate test keeps ``FAULT_LOG_FREEZE`` on a follower until the ``lag_rebuilder`` rebuilds
it (twice the timeout after ``follower_lagging``): the replica is copied afresh from the
leader and, the flag removed, is in service and in log sync again.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from obcommon.durations import parse_duration
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support.cluster import ProcSet, wait_until

pytestmark = pytest.mark.integration

S = 1_000_000
T = 2 * S  # agent_lag_timeout


def _now_us() -> int:
    return time.time_ns() // 1000


def _events(c: TenantCluster, event: str) -> list[list[object]]:
    return c.ok(
        "SELECT event_time, value1, value2, value3, value4, extra_info "
        f"FROM __all_rootservice_event_history WHERE event = '{event}' ORDER BY id"
    )


def _lagging(c: TenantCluster, server: str) -> list[list[object]]:
    return [e for e in _events(c, "lagging") if e[1] == server]


def test_each_fault_flag_is_detected_and_the_leader_moves_off(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    # Heartbeats every 200 ms: a disk latency reaches the RS within one.
    c.extra_flags = {"heartbeat_interval": "200ms"}
    c.start_rs(**RS_FLAGS, agent_lag_timeout="2s")
    a1, a2, a3 = c.bootstrap(3)
    c.make_tenant(ls_count=1, primary="z1")
    wait_until(lambda: c.leaders_on(a1) == 1, 30, message="the leader in z1")

    # -- freeze apply on the leader's agent
    t0 = _now_us()
    (c.data_dir(a1) / "FAULT_APPLY_FREEZE").touch()
    wait_until(lambda: _lagging(c, a1), 20, message="a1 LAGGING")
    [[at, _, _, reason, detail, stacks]] = _lagging(c, a1)
    assert reason == "command"
    m = re.search(r"sent at (\d+)", str(detail))
    assert m, detail
    sent = int(m.group(1))
    assert t0 <= sent  # a command sent after the flag ...
    assert sent + T <= int(str(at))  # ... judged once it was unapplied for the timeout
    assert "hold_apply" in str(stacks), stacks
    assert c.metrics()["servers_lagging"] == 1
    ip, port = a1.rsplit(":", 1)
    assert c.ok(f"SELECT LAGGING FROM DBA_OB_SERVERS WHERE SVR_PORT = {port}") == [["YES"]]
    wait_until(
        lambda: [e for e in _events(c, "switch_leader") if e[3] == a1],
        20,
        message="the leader moved off a1",
    )
    [switch] = [e for e in _events(c, "switch_leader") if e[3] == a1]
    # Moved off because it is LAGGING: after the event, for the leader that cannot lead.
    assert int(str(switch[0])) >= int(str(at))
    reasons = c.ok(
        "SELECT value6 FROM __all_rootservice_event_history "
        f"WHERE event = 'switch_leader' AND value3 = '{a1}'"
    )
    assert reasons == [[f"leader {a1} cannot lead"]], reasons
    (c.data_dir(a1) / "FAULT_APPLY_FREEZE").unlink()
    wait_until(lambda: [e for e in _events(c, "lagging_end") if e[1] == a1], 20, message="a1 clear")

    # -- slow fsync: the disk probe takes 3 s, above the limit (2 s at this timeout)
    t1 = _now_us()
    (c.data_dir(a2) / "FAULT_FSYNC_SLOW_MS").write_text("3000")
    wait_until(lambda: _lagging(c, a2), 20, message="a2 LAGGING")
    [[at2, _, _, reason2, detail2, _]] = _lagging(c, a2)
    assert reason2 == "disk"
    assert int(str(at2)) >= t1
    # The cause: a probe that took longer than the limit (the timeout), as the event says.
    m2 = re.fullmatch(r"disk probe (\S+)", str(detail2))
    assert m2 and parse_duration(m2.group(1)) > T, detail2
    (c.data_dir(a2) / "FAULT_FSYNC_SLOW_MS").unlink()

    # -- freeze log: a3's follower stops; it trails by > 1 s, then for 2 x the timeout
    t2 = _now_us()
    (c.data_dir(a3) / "FAULT_LOG_FREEZE").touch()
    wait_until(
        lambda: [e for e in _events(c, "follower_lagging") if e[3] == a3],
        30,
        message="a3's follower lagging",
    )
    [follower] = [e for e in _events(c, "follower_lagging") if e[3] == a3]
    # Trailing, then trailing for twice the timeout: not before that after the flag.
    assert int(str(follower[0])) >= t2 + 2 * T
    (c.data_dir(a3) / "FAULT_LOG_FREEZE").unlink()


def test_a_follower_with_a_frozen_log_is_rebuilt_and_catches_up(
    procs: ProcSet, tmp_path: Path
) -> None:
    """A lagging replica rebuilt: ``agent_lag_timeout`` 2 s, so the
    follower is LAGGING 4 s after it trails by over 1 s and rebuilt 4 s after that."""
    c = TenantCluster(procs, tmp_path, f"sqlite:///{tmp_path}/rs.db")
    c.start_rs(**RS_FLAGS, agent_lag_timeout="2s")
    a1, a2, a3 = c.bootstrap(3)
    c.make_tenant(ls_count=1, primary="z1")
    wait_until(lambda: c.leaders_on(a1) == 1, 30, message="the leader in z1")
    key = (1002, 1001)
    data = c.data_dir(a3) / "replicas" / f"{key[0]}_{key[1]}" / "data"
    t0 = time.time_ns()
    assert data.stat().st_mtime_ns < t0

    (c.data_dir(a3) / "FAULT_LOG_FREEZE").touch()

    def rebuilds() -> list[list[object]]:
        rows = c.ok(
            "SELECT event_time, value3, value4, value5 FROM __all_rootservice_event_history "
            "WHERE event = 'rebuild_replica' ORDER BY id"
        )
        return [r for r in rows if r[1] == a3]

    wait_until(rebuilds, 30, message="a3's replica rebuilt")
    (c.data_dir(a3) / "FAULT_LOG_FREEZE").unlink()
    [[at, _, source, reason]] = rebuilds()
    assert source == a1 and str(reason).startswith("follower lagging"), reason
    [lagging] = [e for e in _events(c, "follower_lagging") if e[3] == a3]
    assert int(str(at)) >= int(str(lagging[0])) + 2 * T  # the further wait, not at once

    def caught_up() -> bool:
        lead, mine = replica_report(a1)[key], replica_report(a3).get(key)
        return (
            mine is not None
            and mine.in_service
            and not mine.copy_from
            and lead.log_end_ts - mine.log_end_ts <= S
        )

    wait_until(caught_up, 20, message="a3's rebuilt replica in service and in log sync")
    # Copied afresh: the data file was written after the fault, by the copy.
    assert data.stat().st_mtime_ns > t0
    assert len(rebuilds()) == 1


#: Seconds of the pause pattern; ``make soak-lag`` runs it for 10 minutes.
SOAK_S = float(os.environ.get("OB_LAG_SOAK_S", "20"))
PAUSE_S = 2.0
CYCLE_S = 20.0


def test_agents_paused_2s_every_20s_are_never_lagging(procs: ProcSet, tmp_path: Path) -> None:
    """The false-positive check ("0 false LAGGING over a 10-minute run with 2 s
    pauses of agents every 20 s"): each of the three agents is SIGSTOPped for 2 s once per
    20 s cycle, staggered, while the RS commands them (probes, leader moves) and their
    followers replicate; ``agent_lag_timeout`` 5 s, lease 4 s (a pause is no outage). No
    ``lagging``, ``copy_stalled`` or ``follower_lagging`` event may appear. The pauses are the
    load pattern, so they are timed by sleeping (nothing waits on them)."""
    c = TenantCluster(procs, tmp_path, f"sqlite:///{tmp_path}/rs.db")
    c.start_rs(**RS_FLAGS, agent_lag_timeout="5s", lease_time="4s")
    agents = c.bootstrap(3)
    c.make_tenant(ls_count=2, primary="z1")
    wait_until(lambda: c.leaders_on(agents[0]) == 2, 30, message="the leaders in z1")
    start = time.monotonic()
    pauses = 0
    while time.monotonic() - start < SOAK_S:
        cycle = time.monotonic()
        for i, addr in enumerate(agents):
            time.sleep(max(0.0, cycle + i * CYCLE_S / 3 - time.monotonic()))
            c.agents[addr].pause()
            try:
                time.sleep(PAUSE_S)
            finally:
                c.agents[addr].resume()
            pauses += 1
        time.sleep(max(0.0, cycle + CYCLE_S - time.monotonic()))
    false = [e for ev in ("lagging", "copy_stalled", "follower_lagging") for e in _events(c, ev)]
    print(f"lag soak: {pauses} pauses of {PAUSE_S:g}s in {SOAK_S:g}s, {len(false)} LAGGING")
    assert not false, false
    assert c.metrics()["servers_lagging"] == 0
