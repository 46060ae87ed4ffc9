"""LostReplicaChecker built from fakes on both databases (docs/design/migration.md,
ObLostReplicaChecker): the gate, the cheap pre-check that never starts a plan, and the
deletion of the rows the plan calls lost. No RootService."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.lost_replica_checker import LostReplicaChecker
from rootservice.db import ls_repo
from rootservice.metrics import Metrics
from rootservice.servers.status import HeartbeatStatus
from tests.unit.rootservice.balancer.fakes import (
    FakeGate,
    FakeLs,
    FakePlanner,
    FakeStore,
    FakeWaker,
    FakeWhitelist,
    server,
)

A, B, C = (f"127.0.0.1:300{i}" for i in range(1, 4))


def meta() -> dict[str, Any]:
    return {
        "sql_port": 4001,
        "role": ls_repo.ROLE_FOLLOWER,
        "member_list": "",
        "proposal_id": 1,
        "replica_status": "NORMAL",
        "unit_id": 1,
        "zone": "z1",
        "paxos_replica_number": 3,
        "data_size": 0,
        "required_size": 0,
    }


class World:
    """Replica rows of LS 1001 on A, B and C."""

    def __init__(self, engine: sa.Engine) -> None:
        self.store = FakeStore(engine)
        self.servers = FakeWhitelist(server(A), server(B, "z2"), server(C, "z3"))
        self.ls = FakeLs()
        self.gate = FakeGate()
        self.planner = FakePlanner()
        self.waker = FakeWaker()
        self.metrics = Metrics()
        self.checker = LostReplicaChecker(
            servers=self.servers,
            ls=self.ls,
            planner=self.planner,
            term=self.gate,
            store=self.store,
            wake=self.waker,
            metrics=self.metrics,
        )
        with self.store.txn() as conn:
            ls_repo.upsert_ls_meta(
                conn,
                {(1001, 1001, "127.0.0.1", p): meta() for p in (3001, 3002, 3003)},
                {},
                FakeClock().now_us(),
            )

    def ports(self) -> set[int]:
        with self.store.read() as conn:
            return {k[3] for k in ls_repo.load_ls_meta(conn)}


def lost(port: int) -> dict[str, Any]:
    return {
        "tenant_id": 1001,
        "ls_id": 1001,
        "svr_ip": "127.0.0.1",
        "svr_port": port,
        "reason": "server permanent offline",
    }


def test_nothing_is_planned_while_every_row_sits_on_a_live_server(engine: sa.Engine) -> None:
    w = World(engine)
    assert w.checker.run_once() == 0
    assert w.planner.calls == []


def test_nothing_runs_out_of_service(engine: sa.Engine) -> None:
    w = World(engine)
    del w.servers.servers[C]
    w.gate.in_service = False
    assert w.checker.run_once() == 0
    assert w.planner.calls == []


def test_the_rows_the_plan_calls_lost_are_deleted(engine: sa.Engine) -> None:
    w = World(engine)
    w.servers.servers[C] = server(C, "z3", hb=HeartbeatStatus.PERMANENT_OFFLINE)
    w.planner.lost = [lost(3003)]
    assert w.checker.run_once() == 1
    assert w.planner.calls == ["lost_replicas"]
    assert w.ports() == {3001, 3002}
    assert w.ls.forgotten == 1 and w.waker.woken == ["empty_server_checker"]
    assert w.metrics.get("lost_replicas_removed_total") == 1
    # a server gone from the whitelist is a suspect too; nothing lost: nothing to tell
    del w.servers.servers[B]
    w.planner.lost = []
    assert w.checker.run_once() == 0
    assert w.ls.forgotten == 1 and w.waker.woken == ["empty_server_checker"]
