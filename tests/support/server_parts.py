"""The server layer's parts built from their collaborators, without ``RootService``.

``make_parts(engine)`` takes office on a migrated database (a lease row of its own, epoch
fenced like a real leader), opens the term's service window and builds the whitelist, zone
cache, persistence queue, take-office grace, identity and loader on a FakeClock, with
recording fakes for the tenant and balancer layers. ``seed(parts)`` writes the SEEDED cluster
of :mod:`tests.support.harness` and loads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import lease_repo, param_repo, server_repo, zone_repo
from rootservice.db.zone_repo import ZoneInfo
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term
from rootservice.metrics import Metrics
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.loader import ServerLoader, TakeOfficeGrace
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.status import ServerStatus, StopMode
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from tests.support.harness import LEASE, SEEDED

RS_ADDR = ("127.0.0.1", 2881)


@dataclass
class FakeTenants:
    """The tenant layer as the server layer sees it: records every call; ``units`` /
    ``replicas`` are the servers still holding something; ``refuse`` makes the checks raise."""

    reports: list[tuple[str, int]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    units: set[str] = field(default_factory=set)
    replicas: set[str] = field(default_factory=set)
    leaders: bool = True
    refuse: str = ""

    def report(self, server: ServerStatus, replicas: Sequence[Any], replicas_version: int) -> None:
        self.reports.append((server.key, len(replicas)))

    def check_delete(self, targets: list[ServerStatus]) -> None:
        self.calls.append(("check_delete", [s.key for s in targets]))
        if self.refuse:
            raise ObError(self.refuse)

    def check_stop(self, targets: list[ServerStatus], mode: StopMode) -> None:
        self.calls.append(("check_stop", ([s.key for s in targets], mode)))
        if self.refuse:
            raise ObError(self.refuse)

    def move_leaders_off(self, servers: Iterable[str]) -> None:
        self.calls.append(("move_leaders_off", list(servers)))

    def has_units(self, server: str) -> bool:
        return server in self.units

    def has_replicas(self, server: str) -> bool:
        return server in self.replicas

    def all_ls_have_leader(self) -> bool:
        return self.leaders

    def extra_deletes(self, conn: Any, ip: str, port: int) -> None:
        self.calls.append(("extra_deletes", f"{ip}:{port}"))


@dataclass
class FakeBalancer:
    """The balancer as the server layer sees it: records every call."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def move_units_back(self, conn: Any, server: str) -> list[Any]:
        self.calls.append(("move_units_back", server))
        return []

    def cancelled(self, server: str, undone: Any) -> Any:
        self.calls.append(("cancelled", server))
        return {"drops of": server}

    def drop_partial(self, partial: Any) -> None:
        self.calls.append(("drop_partial", partial))

    def finalize_job(self, conn: Any, ip: str, port: int) -> None:
        self.calls.append(("finalize_job", f"{ip}:{port}"))


@dataclass
class Parts:
    """What every part of the server layer is built from."""

    clock: FakeClock
    settings: RsSettings
    term: Term
    store: MetaStore
    metrics: Metrics
    whitelist: Whitelist
    zones: ZoneManager
    persist: PersistQueue
    grace: TakeOfficeGrace
    identity: ClusterIdentity
    loader: ServerLoader
    tenants: FakeTenants = field(default_factory=FakeTenants)
    balancer: FakeBalancer = field(default_factory=FakeBalancer)
    woken: list[str] = field(default_factory=list)

    def wake(self, name: str) -> None:
        self.woken.append(name)


def make_parts(engine: sa.Engine, tmp_path: Any) -> Parts:
    """Parts on ``engine`` (migrated), in office with a fresh epoch and in service."""
    clock = FakeClock()
    settings = RsSettings(data_dir=tmp_path, rpc_addr="127.0.0.1:2881", rpc_timeout="200ms")
    term = Term(clock, address=lambda: "127.0.0.1:2881", lease_time=lambda: settings.lease_time)
    store = MetaStore(engine, RS_ADDR, term)
    now = clock.now_us()
    with engine.begin() as conn:
        old = lease_repo.read_lease(conn, lock=True)
        epoch = lease_repo.take_lease(conn, old, RS_ADDR, now, now + LEASE)
    term.begin(epoch, clock.monotonic_us())
    term.state = RsState.FULL_SERVICE
    term.open_service()
    metrics = Metrics()
    whitelist = Whitelist()
    zones = ZoneManager(clock, store, whitelist)
    persist = PersistQueue(store, clock, whitelist, metrics)
    grace = TakeOfficeGrace()
    identity = ClusterIdentity(cluster_id="c0ffee", rs_list=["127.0.0.1:2881"])
    loader = ServerLoader(whitelist, zones, persist, grace, identity, store, clock, settings)
    return Parts(
        clock, settings, term, store, metrics, whitelist, zones, persist, grace, identity, loader
    )


def seed(parts: Parts, servers: list[tuple[str, str]] = SEEDED) -> None:
    """Write zones z1..z3 (ACTIVE) and ``servers`` (never heartbeated) and load them without a
    take-office grace."""
    now = parts.clock.now_us()
    with parts.store.txn() as conn:
        for z in sorted({z for _, z in servers}):
            zone_repo.upsert_zone(conn, ZoneInfo(z, "ACTIVE", "r1", ""), now)
        for i, (server, zone) in enumerate(servers, start=1):
            ip, port = server.rsplit(":", 1)
            s = ServerStatus(id=i, zone=zone, ip=ip, port=int(port), sql_port=int(port) + 1000)
            s.last_offline_time = now
            server_repo.insert_server(conn, s.to_row(), now)
        param_repo.set_param(conn, param_repo.PARAM_MAX_SERVER_ID, str(len(servers)), now)
    parts.loader.load(take_office=False)
