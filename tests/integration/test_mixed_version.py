"""A rolling upgrade from the real previous release (0.1.0, built from this repository's
history by tests/support/previous_release.py) to the current code, with real processes.

SQLite: one root service, restarted from 0.1.0 to the current release; PostgreSQL: two,
the standby replaced first and a failover to it. Three zones (two agents in z1; the agents
per zone from ``OB_UPGRADE_ZONES``, e.g. ``3,3,3``), tenant t1 with two log streams. Then
BEGIN UPGRADE, BEGIN ROLLING UPGRADE, the zones one by one (agents restarted in an order
drawn from the printed seed, ``OB_UPGRADE_SEED`` replays it); before finalizing, the root
services back on 0.1.0 (leading current agents) and z1 too, then both forward again (no
stopping notice refused meanwhile); END ROLLING UPGRADE (the cluster version rises from
0.1.0 to the current release) and END UPGRADE. A checker thread counts servers INACTIVE
outside the zone being upgraded, seconds without a leader and statements answered neither
OK nor with an OceanBase error: all must be 0.

After finalization the previous release is refused: a 0.1.0 agent by the version skew rule
(its log and the event name the cluster version), a 0.1.0 root service at start, by its own
migration step, on the revision the finalized schema records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from obcommon import releases
from tests.support.cluster import ProcSet, wait_until
from tests.support.mixed_version import (
    MixedCluster,
    draw_seed,
    refuse_previous_agent,
    refuse_previous_rs,
    rolling_upgrade,
    stopping_notices_refused,
)
from tests.support.previous_release import PreviousRelease, build

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def previous() -> PreviousRelease:
    built = build()
    print(f"previous release {built.release} at {built.commit[:12]}: built in {built.build_s:.1f}s")
    return built


def test_rolling_upgrade_from_the_previous_release_rollback_then_refusal(
    procs: ProcSet, tmp_path: Path, db_url: str, previous: PreviousRelease
) -> None:
    two = db_url.startswith("postgresql")
    c = MixedCluster(procs, tmp_path, db_url, previous, rs_count=2 if two else 1)
    seed = draw_seed()
    # OB_UPGRADE_ZONES="3,3,3" runs the full size (nine agents), for a run by hand.
    zones = tuple(int(n) for n in os.environ.get("OB_UPGRADE_ZONES", "2,1,1").split(","))
    run, _ = rolling_upgrade(c, seed, zones=zones)
    current = releases.current()
    print(f"seed {seed}: {run.counts.line()}")
    print("timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in run.timings.items()))
    assert run.cluster_versions == [f"{previous.release}.0", f"{current}.0"]
    assert run.counts.samples > 10
    assert run.counts.inactive == 0, run.counts.inactive_what[:5]
    assert run.counts.leaderless_s == 0, run.counts.leaderless_what[:5]
    assert run.counts.unclear == 0, run.counts.unclear_what[:5]
    # The current agents stopped cleanly under the previous release's leader without the
    # stopping notice it does not know (gated on the cluster version).
    assert stopping_notices_refused(procs) == []

    addr, agent = refuse_previous_agent(c)
    line = next(ln for ln in agent.log_text().splitlines() if "below the cluster version" in ln)
    assert f"release {previous.release}" in line and f"cluster version {current}" in line, line
    assert c.servers()[addr][1] == "INACTIVE"
    # The event goes through the persistence queue: waited for.
    events = wait_until(
        lambda: c.ok(
            "SELECT value1, value3 FROM __all_rootservice_event_history "
            "WHERE event = 'version_refused'"
        ),
        30,
        message="the version_refused event",
    )
    assert events == [[addr, str(previous.release)]]

    rs = refuse_previous_rs(c)
    assert rs.returncode != 0
    print(f"0.1.0 root service on the finalized database: {rs.log_tail(1)}")
    assert "Can't locate revision identified by 'upgraded-to-" in rs.log_text()
