"""The agent's Prometheus exposition: real components, the fake clock for
lease times, the output of ``generate_latest`` parsed back. The lease test runs the agent's
lease loop against a real in-process RS over gRPC, so both ends' counters are checked."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from obcommon.clock import FakeClock
from observer_agent.agent import Agent
from observer_agent.replicas.faults import FAULT_COPY_SLOW_FILE
from observer_agent.replicas.replica import Build
from rootservice.api.grpc_server import create_server
from tests.support.harness import SEEDED, ZA, A, make_rs
from tests.support.timescale import scaled
from tests.unit.observer_agent.helpers import (
    LEASE_US,
    RS1,
    make_agent,
    ok_response,
    refusal,
    run,
    wait_until,
)
from tests.unit.observer_agent.replicas.helpers import (
    SIZE,
    copy_nodes,
    copy_spec,
    copy_upsert,
    fault,
    lead,
    spec,
    upsert,
)

Sample = tuple[str, frozenset[tuple[str, str]]]


def scrape(registry: CollectorRegistry) -> dict[Sample, float]:
    """Every sample of a ``/metrics`` body: (name, labels) -> value."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def v(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_lease_margin_and_renewals_by_reason(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    m = scrape(agent.metrics.registry)
    assert ("ob_agent_lease_margin_seconds", frozenset()) not in m  # no lease yet
    assert v(m, "ob_agent_lease_renewals_accepted_total") == 0
    assert v(m, "ob_agent_registered") == 0
    assert agent.handle_response(ok_response(clock), RS1)
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_lease_margin_seconds") == LEASE_US / 1e6
    assert v(m, "ob_agent_lease_renewals_accepted_total") == 1
    assert v(m, "ob_agent_registered") == 1
    clock.advance(LEASE_US + 2_000_000)  # the lease lapses: the margin goes negative
    assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
    assert not agent.handle_response(ok_response(clock, epoch=0), RS1)  # a deposed RS
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_lease_margin_seconds") == -2.0
    assert v(m, "ob_agent_lease_renewals_accepted_total") == 1
    assert v(m, "ob_agent_lease_renewals_refused_total", reason="OB_SERVER_NOT_IN_WHITE_LIST") == 1
    assert v(m, "ob_agent_lease_renewals_refused_total", reason="stale_epoch") == 1
    assert v(m, "ob_agent_registered") == 0


def test_lease_loop_against_a_real_rs_counts_on_both_sides(tmp_path: Path) -> None:
    """SQLite only: the point is the two processes' counters, not the database."""
    rs = make_rs(f"sqlite:///{tmp_path}/rs.db", tmp_path)

    async def scenario() -> tuple[Agent, Agent]:
        server, port = await create_server(rs, "127.0.0.1:0")
        await server.start()
        try:
            good = make_agent(
                tmp_path / "good",
                rs.clock,  # type: ignore[arg-type]
                rs_list=f"127.0.0.1:{port}",
                rpc_addr=A,
                zone=ZA,
                heartbeat_interval="20ms",
            )
            stranger = make_agent(
                tmp_path / "stranger",
                rs.clock,  # type: ignore[arg-type]
                rs_list=f"127.0.0.1:{port}",
                rpc_addr="127.0.0.1:3999",
                zone=ZA,
                heartbeat_interval="20ms",
            )
            stop = asyncio.Event()
            tasks = [asyncio.create_task(a.run(stop)) for a in (good, stranger)]
            await wait_until(
                lambda: good.accepted_count >= 3 and stranger.refused_count >= 2, "renewals"
            )
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), scaled(10))
            return good, stranger
        finally:
            await server.stop(None)

    good, stranger = run(scenario(), 30)
    g = scrape(good.metrics.registry)
    s = scrape(stranger.metrics.registry)
    r = scrape(rs.metrics.registry)
    assert v(g, "ob_agent_lease_renewals_accepted_total") == good.accepted_count >= 3
    assert v(g, "ob_agent_lease_renewal_seconds_count") >= good.accepted_count
    assert ("ob_agent_lease_renewals_refused_total", frozenset()) not in g
    refused = v(s, "ob_agent_lease_renewals_refused_total", reason="OB_SERVER_NOT_IN_WHITE_LIST")
    assert refused == stranger.refused_count >= 2
    assert v(s, "ob_agent_lease_renewals_accepted_total") == 0
    assert v(r, "ob_rs_heartbeats_refused_total", reason="OB_SERVER_NOT_IN_WHITE_LIST") >= refused
    assert v(r, "ob_rs_heartbeats_received_total") >= good.accepted_count + refused
    assert v(r, "ob_rs_servers_by_heartbeat", heartbeat_status="alive") == 1
    assert v(r, "ob_rs_servers", status="INACTIVE") == len(SEEDED) - 1
    # The agents' resources and disk were read before the first attempt.
    assert v(g, "ob_agent_cpu_cores", kind="total") > 0
    assert v(g, "ob_agent_disk_healthy") == 1
    assert v(g, "ob_agent_disk_probe_seconds_count") >= 1


