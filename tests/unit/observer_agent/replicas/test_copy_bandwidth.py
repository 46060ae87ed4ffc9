"""migration_max_bytes_per_second end to end: ALTER SYSTEM SET on an
in-process RS (both databases), the lease response carrying it to a real in-process
destination agent, a copy already running there throttled and then released by a run-time
change, the agent's metrics; and the measured bound: a copy of N bytes at L bytes/s takes at
least (N - burst) / L seconds."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import generate_latest

from obcommon.errors import error_from_proto
from obcommon.proto import obrpc_pb2
from observer_agent.replicas.bandwidth import BURST_S
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from tests.support.harness import ROOT, make_rs, seed_cluster
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import (
    SIZE,
    CopyNode,
    copy_nodes,
    copy_spec,
    copy_upsert,
    lead,
    start_copy_node,
)

KIB = 1024


def sql(rs: RootService, text: str) -> None:
    err = error_from_proto(execute_sql(rs, text, ROOT).error)
    assert err is None, err.to_sql_text()


def heartbeat(rs: RootService, node: CopyNode) -> obrpc_pb2.LeaseResponse:
    """One lease round of ``node`` with ``rs``, as the lease stream carries it."""
    resp = rs.heartbeats.receive_hb(node.agent.build_lease_request())
    assert node.agent.lease.handle_response(resp, rs.rpc_addr)
    return resp


def metric(node: CopyNode, name: str) -> float:
    for line in generate_latest(node.agent.metrics.registry).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_alter_system_set_reaches_a_running_copy(db_url: str, tmp_path: Path) -> None:
    """A copy throttled to 16K/s (about 16 s for its 256K) finishes within a few seconds once
    the limit is set back to 0: the change reaches the copy already running, through the next
    lease response. The agent shows the limit as a gauge and the time copies waited."""
    rs = make_rs(db_url, tmp_path / "rs", seed=False)

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1) as (a,):
            # The destination shares the RS's fake clock: its lease times are the RS's.
            c = await start_copy_node(tmp_path / "c", clock=rs.clock)
            try:
                seed_cluster(rs, [(c.addr, "z1")])
                rs.identity.bootstrapped = True
                rs.office.do_restart()
                assert heartbeat(rs, c).migration_max_bytes_per_second == 0
                assert metric(c, "ob_agent_copy_rate_limit_bytes_per_second") == 0

                sql(rs, "ALTER SYSTEM SET migration_max_bytes_per_second = '16K'")
                assert heartbeat(rs, c).migration_max_bytes_per_second == 16 * KIB
                assert c.agent.replicas.copy_bandwidth.rate == 16 * KIB
                assert metric(c, "ob_agent_copy_rate_limit_bytes_per_second") == 16 * KIB

                members = await lead(a)
                req = copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr))
                # The RS's own token: the agent obeyed it in its lease.
                req.rs_incarnation = rs.term.incarnation
                resp = await c.apply(req)
                assert resp.error.code == 0, resp.error
                await wait_until(
                    lambda: (c.info() or obrpc_pb2.ReplicaInfo()).bytes_copied >= 2 * 16 * KIB,
                    "the throttled copy to make progress",
                )
                assert not c.in_service()

                sql(rs, "ALTER SYSTEM SET migration_max_bytes_per_second = 0")
                assert heartbeat(rs, c).migration_max_bytes_per_second == 0
                await wait_until(c.in_service, "the copy released by the change", 8)
                assert metric(c, "ob_agent_copy_rate_limit_bytes_per_second") == 0
                assert metric(c, "ob_agent_copy_throttled_seconds_total") > 0
                assert metric(c, "ob_agent_copied_bytes_total") == SIZE
            finally:
                await c.stop()

    try:
        run(scenario(), 60)
    finally:
        rs.shutdown()


def test_a_copy_takes_at_least_its_size_over_the_limit(tmp_path: Path) -> None:
    """1 MiB at 512 KiB/s: at least (1 MiB - burst) / 512 KiB = 1.9 s (a lower bound the
    bucket guarantees, not a speed); the same copy unlimited, for comparison (printed)."""
    n, limit = 1 << 20, 512 * KIB

    async def copy_seconds(dest: CopyNode, src: CopyNode, members: list[str], ls: int) -> float:
        start = time.monotonic()
        resp = await dest.apply(
            copy_upsert(copy_spec(members, src.addr, 1, copy_from=src.addr, ls=ls))
        )
        assert resp.error.code == 0, resp.error
        await wait_until(lambda: dest.in_service(ls), f"the copy of LS {ls}", 20)
        return time.monotonic() - start

    async def scenario() -> tuple[float, float]:
        async with copy_nodes(tmp_path, 2, replica_size="1M") as (a, c):
            m1 = await lead(a, ls=1)
            m2 = await lead(a, ls=2)
            c.agent.replicas.copy_bandwidth.set_rate(limit)
            limited = await copy_seconds(c, a, m1, 1)
            c.agent.replicas.copy_bandwidth.set_rate(0)
            unlimited = await copy_seconds(c, a, m2, 2)
            return limited, unlimited

    limited, unlimited = run(scenario(), 60)
    assert limited >= (n - limit * BURST_S) / limit
    print(
        f"\n1 MiB copy: {limited:.2f} s at limit 512K/s ({n / limited / KIB:.0f} KiB/s), "
        f"{unlimited:.2f} s unlimited ({n / unlimited / KIB:.0f} KiB/s)"
    )
