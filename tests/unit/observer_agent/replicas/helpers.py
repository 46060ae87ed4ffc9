"""Harness of the replica tests: in-process agents with their gRPC servers on 127.0.0.1
(port 0), specs and requests for ApplyReplicas. The ``copy_*`` variants are those of the
replica-migration tests (256K replicas, 16K chunks so that progress is visible)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from obcommon.clock import Clock, SystemClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from observer_agent.agent import Agent
from observer_agent.http import AgentHttp
from observer_agent.replicas.bandwidth import CopyBandwidth
from observer_agent.service import start_server, stop_server
from observer_agent.settings import AgentSettings
from tests.support.ports import free_port

T, LS = 1001, 1
KEY = (T, LS)
SMALL = 64 * 1024


def settings(data_dir: Path, **over: object) -> AgentSettings:
    values: dict[str, object] = {
        "rs_list": f"127.0.0.1:{free_port()}",
        "rpc_addr": "127.0.0.1:0",
        "sql_port": 2881,
        "zone": "z1",
        "data_dir": data_dir,
        "replica_size": "64K",
        "log_interval": "50ms",
        "rpc_timeout": "1s",
    }
    values.update(over)
    return AgentSettings.in_process(**values)


def spec(
    members: list[str],
    leader: str,
    term: int,
    *,
    catch_up_index: int = 0,
    catch_up_from: str = "",
    unit_id: int = 7,
) -> obrpc_pb2.ReplicaSpec:
    return obrpc_pb2.ReplicaSpec(
        tenant_id=T,
        ls_id=LS,
        unit_id=unit_id,
        replica_type="FULL",
        member_list=members,
        paxos_replica_number=len(members),
        leader=leader,
        term=term,
        catch_up_index=catch_up_index,
        catch_up_from=catch_up_from,
    )


def upsert(*specs: obrpc_pb2.ReplicaSpec, epoch: int = 1) -> obrpc_pb2.ApplyReplicasRequest:
    return obrpc_pb2.ApplyReplicasRequest(rs_epoch=epoch, upsert=list(specs))


def drop(epoch: int = 1) -> obrpc_pb2.ApplyReplicasRequest:
    return obrpc_pb2.ApplyReplicasRequest(
        rs_epoch=epoch, drop=[obrpc_pb2.ReplicaKey(tenant_id=T, ls_id=LS)]
    )


def _agent(x: Node | Agent) -> Agent:
    return x.agent if isinstance(x, Node) else x


def entries(node: Node | Agent, upto: int | None = None) -> list[tuple[int, int, int]]:
    rep = _agent(node).replicas.get(*KEY)
    assert rep is not None
    log = rep.log
    end = log.end_index if upto is None else min(upto, log.end_index)
    return log.read(log.base_index + 1, end - log.base_index)


def end_index(node: Node | Agent) -> int:
    rep = _agent(node).replicas.get(*KEY)
    return rep.log.end_index if rep is not None else -1


class Node:
    """One in-process agent with its gRPC server and an RS-side stub to it."""

    def __init__(self, agent: Agent, server: Any, channel: grpc.aio.Channel) -> None:
        self.agent = agent
        self.server = server
        self.channel = channel
        self.stub = obrpc_pb2_grpc.ObserverServiceStub(channel)
        self.replica_stub = obrpc_pb2_grpc.ReplicaServiceStub(channel)

    @property
    def addr(self) -> str:
        return self.agent.server

    async def apply(self, req: obrpc_pb2.ApplyReplicasRequest) -> obrpc_pb2.ApplyReplicasResponse:
        return await self.stub.ApplyReplicas(req, timeout=10)  # type: ignore[no-any-return]

    def report(self) -> obrpc_pb2.ReplicaInfo:
        [info] = [r for r in self.agent.replicas.report() if (r.tenant_id, r.ls_id) == KEY]
        return info


@asynccontextmanager
async def nodes(tmp_path: Path, n: int, **over: object) -> AsyncIterator[list[Node]]:
    started: list[Node] = []
    try:
        for i in range(n):
            agent = Agent(settings(tmp_path / f"agent{i}", **over), SystemClock())
            server, port = await start_server(agent, "127.0.0.1:0")
            agent.replicas.start()
            channel = grpc.aio.insecure_channel(
                f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)]
            )
            started.append(Node(agent, server, channel))
        yield started
    finally:
        for node in started:
            await node.channel.close()
            await stop_server(node.agent, node.server, grace_s=0.2)


# ---------------------------------------------------------------- replica migration


SIZE = 256 * 1024
#: Chunk size the copying agents ask for: 16 chunks per replica, so progress is visible.
CHUNK = 16 * 1024


def copy_settings(data_dir: Path, **over: object) -> AgentSettings:
    values: dict[str, object] = {
        "rs_list": f"127.0.0.1:{free_port()}",
        "rpc_addr": "127.0.0.1:0",
        "sql_port": 2881,
        "zone": "z1",
        "data_dir": data_dir,
        "replica_size": "256K",
        "log_interval": "50ms",
        "rpc_timeout": "1s",
    }
    values.update(over)
    return AgentSettings.in_process(**values)


def copy_spec(
    members: list[str], leader: str, term: int, *, copy_from: str = "", ls: int = LS
) -> obrpc_pb2.ReplicaSpec:
    return obrpc_pb2.ReplicaSpec(
        tenant_id=T,
        ls_id=ls,
        unit_id=7,
        replica_type="FULL",
        member_list=sorted(members),
        paxos_replica_number=len(members),
        leader=leader,
        term=term,
        copy_from=copy_from,
    )


def copy_upsert(*specs: obrpc_pb2.ReplicaSpec) -> obrpc_pb2.ApplyReplicasRequest:
    return obrpc_pb2.ApplyReplicasRequest(rs_epoch=1, upsert=list(specs))


def copy_drop(ls: int = LS) -> obrpc_pb2.ApplyReplicasRequest:
    return obrpc_pb2.ApplyReplicasRequest(
        rs_epoch=1, drop=[obrpc_pb2.ReplicaKey(tenant_id=T, ls_id=ls)]
    )


class CopyNode:
    """One in-process agent with its gRPC server and stubs to it."""

    def __init__(self, agent: Agent, server: Any, channel: grpc.aio.Channel) -> None:
        self.agent = agent
        self.server = server
        self.channel = channel
        self.stub = obrpc_pb2_grpc.ObserverServiceStub(channel)
        self.replica_stub = obrpc_pb2_grpc.ReplicaServiceStub(channel)
        self.stopped = False
        #: The agent's HTTP endpoint when started with ``http=True`` (the bulk data path).
        self.http: AgentHttp | None = None

    @property
    def addr(self) -> str:
        return self.agent.server

    @property
    def data_dir(self) -> Path:
        return self.agent.data_dir

    def rdir(self, ls: int = LS) -> Path:
        return self.data_dir / "replicas" / f"{T}_{ls}"

    async def apply(self, req: obrpc_pb2.ApplyReplicasRequest) -> obrpc_pb2.ApplyReplicasResponse:
        return await self.stub.ApplyReplicas(req, timeout=10)  # type: ignore[no-any-return]

    def info(self, ls: int = LS) -> obrpc_pb2.ReplicaInfo | None:
        """This replica as the agent reports it in its next lease request."""
        for r in self.agent.build_lease_request().replicas:
            if (r.tenant_id, r.ls_id) == (T, ls):
                return r
        return None

    def in_service(self, ls: int = LS) -> bool:
        info = self.info(ls)
        return info is not None and info.in_service

    def end_index(self, ls: int = LS) -> int:
        rep = self.agent.replicas.get(T, ls)
        return rep.log.end_index if rep is not None else -1

    def base_index(self, ls: int = LS) -> int:
        rep = self.agent.replicas.get(T, ls)
        assert rep is not None
        return rep.log.base_index

    def entries(self, ls: int = LS) -> list[tuple[int, int, int]]:
        rep = self.agent.replicas.get(T, ls)
        assert rep is not None
        return list(rep.log.entries)

    async def fetch_data(self, ls: int = LS, **kw: Any) -> list[obrpc_pb2.DataChunk]:
        req = obrpc_pb2.FetchDataRequest(tenant_id=T, ls_id=ls, **kw)
        call = self.replica_stub.FetchData(req, timeout=10)
        return [c async for c in call]

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            if self.http is not None:
                await self.http.stop()
            await self.channel.close()
            await stop_server(self.agent, self.server, grace_s=0.2)


async def start_copy_node(
    data_dir: Path,
    *,
    log_keep: int = 0,
    clock: Clock | None = None,
    http: bool = False,
    bandwidth: CopyBandwidth | None = None,
    **over: object,
) -> CopyNode:
    """An agent copying in :data:`CHUNK` chunks; ``http`` also starts its HTTP endpoint, so
    it serves its data files over the bulk path."""
    keep = {"replica_log_keep": log_keep} if log_keep else {}
    agent = Agent(
        copy_settings(data_dir, **over),
        clock or SystemClock(),
        copy_chunk_size=CHUNK,
        copy_bandwidth=bandwidth,
        **keep,  # type: ignore[arg-type]
    )
    server, port = await start_server(agent, "127.0.0.1:0")
    agent.replicas.start()
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)]
    )
    node = CopyNode(agent, server, channel)
    if http:
        node.http = AgentHttp(agent, "127.0.0.1:0")
        await node.http.start()
    return node


@asynccontextmanager
async def copy_nodes(tmp_path: Path, n: int, **over: Any) -> AsyncIterator[list[CopyNode]]:
    started: list[CopyNode] = []
    try:
        for i in range(n):
            started.append(await start_copy_node(tmp_path / f"agent{i}", **over))
        yield started
    finally:
        for node in started:
            await node.stop()


def fault(node: CopyNode, name: str, content: str = "") -> Path:
    path = node.data_dir / name
    path.write_text(content)
    return path


def leftovers(node: CopyNode, ls: int = LS) -> list[str]:
    """Hidden (temp) files in the replica's directory."""
    d = node.rdir(ls)
    return sorted(p.name for p in d.glob(".*")) if d.exists() else []


async def lead(leader: CopyNode, *followers: CopyNode, ls: int = LS) -> list[str]:
    """Create LS ``ls`` on ``leader`` (leading, term 1) and ``followers``; returns members."""
    members = sorted(n.addr for n in (leader, *followers))
    for n in (leader, *followers):
        resp = await n.apply(copy_upsert(copy_spec(members, leader.addr, 1, ls=ls)))
        assert resp.error.code == 0, resp.error
    return members