def test_disk_probe_failure_and_recovery(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    assert agent.probe_disk_now()
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_disk_healthy") == 1
    assert v(m, "ob_agent_disk_probe_seconds_count") == 1
    (agent.data_dir / "FAULT_DATA_DISK_ERROR").touch()
    assert not agent.probe_disk_now()
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_disk_healthy") == 0
    assert v(m, "ob_agent_disk_probe_seconds_count") == 2


def test_replicas_by_role_log_lag_and_copied_bytes(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, rpc_addr="127.0.0.1:3001")
    me = agent.server
    m = scrape(agent.metrics.registry)
    assert {k: m[("ob_agent_replicas", frozenset({("role", k)}))] for k in ("leader",)} == {
        "leader": 0
    }
    assert v(m, "ob_agent_copied_bytes_total") == 0

    async def create() -> None:
        resp = await agent.replicas.apply(upsert(spec([me, "127.0.0.1:3002"], me, 1)), 0)
        assert resp.error.code == 0, resp.error
        await agent.replicas.stop()

    run(create(), 20)
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_replicas", role="leader") == 1
    assert v(m, "ob_agent_replicas", role="follower") == 0
    assert v(m, "ob_agent_log_lag_entries", tenant_id="1001", ls_id="1") == 0
    # A follower that has heard of the leader's end: its lag is the difference.
    rep = agent.replicas.get(1001, 1)
    assert rep is not None
    rep.meta = dataclasses.replace(rep.meta, leader="127.0.0.1:3002")
    rep.leader_end_index = rep.log.end_index + 7
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_replicas", role="follower") == 1
    assert v(m, "ob_agent_log_lag_entries", tenant_id="1001", ls_id="1") == 7
    # A replica being built by copy is a learner.
    rep.build = Build(source="127.0.0.1:3002")
    m = scrape(agent.metrics.registry)
    assert v(m, "ob_agent_replicas", role="learner") == 1
    assert v(m, "ob_agent_copies_running") == 0


def test_a_real_copy_moves_the_copied_bytes_counter(tmp_path: Path) -> None:
    """Two in-process agents over gRPC: c copies a's replica (SIZE bytes, slowed so that a
    scrape sees it running); the counter ends at SIZE and stays there."""

    async def scenario() -> tuple[list[float], dict[Sample, float], dict[Sample, float]]:
        async with copy_nodes(tmp_path, 2) as (a, c):
            members = await lead(a)
            fault(c, FAULT_COPY_SLOW_FILE, "20\n")
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert resp.error.code == 0, resp.error
            seen: list[float] = []
            registry = c.agent.metrics.registry
            await wait_until(
                lambda: scrape(registry)[("ob_agent_copies_running", frozenset())] == 1, "copy"
            )
            for _ in range(500):
                m = scrape(registry)
                seen.append(m[("ob_agent_copied_bytes_total", frozenset())])
                if m[("ob_agent_copies_running", frozenset())] == 0:
                    break
                await asyncio.sleep(0.01)
            done = scrape(registry)
            await asyncio.sleep(0.1)
            return seen, done, scrape(registry)

    seen, done, later = run(scenario(), 30)
    assert seen == sorted(seen)  # a counter: it never goes down
    assert v(done, "ob_agent_copied_bytes_total") == SIZE
    assert v(later, "ob_agent_copied_bytes_total") == SIZE
    assert v(done, "ob_agent_copies_running") == 0
