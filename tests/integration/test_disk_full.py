"""With a REAL full disk: an agent whose data directory is a small tmpfs that
fills up stays in service (ACTIVE, no DATA_DISK_ERROR, its lease kept), reports the disk as
it is, refuses a copy to it with OB_SERVER_OUTOF_DISK_SPACE (4184) visible to the RS, leaves
no partial files, and takes the RS's retry once space is freed. Needs root (``mount``);
skipped with the reason otherwise. SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from obcommon.proto import obrpc_pb2
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report, tc
from tests.support.agent_probe import heartbeat_as_rs
from tests.support.cluster import wait_until

__all__ = ["tc"]

pytestmark = pytest.mark.integration

KEY = (1002, 1001)
TMPFS_SIZE = 8 * 1024 * 1024


@contextlib.contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    """``path`` as a tmpfs of ``size`` bytes for the block; skips the test when mounting is
    not permitted here (not root, or no mount in the container)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        # Lazy: the agent may still hold a file open if the test failed before stopping it.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10, check=False)


def fill(directory: Path) -> int:
    """Append to ``directory/filler`` until the file system says ENOSPC; bytes written."""
    written = 0
    block = b"\0" * 65536
    with open(directory / "filler", "ab", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            while True:
                try:
                    written += f.write(block[:size])
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return written


def heartbeat_of(agent: str) -> obrpc_pb2.LeaseRequest:
    """What the agent reports in a heartbeat (its disk status and resources), asked the way
    the RS asks (ObserverService.RequestHeartbeat, RS certificate)."""
    return heartbeat_as_rs(agent)


# One database: the agent refuses the copies (tests/unit/observer_agent/test_disk_full.py) and
# the RS relays the refusal as the copy's error, nothing of it database-specific (so one
# database is enough: the suite's time).
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_full_data_disk_keeps_the_server_and_refuses_copies_until_freed(
    tc: TenantCluster,
) -> None:
    c = tc
    with tmpfs(c.tmp / "full", TMPFS_SIZE) as disk:
        c.start_rs(**RS_FLAGS)
        a1 = c.start_agent("z1")
        # The log disk is declared (30 % of an 8 MiB disk would not hold the unit's log disk).
        a2 = c.start_agent("z2", data="full", log_disk_size="8G", resource_refresh_interval="500ms")
        a3 = c.start_agent("z3")
        c.ok(
            f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{a1}', "
            f"ZONE 'z2' SERVER '{a2}', ZONE 'z3' SERVER '{a3}'"
        )
        wait_until(
            lambda: all(c.statuses().get(a) == "ACTIVE" for a in (a1, a2, a3)),
            20,
            message="bootstrap servers ACTIVE",
        )
        c.make_tenant(ls_count=1)
        wait_until(lambda: len(c.locations()) == 3, 20, message="3 replicas in the meta table")
        leader = wait_until(lambda: replica_report(a1).get(KEY), 20, message="replica on a1")

        # The disk fills up, and the replica on it vanishes (its space taken again at once).
        fill(disk)
        shutil.rmtree(disk / "replicas" / "1002_1001")
        fill(disk)

        # The copy the RS sends to rebuild it is refused, with the reason, and retried.
        def refused() -> str:
            r = replica_report(a2).get(KEY)
            return r.build_error if r is not None else ""

        reason = wait_until(refused, 40, message="the copy to the full disk refused")
        assert "OB_SERVER_OUTOF_DISK_SPACE" in reason, reason

        def rs_saw_it() -> bool:
            rows = c.ok(
                "SELECT value5 FROM __all_rootservice_event_history "
                "WHERE module = 'disaster_recovery' AND event = 'rebuild_replica'"
            )
            return any("OB_SERVER_OUTOF_DISK_SPACE" in r[0] for r in rows)

        # The RS retries (from another member) and its event names the failed copy's reason.
        wait_until(rs_saw_it, 20, message="the RS's retry event with the reason")
        # Disk full is not disk error: still in service, lease kept, disk reported as it is.
        hb = wait_until(
            lambda: (
                (h := heartbeat_of(a2)).resource_info.data_disk_in_use >= TMPFS_SIZE - 64 * 1024
                and h
            ),
            10,
            message="the full disk reported",
        )
        assert hb.server_status == 0
        assert hb.resource_info.data_disk_total == TMPFS_SIZE
        assert c.statuses()[a2] == "ACTIVE" and c.stop_time(a2) == 0
        assert "DATA_DISK_ERROR" not in c.agents[a2].log_text()
        # Nothing half-written stays behind.
        rdir = disk / "replicas" / "1002_1001"
        assert not rdir.exists() or not any(p.name.startswith(".") for p in rdir.iterdir())
        assert c.agents[a2].alive

        # Space freed: the RS's next attempt builds it.
        (disk / "filler").unlink()

        def rebuilt() -> bool:
            r = replica_report(a2).get(KEY)
            return r is not None and r.in_service and not r.build_error and not r.copy_from

        wait_until(rebuilt, 60, message="the replica rebuilt after space was freed")
        assert replica_report(a2)[KEY].data_checksum == leader.data_checksum
        assert c.statuses()[a2] == "ACTIVE" and c.stop_time(a2) == 0
        c.agents[a2].stop()
