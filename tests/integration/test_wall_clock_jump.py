"""With real processes: the RS's wall clock steps +1 h and then back by 1 h
(Debian's libfaketime preloaded into the RS only, its offset changed through a file while
the RS runs; the monotonic clock is left real) under three real agents.

Before the fix, the +1 h step expired every live server and declared it permanently offline
in one lease-checker tick, and the step back stopped every APScheduler job (the lease
checker, the election's renewals) for an hour. Here no live server is ever shown INACTIVE,
none turns permanently offline, each step is detected, counted and recorded once, and an
agent killed after each step still expires after ``lease_time``.

SQLite only: the steps act on the RS process alone, and with SQLite the database's clock
(``julianday('now')`` in the RS process) steps too, the harder case for the RS lease.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cluster import Cluster
from tests.support.cluster import Proc, ProcSet, rs_cmd, wait_until

pytestmark = pytest.mark.integration

# The thread-safe build: the RS reads the clock from many threads, and the plain
# libfaketime.so.1 reads the offset file without a lock.
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SHIM = Path(__file__).resolve().parents[1] / "support" / "faketime"
HOUR_US = 3600 * 1_000_000


class FaketimeCluster(Cluster):
    """A :class:`Cluster` whose RS runs under libfaketime with the offset in ``rc``."""

    def __init__(self, procs: ProcSet, tmp: Path, db_url: str) -> None:
        super().__init__(procs, tmp, db_url)
        self.rc = tmp / "faketime.rc"
        self.set_offset("+0")

    def set_offset(self, offset: str) -> None:
        """libfaketime's relative offset ("+0", "+1h", "-1h"), read at every clock call."""
        tmp = self.rc.with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        os.replace(tmp, self.rc)

    def start_rs(self, **flags: Any) -> Proc:
        opts: dict[str, Any] = {
            "lease_time": "4s",
            "heartbeat_interval": "500ms",
            "allow_short_timings": True,
            "rpc_timeout": "1s",
            **flags,
        }
        env = {
            "LD_PRELOAD": str(FAKETIME_LIB),
            "FAKETIME_TIMESTAMP_FILE": str(self.rc),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": os.pathsep.join(
                [str(SHIM), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        cmd = rs_cmd(self.db_url, self.rs_addr, self.tmp / "rs", **opts)
        self.rs = self.procs.start(cmd, "rs", env=env)
        self.rs.wait_healthy(self.rs_addr, timeout_s=30)
        return self.rs


class Watch:
    """Polls ``__all_server`` in a thread and remembers every (server, status) it saw."""

    def __init__(self, c: Cluster, servers: list[str]) -> None:
        self.c = c
        self.servers = set(servers)
        self.seen: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                statuses = self.c.statuses()
            except Exception:  # a statement during a step may fail: only what is shown counts
                continue
            for s, st in statuses.items():
                if s in self.servers:
                    self.seen.add((s, st))

    def forget(self, server: str) -> None:
        self.servers.discard(server)

    def stop(self) -> set[tuple[str, str]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


@pytest.fixture
def fc(procs: ProcSet, tmp_path: Path, db_url: str) -> FaketimeCluster:
    if not FAKETIME_LIB.exists():
        pytest.skip(f"{FAKETIME_LIB} missing: install Debian's faketime (make setup as root)")
    return FaketimeCluster(procs, tmp_path, db_url)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_wall_clock_steps_on_the_rs_expire_no_live_server(fc: FaketimeCluster) -> None:
    fc.start_rs()
    a1, a2, a3 = fc.bootstrap()
    assert fc.metrics().get("wall_clock_jumps_total", 0) == 0
    watch = Watch(fc, [a1, a2, a3])
    try:
        # +1 h: the step is seen once; a3 killed after it still expires, nobody else does.
        fc.set_offset("+1h")
        wait_until(lambda: fc.metrics().get("wall_clock_jumps_total") == 1, 20, message="+1 h")
        watch.forget(a3)
        fc.agents[a3].kill()
        wait_until(lambda: fc.statuses()[a3] == "INACTIVE", 20, message="a3 expired")
        # Back by 1 h: every timer is due again at once (the lease checker among them), so
        # a2 killed after the step expires too, within seconds rather than an hour.
        fc.set_offset("+0")
        wait_until(lambda: fc.metrics().get("wall_clock_jumps_total") == 2, 20, message="-1 h")
        watch.forget(a2)
        fc.agents[a2].kill()
        wait_until(lambda: fc.statuses()[a2] == "INACTIVE", 20, message="a2 expired")
        m = fc.metrics()
    finally:
        seen = watch.stop()
        if fc.rs is not None:  # kept for the report of a failed run (tmp dirs rotate)
            print(fc.rs.log_tail(60))
    assert {st for s, st in seen if s == a1} == {"ACTIVE"}, seen
    assert {st for s, st in seen if s == a2} == {"ACTIVE"}, seen
    assert fc.statuses() == {a1: "ACTIVE", a2: "INACTIVE", a3: "INACTIVE"}
    assert m["permanent_offline"] == 0 and m["alive"] == 1
    rows = fc.ok(
        "SELECT value1 FROM __all_rootservice_event_history "
        "WHERE module = 'root_service' AND event = 'wall_clock_jump' ORDER BY id"
    )
    forward, back = (int(r[0]) for r in rows)
    assert abs(forward - HOUR_US) < 1_000_000 and abs(back + HOUR_US) < 1_000_000, rows
    expired = fc.ok(
        "SELECT value1 FROM __all_rootservice_event_history WHERE event = 'lease_expire'"
    )
    assert sorted(r[0] for r in expired) == sorted([a2, a3])
    assert fc.rs is not None and "the wall clock jumped forward by" in fc.rs.log_text()
    assert "the wall clock jumped backward by" in fc.rs.log_text()
