"""Bootstrap built from its collaborators, without a RootService (docs/design/ha.md#taking-office;
rootservice.bootstrap): the rows it writes, the wait for the servers, the hand-over to the
take-office path, and that a failed attempt keeps nothing but the cluster id."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.bootstrap import Bootstrap, BootstrapItem
from rootservice.db import param_repo, server_repo, zone_repo
from rootservice.ha.term import RsState
from rootservice.servers.agent_client import EmptyCheck
from rootservice.servers.status import HeartbeatStatus
from tests.support.server_parts import Parts, make_parts

S = 1_000_000
ITEMS = [
    BootstrapItem("hz", "z1", "127.0.0.1:3001"),
    BootstrapItem(None, "z2", "127.0.0.1:3002"),
    BootstrapItem("sh", "z3", "127.0.0.1:3003"),
]


class Agents:
    """check_server_empty answers as an empty agent started in the zone the test says."""

    def __init__(self, zones: dict[str, str]) -> None:
        self.zones = zones

    def check_server_empty(self, server: str, epoch: int) -> EmptyCheck:
        return EmptyCheck(True, self.zones[server], server, "", 0)


class Answering:
    """Heartbeat requests whose answers make the servers alive and in service (as the intake
    would), or leave them silent."""

    def __init__(self, p: Parts, answer: bool) -> None:
        self.p, self.answer = p, answer

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        if not self.answer:
            return 0
        for key in servers:

            def alive(s: object) -> None:
                s.hb_status = HeartbeatStatus.ALIVE  # type: ignore[attr-defined]
                s.start_service_time = 1  # type: ignore[attr-defined]

            self.p.whitelist.with_server(key, alive)
        return 1


class Office:
    def __init__(self) -> None:
        self.restarts = 0

    def do_restart(self) -> None:
        self.restarts += 1


def make(p: Parts, *, answer: bool) -> tuple[Bootstrap, Office]:
    office = Office()
    p.identity.cluster_id = ""
    b = Bootstrap(
        term=p.term,
        store=p.store,
        clock=p.clock,
        settings=p.settings,
        agents=Agents({i.server: i.zone for i in ITEMS}),  # type: ignore[arg-type]
        whitelist=p.whitelist,
        zones=p.zones,
        identity=p.identity,
        grace=p.grace,
        heartbeats=Answering(p, answer),
        office=office,
        address=lambda: "127.0.0.1:2881",
        sleep=lambda seconds: p.clock.advance(int(seconds * S)),
    )
    return b, office


def test_bootstrap_writes_the_cluster_and_hands_over(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    b, office = make(p, answer=True)
    b.run(ITEMS)
    assert p.identity.bootstrapped and office.restarts == 1
    with engine.connect() as conn:
        params = param_repo.load_params(conn)
        zones = zone_repo.load_zones(conn)
        rows = server_repo.load_servers(conn)
    assert params["rootservice_list"] == "127.0.0.1:2881" and params["max_used_server_id"] == "3"
    assert (
        param_repo.PARAM_BOOTSTRAP_TIME in params and params["cluster_id"] == p.identity.cluster_id
    )
    # z2 has no REGION: it is in the region named before it.
    assert {z: zones[z].region for z in zones} == {"z1": "hz", "z2": "hz", "z3": "sh"}
    assert sorted((r["svr_port"], r["zone"], r["id"]) for r in rows) == [
        (3001, "z1", 1),
        (3002, "z2", 2),
        (3003, "z3", 3),
    ]
    with pytest.raises(ObError) as e:
        b.run(ITEMS)
    assert e.value.name == "OB_INIT_TWICE"


def test_silent_servers_time_out_and_nothing_is_kept(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    b, office = make(p, answer=False)
    with pytest.raises(ObError) as e:
        b.run(ITEMS)
    assert e.value.name == "OB_WAIT_ALL_RS_ONLINE_TIMEOUT"
    assert not p.identity.bootstrapped and office.restarts == 0
    assert p.term.state is RsState.WAIT_BOOTSTRAP and not p.term.in_service
    assert p.whitelist.counts()["servers"] == 0 and p.zones.all() == []
    with engine.connect() as conn:
        params = param_repo.load_params(conn)
        assert server_repo.load_servers(conn) == []
    # Only the cluster id stays: a retried BOOTSTRAP gives agents the same identity.
    assert "cluster_id" in params and param_repo.PARAM_BOOTSTRAP_TIME not in params
