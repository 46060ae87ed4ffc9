"""``make demo-upgrade``: a rolling upgrade from the previous release to this one, zone by zone,
on the embedded default database (SQLite), with real processes.

The previous release (0.1.0) is built from this repository's history into a virtualenv of its
own (tests/support/previous_release.py, a few seconds, once per commit). One root service and
three agents in three zones start on it with tenant t1; then the sequence of
tests/support/mixed_version.py: the root service replaced by this release, rolled back and
forward again; BEGIN UPGRADE, BEGIN ROLLING UPGRADE; each zone stopped, its agent replaced,
started; z1 rolled back to 0.1.0 and forward again; END ROLLING UPGRADE (the cluster version
rises) and END UPGRADE. Each stage is printed with the cluster version, then what the
checker counted (servers INACTIVE outside the zone being upgraded, seconds without a leader,
statements answered neither OK nor with an OceanBase error), then how the previous release is
refused once finalized: an agent by the version skew rule, a root service at start.
``OB_UPGRADE_SEED`` replays a run's restart order. Under 3 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.support.cluster import ProcSet
from tests.support.mixed_version import (
    MixedCluster,
    draw_seed,
    refuse_previous_agent,
    refuse_previous_rs,
    rolling_upgrade,
)
from tests.support.previous_release import build


def say(text: str) -> None:
    """One line of the demo's output, at once."""
    print(text, flush=True)


def main() -> int:
    """Run the demo; 0 when every step completed and the checker counted nothing."""
    t0 = time.monotonic()
    prev = build()
    built = f"built in {prev.build_s:.1f}s" if prev.build_s else "already built"
    say(f"previous release {prev.release} (commit {prev.commit[:12]}) in {prev.venv} ({built})")
    tmp = Path(tempfile.mkdtemp(prefix="ob-demo-upgrade-"))
    procs = ProcSet(tmp / "logs")
    c = MixedCluster(procs, tmp, f"sqlite:///{tmp}/rs.db", prev, say=say)
    failed = True
    try:
        run, _ = rolling_upgrade(c, draw_seed(), zones=(1, 1, 1), ls_count=1)
        say(f"cluster version before and after: {' -> '.join(run.cluster_versions)}")
        c.stage(f"a {prev.release} agent after finalization")
        _, agent = refuse_previous_agent(c)
        line = next(ln for ln in agent.log_text().splitlines() if "below the cluster" in ln)
        say(f"   refused: {line.split(': ', 1)[-1][:300]}")
        c.stage(f"a {prev.release} root service on the finalized database")
        rs = refuse_previous_rs(c)
        say(f"   exited with {rs.returncode}: {rs.log_tail(1)[:300]}")
        counts = run.counts
        failed = bool(counts.inactive or counts.leaderless_s or counts.unclear)
        say(
            f"done in {time.monotonic() - t0:.0f}s, seed {run.seed}: {counts.line()}"
            + (" - NOT CLEAN" if failed else "")
        )
        for what in (counts.inactive_what + counts.leaderless_what + counts.unclear_what)[:10]:
            say(f"   {what}")
    except Exception as e:  # the demo explains and keeps the logs
        say(f"FAILED: {e}\n{procs.log_tails(15)}")
    finally:
        procs.stop_all()
        if failed:
            say(f"logs kept in {tmp / 'logs'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
