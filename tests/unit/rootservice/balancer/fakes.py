"""Fakes of the balancer's ports (rootservice.balancer.ports) for building its classes without a
RootService: a store on a bare engine, a whitelist of ServerStatus records, an event sink, a
waker, a gate, a layout version, an LS layer and a planner that return what the test set."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.balancer.ports import LsKey, LsPlan, LsView, Reports, Topology
from rootservice.db.event_repo import Event
from rootservice.servers.status import AdminStatus, HeartbeatStatus, ServerStatus

RS_ADDR = ("127.0.0.1", 2881)


class FakeStore:
    """``txn()`` commits on exit, ``read()`` is a plain connection; no epoch fence."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.rs_addr = RS_ADDR

    @contextmanager
    def txn(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            yield conn


class NoDbStore:
    """A store for parts that only need ``txn()`` as the write lock (CopyTasks' premise
    checks): an RLock, no database."""

    def __init__(self) -> None:
        self.rs_addr = RS_ADDR
        self.write_lock = threading.RLock()

    @contextmanager
    def txn(self) -> Iterator[Any]:
        with self.write_lock:
            yield None

    @contextmanager
    def read(self) -> Iterator[Any]:
        raise AssertionError("no database here")
        yield None


def server(
    key: str,
    zone: str = "z1",
    *,
    alive: bool = True,
    deleting: bool = False,
    hb: HeartbeatStatus | None = None,
) -> ServerStatus:
    """A whitelist entry for ``'ip:port'``."""
    ip, _, port = key.rpartition(":")
    s = ServerStatus(id=int(port), zone=zone, ip=ip, port=int(port), sql_port=int(port) + 1000)
    s.hb_status = hb or (HeartbeatStatus.ALIVE if alive else HeartbeatStatus.LEASE_EXPIRED)
    if deleting:
        s.admin_status = AdminStatus.DELETING
    return s


class FakeWhitelist:
    """The servers given, by key."""

    def __init__(self, *servers: ServerStatus) -> None:
        self.servers = {s.key: s for s in servers}

    def get(self, key: str) -> ServerStatus | None:
        return self.servers.get(key)

    def snapshot(self) -> list[ServerStatus]:
        return list(self.servers.values())

    def has_servers_to_empty(self) -> bool:
        return any(
            s.admin_status is AdminStatus.DELETING
            or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
            for s in self.servers.values()
        )


@dataclass
class FakeEvents:
    events: list[Event] = field(default_factory=list)

    def add_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.event == name]


@dataclass
class FakeWaker:
    woken: list[str] = field(default_factory=list)

    def __call__(self, name: str) -> None:
        self.woken.append(name)


@dataclass
class FakeGate:
    in_service: bool = True

    def may_act(self) -> bool:
        return self.in_service


@dataclass
class FakeLayout:
    version: int = 0


def plan(key: LsKey, members: dict[str, int], zone: str = "z1") -> LsPlan:
    """An LS plan: ``members`` server -> unit_id."""
    return LsPlan(key, {m: (zone, u) for m, u in members.items()}, {zone: 0}, zone)


def info(
    key: LsKey,
    members: Iterable[str],
    *,
    in_service: bool = True,
    build_error: str = "",
    copy_from: str = "",
    data_size: int = 0,
    bytes_copied: int = 0,
    leader: str = "",
    term: int = 1,
) -> obrpc_pb2.ReplicaInfo:
    """A replica report of LS ``key``."""
    return obrpc_pb2.ReplicaInfo(
        tenant_id=key[0],
        ls_id=key[1],
        member_list=sorted(members),
        in_service=in_service,
        build_error=build_error,
        copy_from=copy_from,
        data_size=data_size,
        bytes_copied=bytes_copied,
        leader=leader,
        term=term,
    )


class FakeLs:
    """The tenant layer as the balancer sees it: set ``plans``, ``reports`` and ``leaders``;
    ApplyReplicas calls are recorded (``refuse`` names servers whose calls fail)."""

    def __init__(self) -> None:
        self.plans: dict[LsKey, LsPlan] = {}
        self.report_table: Reports = {}
        self.leaders: dict[LsKey, str] = {}
        self.applied: list[tuple[str, list[obrpc_pb2.ReplicaSpec]]] = []
        self.dropped: dict[str, list[LsKey]] = {}
        self.refuse: set[str] = set()
        self.forgotten = 0
        self.announced: list[tuple[LsKey, str, str]] = []

    def topology(self) -> Topology:
        return Topology(version=0, plans=dict(self.plans))

    def views(self) -> dict[LsKey, LsView]:
        out = {k: LsView(k) for k in self.plans}
        for srv, table in self.report_table.items():
            for k, r in table.items():
                out.setdefault(k, LsView(k)).replicas[srv] = r
        for k, leader in self.leaders.items():
            out[k].leader = leader
            out[k].term = 1
        return out

    def reports(self) -> Reports:
        return dict(self.report_table)

    def members(self, plan: LsPlan, view: LsView) -> list[str]:
        if view.leader is not None:
            return sorted(view.replicas[view.leader].member_list)
        return sorted(plan.members)

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        return obrpc_pb2.ReplicaSpec(
            tenant_id=plan.key[0],
            ls_id=plan.key[1],
            member_list=self.members(plan, view),
            leader=view.leader or "",
            term=view.term,
            copy_from=src,
        )

    def announce_copy(self, plan: LsPlan, view: LsView, dest: str, src: str) -> LsView:
        if src in self.refuse:
            raise ObError("OB_TIMEOUT", detail=f"{src} refused")
        self.announced.append((plan.key, dest, src))
        return view

    def apply(
        self, srv: str, upsert: Iterable[obrpc_pb2.ReplicaSpec] = (), drop: Iterable[LsKey] = ()
    ) -> Any:
        if srv in self.refuse:
            raise ObError("OB_TIMEOUT", detail=f"{srv} refused")
        self.applied.append((srv, list(upsert)))
        return None

    def apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        failures: dict[str, ObError] = {}
        for srv, keys in (drops or {}).items():
            if srv in self.refuse:
                failures[srv] = ObError("OB_TIMEOUT", detail=f"{srv} refused")
                continue
            self.dropped.setdefault(srv, []).extend(keys)
        return failures

    def forget_meta(self) -> None:
        self.forgotten += 1


@dataclass
class FakePlanner:
    """Returns the rows set; counts the calls (a plan that is never asked for costs nothing)."""

    units: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def unit_plan(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append("unit_plan")
        return list(self.units)

    def replica_plan(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append("replica_plan")
        return list(self.replicas)

    def lost_replicas(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append("lost_replicas")
        return list(self.lost)
