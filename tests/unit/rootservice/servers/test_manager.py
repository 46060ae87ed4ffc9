"""The transitional facade the tenant and balancer layers are built with
(rootservice.servers.manager), built from its parts without RootService."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sqlalchemy as sa

from rootservice.servers.manager import ServerManager
from tests.support.harness import SEEDED
from tests.support.server_parts import make_parts, seed


class RecordingRequests:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        self.asked.append(list(servers))
        return 1


def test_facade_delegates_to_the_parts(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    requests = RecordingRequests()
    naps: list[float] = []
    m = ServerManager(
        p.whitelist,
        p.zones,
        p.persist,
        requests,  # type: ignore[arg-type]
        p.term,
        p.store,
        p.clock,
        p.settings,
        object(),  # type: ignore[arg-type]
        p.metrics,
        p.wake,
        naps.append,
    )
    a = SEEDED[0][0]
    assert m.get(a) == p.whitelist.get(a) and m.snapshot() == p.whitelist.snapshot()
    m.with_server(a, lambda s: setattr(s, "leader_cnt", 2))
    assert p.whitelist.get(a).leader_cnt == 2
    assert not m.has_servers_to_empty()
    assert m.request_heartbeats([a]) == 1 and requests.asked == [[a]]
    m.wake("balancer")
    m.sleep(0.5)
    assert p.woken == ["balancer"] and naps == [0.5]
    assert m.zones is p.zones and m.persist is p.persist and m.term is p.term
