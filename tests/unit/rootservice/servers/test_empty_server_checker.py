"""The empty-server checker (docs/design/migration.md), built from its collaborators without
RootService: force_stop_hb, the leader rule and the removal transaction."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rootservice.db import server_repo
from rootservice.servers.empty_server_checker import EmptyServerChecker
from rootservice.servers.status import AdminStatus
from tests.support.harness import SEEDED
from tests.support.server_parts import Parts, make_parts, seed

A, B = SEEDED[0][0], SEEDED[1][0]


class FakeAgents:
    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def forget(self, server: str) -> None:
        self.forgotten.append(server)


def make_checker(p: Parts, agents: FakeAgents) -> EmptyServerChecker:
    return EmptyServerChecker(
        p.whitelist,
        p.term,
        p.store,
        p.clock,
        agents,  # type: ignore[arg-type]
        contents=p.tenants,
        removal=p.tenants,
        jobs=p.balancer,
    )


def deleting(s: object) -> None:
    s.admin_status = AdminStatus.DELETING  # type: ignore[attr-defined]


def test_removes_an_empty_deleting_server_with_its_rows(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    agents = FakeAgents()
    checker = make_checker(p, agents)
    assert checker.name == "empty_server_checker" and checker.run_once() == 0
    p.whitelist.with_server(A, deleting)
    p.whitelist.with_server(B, deleting)
    p.tenants.units = {B}
    p.tenants.leaders = False
    # Without a leader nothing is removed, but the empty server's lease stops.
    assert checker.run_once() == 0
    assert p.whitelist.get(A).force_stop_hb and not p.whitelist.get(B).force_stop_hb
    p.tenants.leaders = True
    p.tenants.replicas = {A}
    assert checker.run_once() == 0
    p.tenants.replicas = set()
    assert checker.run_once() == 1
    assert p.whitelist.get(A) is None and agents.forgotten == [A]
    assert p.tenants.calls == [("extra_deletes", A)]
    assert p.balancer.calls == [("finalize_job", A)]
    with engine.connect() as conn:
        keys = {f"{r['svr_ip']}:{r['svr_port']}" for r in server_repo.load_servers(conn)}
    assert A not in keys and B in keys
    assert not checker.finish_delete_server(A)
    p.term.close_service()
    assert checker.run_once() == 0
