"""The tenant layer built from its collaborators, without a RootService: an office won on
the test database (a real :class:`Term` and fenced :class:`MetaStore`), an in-memory
whitelist and zones, an event list, a heartbeat recorder and agents that apply replica specs
in memory (:class:`FakeAgents`). Unit tests of ``rootservice.tenants`` build the classes they
test from these, the way ``rootservice.app`` wires them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path

import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import ZoneInfo
from rootservice.ha.election import Election
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term
from rootservice.metrics import Metrics
from rootservice.servers.status import HeartbeatStatus, ServerStatus
from rootservice.tenants.balancer_view import BalancerView
from rootservice.tenants.ddl_requests import NewPool, NewTenant, NewUnitConfig
from rootservice.tenants.layer import TenantLayer, build_tenant_layer
from rootservice.tenants.vocabulary import LsKey

S = 1_000_000
GIB = 1 << 30
RS_ADDR = ("127.0.0.1", 2881)


def take_office(engine: sa.Engine, clock: FakeClock) -> tuple[Term, MetaStore]:
    """Win the election on ``engine`` (epoch 1) and open the service: fenced writes work."""
    term = Term(clock, address=lambda: "127.0.0.1:2881", lease_time=lambda: 10 * S)
    store = MetaStore(engine, RS_ADDR, term)
    election = Election(
        store,
        term,
        clock,
        lease_time=lambda: 10 * S,
        on_elected=lambda epoch: None,
        on_step_down=lambda why: None,
        db_clock=clock,
    )
    # A round gives up when its session sits idle in its transaction for 2 s (PostgreSQL's
    # idle_in_transaction_session_timeout, set by the round): on a loaded CI machine this
    # process was once descheduled that long. The RS retries at its next round; so does
    # this harness, three rounds at most.
    assert any(election.run_once() for _ in range(3))
    term.state = RsState.FULL_SERVICE
    term.open_service()
    return term, store


def alive_server(i: int, server: str, zone: str, *, mem: int = 16 * GIB) -> ServerStatus:
    """A whitelisted, alive, started server with 8 cores, ``mem`` memory, 64G log disk."""
    ip, port = server.rsplit(":", 1)
    s = ServerStatus(id=i, zone=zone, ip=ip, port=int(port), sql_port=int(port) + 1000)
    s.hb_status = HeartbeatStatus.ALIVE
    s.start_service_time = 1
    s.resource_info.cpu_total = 8
    s.resource_info.mem_total = mem
    s.resource_info.log_disk_total = 64 * GIB
    return s


class FakeServers:
    """An in-memory whitelist (``ServerDirectory``); records are shared, not copied."""

    def __init__(self, servers: Iterable[ServerStatus]) -> None:
        """Hold ``servers`` by key."""
        self.by_key = {s.key: s for s in servers}

    def get(self, server: str) -> ServerStatus | None:
        """The record, or None."""
        return self.by_key.get(server)

    def snapshot(self) -> list[ServerStatus]:
        """Every record by id."""
        return sorted(self.by_key.values(), key=lambda s: s.id)

    def with_server(self, server: str, fn: Callable[[ServerStatus], None]) -> None:
        """``fn`` on the record, if any."""
        s = self.by_key.get(server)
        if s is not None:
            fn(s)


class FakeZones:
    """In-memory zones (``ZoneDirectory``)."""

    def __init__(self, zones: Iterable[ZoneInfo]) -> None:
        """Hold ``zones`` by name."""
        self.by_name = {z.zone: z for z in zones}

    def get(self, zone: str) -> ZoneInfo | None:
        """The zone, or None."""
        return self.by_name.get(zone)

    def all(self) -> list[ZoneInfo]:
        """Every zone by name."""
        return [self.by_name[z] for z in sorted(self.by_name)]

    def is_active(self, zone: str) -> bool:
        """Exists and ACTIVE."""
        z = self.by_name.get(zone)
        return z is not None and z.active


@dataclass
class EventList:
    """An ``EventSink`` keeping the events."""

    events: list[Event] = field(default_factory=list)

    def add_event(self, event: Event) -> None:
        """Keep ``event``."""
        self.events.append(event)


@dataclass
class HeartbeatLog:
    """A ``HeartbeatRequester`` recording who was asked."""

    asked: list[list[str]] = field(default_factory=list)

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        """Record the request; nobody answers."""
        self.asked.append(sorted(servers))
        return 0


@dataclass
class MoveLog:
    """A ``ReplicaMoves`` recording what it hears as ``(step, server(s))``."""

    heard: list[tuple[str, object]] = field(default_factory=list)

    def copy_built(self, server: str, /) -> None:
        """Record it."""
        self.heard.append(("copy_built", server))

    def replica_dropped(self, server: str, /) -> None:
        """Record it."""
        self.heard.append(("replica_dropped", server))

    def rows_deleted(self, servers: frozenset[str], /) -> None:
        """Record it."""
        self.heard.append(("rows_deleted", servers))


class FakeAgents:
    """Agents that apply replica specs in memory (``ReplicaAgents``): a spec at a term not
    lower than the kept one replaces it; the leader of a spec reports LEADER; every replica
    is in service with its log at index 100 (or the catch-up index). Servers in ``down``
    are unreachable."""

    def __init__(self) -> None:
        """No replicas, nobody down."""
        self.replicas: dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]] = {}
        self.down: set[str] = set()
        self.calls: list[tuple[str, obrpc_pb2.ApplyReplicasRequest]] = []

    def apply_replicas(
        self,
        server: str,
        request: obrpc_pb2.ApplyReplicasRequest,
        timeout_us: int | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """Apply ``request`` on ``server``. Raises OB_SERVER_CONNECTION_ERROR when down."""
        self.calls.append((server, request))
        if server in self.down:
            raise ObError("OB_SERVER_CONNECTION_ERROR", server)
        table = self.replicas.setdefault(server, {})
        for spec in request.upsert:
            key = (spec.tenant_id, spec.ls_id)
            cur = table.get(key)
            if cur is not None and spec.term < cur.term:
                continue
            end = max(cur.log_end_index if cur is not None else 100, spec.catch_up_index)
            table[key] = obrpc_pb2.ReplicaInfo(
                tenant_id=spec.tenant_id,
                ls_id=spec.ls_id,
                unit_id=spec.unit_id,
                role=obrpc_pb2.LEADER if spec.leader == server else obrpc_pb2.FOLLOWER,
                member_list=sorted(spec.member_list),
                replica_type=spec.replica_type,
                paxos_replica_number=spec.paxos_replica_number,
                in_service=True,
                term=spec.term,
                leader=spec.leader,
                log_end_index=end,
                data_size=1 << 20,
                required_size=(1 << 20) + 4096,
            )
        for k in request.drop:
            table.pop((k.tenant_id, k.ls_id), None)
        return obrpc_pb2.ApplyReplicasResponse(replicas=list(table.values()))


@dataclass(frozen=True)
class Layer(TenantLayer):
    """The tenant layer as :func:`build_tenant_layer` wires it (``rootservice.app`` builds it
    the same way), with the fakes and the term it runs on."""

    clock: FakeClock
    term: Term
    store: MetaStore
    settings: RsSettings
    servers: FakeServers
    zones: FakeZones
    events: EventList
    heartbeats: HeartbeatLog
    agents: FakeAgents
    moves: MoveLog

    @property
    def view(self) -> BalancerView:
        """The balancer's view of the layer."""
        return self.balancer_view


# (server, zone): two servers in z1, one in z2, one in z3 (as tests.support.harness.SEEDED).
SERVERS = [
    ("127.0.0.1:3001", "z1"),
    ("127.0.0.1:3002", "z2"),
    ("127.0.0.1:3003", "z3"),
    ("127.0.0.1:3004", "z1"),
]


def build_layer(
    engine: sa.Engine, tmp_path: Path, servers: list[tuple[str, str]] = SERVERS
) -> Layer:
    """The tenant layer in office on ``engine`` with ``servers`` alive in ACTIVE zones of
    region r1, short timings (1 s timeouts) and a FakeClock that ``sleep`` advances."""
    clock = FakeClock()
    term, store = take_office(engine, clock)
    settings = RsSettings(
        data_dir=tmp_path,
        db_url="sqlite://",
        rpc_addr="127.0.0.1:2881",
        rpc_timeout="200ms",
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
    )
    fs = FakeServers(alive_server(i, k, z) for i, (k, z) in enumerate(servers, start=1))
    zones = FakeZones(ZoneInfo(z, "ACTIVE", "r1", "") for z in sorted({z for _, z in servers}))
    events, heartbeats, agents = EventList(), HeartbeatLog(), FakeAgents()
    metrics = Metrics()
    moves = MoveLog()

    def sleep(seconds: float) -> None:
        clock.advance(int(seconds * S))

    tl = build_tenant_layer(
        store=store,
        agents=agents,
        servers=fs,
        zones=zones,
        events=events,
        heartbeats=heartbeats,
        term=term,
        clock=clock,
        settings=settings,
        metrics=metrics,
        sleep=sleep,
        moves=moves,
    )
    return Layer(
        **{f.name: getattr(tl, f.name) for f in fields(TenantLayer)},
        clock=clock,
        term=term,
        store=store,
        settings=settings,
        servers=fs,
        zones=zones,
        events=events,
        heartbeats=heartbeats,
        agents=agents,
        moves=moves,
    )


A, B, C, D = (k for k, _ in SERVERS)


def make_tenant(layer: Layer, ls_count: int = 2, primary: str = "z1") -> int:
    """Unit u1 (2 CPU, 4G), pool p1 (one unit in each of z1..z3) and tenant t1 through the
    DDL; the in-memory agents create the replicas and elect leaders. Returns the tenant id."""
    layer.ddl.create_unit_config(NewUnitConfig("u1", (("max_cpu", 2), ("memory_size", "4G"))))
    layer.ddl.create_pool(NewPool("p1", "u1", 1, ("z1", "z2", "z3")))
    tenant_id, _ = layer.ddl.create_tenant(NewTenant("t1", ("p1",), primary, ls_count))
    return tenant_id


def heartbeat(layer: Layer, *servers: str) -> None:
    """Feed each server's in-memory replicas to the reports, as a heartbeat would."""
    for server in servers or layer.servers.by_key:
        layer.servers.with_server(
            server,
            lambda s: layer.reports.report(s, list(layer.agents.replicas.get(s.key, {}).values())),
        )
