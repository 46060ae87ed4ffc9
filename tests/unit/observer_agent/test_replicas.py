"""LS replicas on the observer agent: storage on disk, ApplyReplicas, the leader's log and
followers fetching it over real gRPC between in-process agents (127.0.0.1, port 0), the
fault switches, and the settings that go with them."""

from __future__ import annotations

import asyncio
import json
import statistics
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from pydantic import ValidationError

from obcommon.clock import FakeClock, SystemClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.sizes import parse_size
from observer_agent.agent import Agent
from observer_agent.cli import load_settings, main
from observer_agent.replicas.faults import (
    FAULT_REPLICATION_DELAY_FILE,
    FAULT_REPLICATION_STOP_FILE,
)
from observer_agent.replicas.log import ReplicaLog, merge_fetched
from observer_agent.replicas.storage import build_data_file, file_checksum
from observer_agent.resources import collect_resource_info
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


async def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` every 20 ms, at most ``timeout_s`` (and 1000 polls)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for _ in range(1000):
        if cond():
            return
        if loop.time() >= deadline:
            break
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


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


def run(coro: Any, timeout_s: float = 30) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


# ---------------------------------------------------------------- settings / resources


def test_sizes_and_new_flags(tmp_path: Path) -> None:
    # The agent's size flags use the same grammar as resource units (obcommon.sizes).
    assert [parse_size(v) for v in ("4M", "512K", "1G", "2gb", "100", " 3k ", "1.5G", 0, 77)] == [
        4 << 20,
        512 << 10,
        1 << 30,
        2 << 30,
        100,
        3 << 10,
        3 << 29,
        0,
        77,
    ]
    for bad in ("4X", "-1", "3 k", "", "G"):
        with pytest.raises(ValueError, match="invalid size"):
            parse_size(bad)
    s = load_settings(
        [
            "--rs-list=127.0.0.1:2882",
            "--rpc-addr=127.0.0.1:2883",
            "--sql-port=2881",
            "--zone=z1",
            f"--data-dir={tmp_path}",
            "--replica-size=512K",
            "--log-interval=50ms",
            "--cpu-count=2.5",
            "--memory-limit=8G",
            "--log-disk-size=10G",
        ]
    )
    assert (s.replica_size, s.log_interval, s.cpu_count, s.memory_limit, s.log_disk_size) == (
        512 << 10,
        50_000,
        2.5,
        8 << 30,
        10 << 30,
    )
    d = AgentSettings.in_process(
        rs_list="127.0.0.1:1", rpc_addr="127.0.0.1:0", sql_port=1, zone="z", data_dir=tmp_path
    )
    assert (d.replica_size, d.log_interval, d.cpu_count, d.memory_limit) == (
        4 << 20,
        500_000,
        None,
        None,
    )
    assert settings(tmp_path, log_disk_size=12345).log_disk_size == 12345
    with pytest.raises(ValidationError, match="replica_size = 1K is out of range"):
        settings(tmp_path, replica_size="1K")


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--replica-size", "4Q"),
        ("--log-interval", "1ms"),
        ("--cpu-count", "0"),
        ("--cpu-count", "many"),
        ("--memory-limit", "0"),
        ("--log-disk-size", "ten"),
    ],
)
def test_bad_new_flags_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    argv = ["--rs-list", "127.0.0.1:2882", "--rpc-addr", "127.0.0.1:2883", "--sql-port", "1"]
    argv += ["--zone", "z1", "--data-dir", str(tmp_path), flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert flag in err or flag.removeprefix("--").replace("-", "_") in err


def test_resource_overrides(tmp_path: Path) -> None:
    info = collect_resource_info(tmp_path, 3 << 30, cpu_count=2.5, memory_limit=1 << 30)
    assert (info.cpu_total, info.mem_total, info.log_disk_total) == (2.5, 1 << 30, 3 << 30)
    assert 0 <= info.mem_in_use <= 1 << 30
    agent = Agent(settings(tmp_path, cpu_count=3, memory_limit="2G"), FakeClock())
    agent.refresh_resources()
    assert (agent.resource_info.cpu_total, agent.resource_info.mem_total) == (3.0, 2 << 30)


# ---------------------------------------------------------------- storage


def test_data_file_identical_across_members_and_distinct_per_ls(tmp_path: Path) -> None:
    paths = [tmp_path / f"m{i}" for i in range(3)]
    crcs = []
    for p in paths:
        p.mkdir()
        crcs.append(build_data_file(p / "data", SMALL + 123, T, LS))
    assert len(set(crcs)) == 1
    assert paths[0].joinpath("data").read_bytes() == paths[2].joinpath("data").read_bytes()
    assert file_checksum(paths[1] / "data") == (SMALL + 123, crcs[0])
    assert crcs[0] == zlib.crc32(paths[1].joinpath("data").read_bytes())
    other = build_data_file(tmp_path / "other", SMALL + 123, T, LS + 1)
    assert other != crcs[0]
    assert not list(tmp_path.glob("m0/.*"))  # no temp file left behind


def test_log_compaction_keeps_end_index_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "clog" / "1_1" / "log"
    log = ReplicaLog.open(path, keep=10)
    assert (log.end_index, log.end_ts, log.size_bytes) == (0, 0, 24)
    ends = []
    for i in range(1, 96):
        log.append([(i, 1, 1000 + i)])
        ends.append(log.end_index)
        assert len(log.entries) < 20
    assert ends == list(range(1, 96))
    assert log.base_index >= 95 - 20 and log.entry(95) == (95, 1, 1095)
    assert log.entry(log.base_index) is None
    assert log.read(1, 3)[0][0] == log.base_index + 1
    log.close()
    again = ReplicaLog.open(path, keep=10)
    assert (again.base_index, again.entries) == (log.base_index, log.entries)
    assert path.stat().st_size == again.size_bytes
    with pytest.raises(ValueError, match="does not follow"):
        again.append([(97, 1, 0)])
    # A torn last record is cut off on load.
    again.close()
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    torn = ReplicaLog.open(path, keep=10)
    assert torn.end_index == 95 and path.stat().st_size == torn.size_bytes
    # Truncation below the compacted base keeps a consistent, empty log there.
    torn.truncate(90)
    assert (torn.end_index, torn.end_ts) == (90, 1090)
    torn.truncate(5)
    assert (torn.end_index, torn.entries) == (5, [])
    torn.close()
    assert ReplicaLog.open(path, keep=10).end_index == 5


def test_apply_creates_files_and_a_restart_reloads_and_verifies(tmp_path: Path) -> None:
    clock = FakeClock()
    data = tmp_path / "data"
    members = ["127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"]

    async def create() -> obrpc_pb2.ApplyReplicasResponse:
        agent = Agent(settings(data), clock)
        try:
            return await agent.replicas.apply(upsert(spec(members, members[1], 3)), 0)  # type: ignore[no-any-return]
        finally:
            await agent.replicas.stop()

    resp = run(create())
    assert resp.error.code == 0
    [info] = resp.replicas
    assert (info.tenant_id, info.ls_id, info.unit_id, info.term, info.leader) == (
        T,
        LS,
        7,
        3,
        members[1],
    )
    assert list(info.member_list) == members and info.paxos_replica_number == 3
    assert info.role == obrpc_pb2.FOLLOWER and info.in_service
    assert (info.data_size, info.replica_type) == (SMALL, "FULL")
    assert info.required_size == SMALL + 24 and info.log_end_index == 0
    rdir = data / "replicas" / f"{T}_{LS}"
    assert (rdir / "data").stat().st_size == SMALL
    assert info.data_checksum == zlib.crc32((rdir / "data").read_bytes())
    meta = json.loads((rdir / "meta.json").read_text())
    assert {k: meta[k] for k in ("unit_id", "leader", "term", "paxos_replica_number")} == {
        "unit_id": 7,
        "leader": members[1],
        "term": 3,
        "paxos_replica_number": 3,
    }
    assert meta["member_list"] == members and meta["replica_type"] == "FULL"
    assert (data / "clog" / f"{T}_{LS}" / "log").exists()
    assert not list(rdir.glob(".*"))

    # Restart: loaded from disk, not in service until verified; a damaged data file is
    # rebuilt (identical), an unfinished creation is removed.
    (rdir / "data").write_bytes(b"garbage")
    (data / "replicas" / "1001_2").mkdir()
    agent = Agent(settings(data), clock)
    assert agent.replicas.keys() == [KEY]
    assert not (data / "replicas" / "1001_2").exists()
    before = agent.build_lease_request().replicas[0]
    assert not before.in_service and before.term == 3

    async def restart() -> obrpc_pb2.ReplicaInfo:
        stop = asyncio.Event()
        task = asyncio.ensure_future(agent.run(stop))
        try:
            await wait_until(lambda: agent.replicas.report()[0].in_service, "verification")
            return agent.build_lease_request().replicas[0]
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    after = run(restart())
    assert after.in_service and after.data_checksum == info.data_checksum
    assert (rdir / "data").stat().st_size == SMALL
    assert zlib.crc32((rdir / "data").read_bytes()) == info.data_checksum


def test_drop_removes_files_and_lower_term_and_stale_epoch(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = Agent(settings(tmp_path / "data"), clock)
    members = ["127.0.0.1:3001", "127.0.0.1:3002"]
    now = clock.now_us()
    assert agent.handle_response(
        obrpc_pb2.LeaseResponse(
            lease_expire_time=now + 10_000_000,
            heartbeat_expire_time=now + 10_000_000,
            rs_epoch=5,
            cluster_id="c",
            server_id=1,
        ),
        "127.0.0.1:2882",
    )

    async def scenario() -> None:
        m = agent.replicas
        try:
            stale = await m.apply(upsert(spec(members, "", 2), epoch=4), agent.highest_epoch)
            assert stale.error.name == "OB_RS_NOT_MASTER" and "rs_epoch 4" in stale.error.message
            assert list(stale.replicas) == [] and m.keys() == []

            ok = await m.apply(upsert(spec(members, "", 2), epoch=5), agent.highest_epoch)
            assert ok.error.code == 0 and ok.replicas[0].term == 2

            low = await m.apply(upsert(spec(members, members[0], 1, unit_id=9), epoch=5), 5)
            assert low.error.code == 0
            assert (low.replicas[0].term, low.replicas[0].leader, low.replicas[0].unit_id) == (
                2,
                "",
                7,
            )
            refused = await m.apply(drop(epoch=4), 5)
            assert refused.error.name == "OB_RS_NOT_MASTER" and len(refused.replicas) == 1

            bad = await m.apply(upsert(spec(["nonsense"], "", 3)), 0)
            assert bad.error.name == "OB_INVALID_ARGUMENT"
            assert f"tenant {T} ls {LS}" in bad.error.message

            gone = await m.apply(drop(epoch=6), 5)
            assert gone.error.code == 0 and list(gone.replicas) == [] and m.keys() == []
            again = await m.apply(drop(epoch=6), 5)  # dropping an absent replica is a no-op
            assert again.error.code == 0
        finally:
            await m.stop()

    run(scenario())
    assert not (tmp_path / "data" / "replicas" / f"{T}_{LS}").exists()
    assert not (tmp_path / "data" / "clog" / f"{T}_{LS}").exists()
    assert list(agent.build_lease_request().replicas) == []


# ---------------------------------------------------------------- over gRPC


def test_three_agents_leader_appends_followers_catch_up_and_switch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with nodes(tmp_path, 3) as (a, b, c):
            members = sorted(n.addr for n in (a, b, c))
            for n in (a, b, c):
                resp = await n.apply(upsert(spec(members, a.addr, 1)))
                assert resp.error.code == 0, resp.error
            assert {n.report().data_checksum for n in (a, b, c)} == {a.report().data_checksum}
            assert a.report().role == obrpc_pb2.LEADER and b.report().role == obrpc_pb2.FOLLOWER

            await wait_until(lambda: min(end_index(b), end_index(c)) >= 10, "followers at 10")
            upto = min(end_index(b), end_index(c))
            assert entries(b, upto) == entries(c, upto) == entries(a, upto)
            assert [e[0] for e in entries(a, upto)] == list(range(1, upto + 1))
            assert {e[1] for e in entries(a, upto)} == {1}
            info = b.report()
            assert info.log_end_index == upto or info.log_end_index > upto
            assert info.log_end_ts == entries(b)[-1][2] and info.term == 1
            assert info.required_size == info.data_size + 24 * (1 + info.log_end_index)

            # The leader refuses followers that claim a newer term; a follower refuses all.
            r = await a.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(tenant_id=T, ls_id=LS, from_index=1, term=2), timeout=5
            )
            assert r.error.name == "OB_NOT_MASTER" and (r.term, r.leader) == (1, a.addr)
            r = await c.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(
                    tenant_id=T, ls_id=LS, from_index=1, term=1, follower=b.addr
                ),
                timeout=5,
            )
            assert r.error.name == "OB_NOT_MASTER"
            r = await a.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(
                    tenant_id=T, ls_id=LS, from_index=3, max_entries=2, term=1
                ),
                timeout=5,
            )
            assert r.error.code == 0 and [e.index for e in r.entries] == [3, 4]

            # b stops fetching and falls behind.
            (b.agent.data_dir / FAULT_REPLICATION_STOP_FILE).touch()
            await asyncio.sleep(0.3)  # > one poll: the switch file has been seen
            stuck = end_index(b)
            await wait_until(lambda: end_index(a) >= stuck + 8, "the leader to go on")
            assert end_index(b) == stuck
            assert a.report().log_end_ts - b.report().log_end_ts >= 7 * 50_000 * 0.9

            # Leader switch a -> b, demoting a first: a's answer tells its final end.
            demoted = await a.apply(upsert(spec(members, b.addr, 2)))
            assert demoted.error.code == 0
            final = demoted.replicas[0].log_end_index
            assert demoted.replicas[0].role == obrpc_pb2.FOLLOWER and final > stuck
            promoted = await b.apply(
                upsert(spec(members, b.addr, 2, catch_up_index=final, catch_up_from=a.addr))
            )
            assert promoted.error.code == 0, promoted.error
            p = promoted.replicas[0]
            assert (p.role, p.term, p.leader) == (obrpc_pb2.LEADER, 2, b.addr)
            assert p.log_end_index >= final
            assert entries(b, final) == entries(a, final)  # nothing acknowledged was lost
            assert (await c.apply(upsert(spec(members, b.addr, 2)))).error.code == 0
            (b.agent.data_dir / FAULT_REPLICATION_STOP_FILE).unlink()  # b is leader now anyway

            await wait_until(
                lambda: min(end_index(a), end_index(c)) >= final + 10, "everyone past the switch"
            )
            upto = min(end_index(a), end_index(c))
            assert entries(a, upto) == entries(b, upto) == entries(c, upto)
            terms = [e[1] for e in entries(b, upto)]
            assert terms == sorted(terms) and terms[-1] == 2 and terms[0] == 1
            assert all(n.report().term == 2 and n.report().leader == b.addr for n in (a, b, c))

            # A spec with a lower term is ignored.
            old = await b.apply(upsert(spec(members, a.addr, 1)))
            assert old.error.code == 0 and (old.replicas[0].term, old.replicas[0].leader) == (
                2,
                b.addr,
            )

            # Leaderless: nobody appends.
            for n in (a, b, c):
                assert (await n.apply(upsert(spec(members, "", 3)))).error.code == 0
            await asyncio.sleep(0.1)
            frozen = [end_index(n) for n in (a, b, c)]
            await asyncio.sleep(0.3)
            assert [end_index(n) for n in (a, b, c)] == frozen

            # Drop on c: its files go, the others keep theirs.
            gone = await c.apply(drop())
            assert gone.error.code == 0 and list(gone.replicas) == []
            assert not (c.agent.data_dir / "replicas" / f"{T}_{LS}").exists()
            assert not (c.agent.data_dir / "clog" / f"{T}_{LS}").exists()
            assert a.agent.replicas.keys() == [KEY]

    run(scenario())


def test_promoted_before_old_leader_is_told_old_leader_converges(tmp_path: Path) -> None:
    """The RS tells the new leader first: the old one appends a few more entries at the old
    term, which differ from the new leader's; once it follows, they are replaced."""

    async def scenario() -> None:
        async with nodes(tmp_path, 2) as (a, b):
            members = sorted([a.addr, b.addr])
            for n in (a, b):
                assert (await n.apply(upsert(spec(members, a.addr, 1)))).error.code == 0
            await wait_until(lambda: end_index(b) >= 5, "b following a")
            known = a.report().log_end_index
            promoted = await b.apply(
                upsert(spec(members, b.addr, 2, catch_up_index=known, catch_up_from=a.addr))
            )
            assert promoted.error.code == 0 and promoted.replicas[0].log_end_index >= known
            switch = end_index(b)
            await wait_until(lambda: end_index(a) >= switch + 4, "a diverging at term 1")
            await wait_until(lambda: end_index(b) >= switch + 2, "b appending at term 2")
            assert entries(a)[switch][1] == 1 and entries(b)[switch][1] == 2
            assert (await a.apply(upsert(spec(members, b.addr, 2)))).error.code == 0
            await wait_until(
                lambda: end_index(a) >= switch + 8 and entries(a)[switch][1] == 2,
                "a converging on b's log",
            )
            upto = min(end_index(a), end_index(b))
            assert entries(a, upto) == entries(b, upto)
            assert entries(a, switch) == entries(b, switch)

    run(scenario())


def test_catch_up_that_cannot_finish_answers_ob_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with nodes(tmp_path, 1, rpc_timeout="300ms") as (a,):
            dead = f"127.0.0.1:{free_port()}"
            members = sorted([a.addr, dead])
            assert (await a.apply(upsert(spec(members, dead, 1)))).error.code == 0
            resp = await a.apply(
                upsert(spec(members, a.addr, 2, catch_up_index=50, catch_up_from=dead))
            )
            assert resp.error.name == "OB_TIMEOUT"
            assert f"tenant {T} ls {LS}" in resp.error.message and dead in resp.error.message
            r = resp.replicas[0]
            assert (r.term, r.leader, r.role, r.log_end_index) == (
                1,
                dead,
                obrpc_pb2.FOLLOWER,
                0,
            )
            nosrc = await a.apply(upsert(spec(members, a.addr, 2, catch_up_index=50)))
            assert nosrc.error.name == "OB_TIMEOUT" and "no catch_up_from" in nosrc.error.message
            # Without anything to catch up it leads at once.
            lead = await a.apply(upsert(spec(members, a.addr, 2)))
            assert lead.error.code == 0 and lead.replicas[0].role == obrpc_pb2.LEADER
            await wait_until(lambda: end_index(a) >= 3, "the leader appending")
            # Its report is in every lease request.
            [hb] = a.agent.build_lease_request().replicas
            assert (hb.role, hb.term, hb.leader) == (obrpc_pb2.LEADER, 2, a.addr)
            assert hb.log_end_index >= 3 and hb.log_end_ts > 0

    run(scenario())


def test_replication_delay_fault_gives_a_steady_lag(tmp_path: Path) -> None:
    delay_ms = 400

    async def scenario() -> None:
        async with nodes(tmp_path, 2) as (a, b):
            members = sorted([a.addr, b.addr])
            (b.agent.data_dir / FAULT_REPLICATION_DELAY_FILE).write_text(f"{delay_ms}\n")
            for n in (a, b):
                assert (await n.apply(upsert(spec(members, a.addr, 1)))).error.code == 0
            await wait_until(lambda: end_index(b) >= 5, "b following with a delay", 15)
            clock = SystemClock()
            lags, leads = [], []
            for _ in range(10):
                await asyncio.sleep(0.1)
                lags.append(clock.now_us() - b.report().log_end_ts)
                leads.append(a.report().log_end_ts - b.report().log_end_ts)
            # Never fresher than the delay; about the delay (polls and appends add < 300 ms
            # on an idle machine, the bound is generous).
            assert min(lags) >= delay_ms * 1000
            assert statistics.median(lags) < (delay_ms + 1000) * 1000
            assert statistics.median(leads) >= (delay_ms - 100) * 1000
            (b.agent.data_dir / FAULT_REPLICATION_DELAY_FILE).unlink()
            await wait_until(
                lambda: a.report().log_end_ts - b.report().log_end_ts < delay_ms * 1000 // 2,
                "the lag to shrink",
            )

    run(scenario())


def test_merge_fetched_truncates_divergence_rebases_and_applies_the_cutoff(
    tmp_path: Path,
) -> None:
    def log_with(terms: list[int], name: str) -> ReplicaLog:
        log = ReplicaLog.open(tmp_path / name / "log")
        log.append([(i + 1, t, 100 * (i + 1) + t) for i, t in enumerate(terms)])
        return log

    def leader(terms: list[int]) -> list[tuple[int, int, int]]:
        return [(i, t, 100 * i + t) for i, t in enumerate(terms, start=1)]

    # A follower that took entries 4..5 at term 1 while the leader has 4.. at term 2.
    theirs = [1, 1, 1, 2, 2, 2]
    f = log_with([1, 1, 1, 1, 1], "a")
    assert merge_fetched(f, leader(theirs), 1, 6, True, None) == (True, 3)
    assert f.entries == leader(theirs)
    assert ReplicaLog.open(tmp_path / "a" / "log").entries == f.entries

    # The window [3, 5] starts inside the divergence: cut it, look further back next time.
    g = log_with([1, 1, 1, 1, 1], "b")
    window = [e for e in leader([1, 1, 2, 2, 2, 2]) if e[0] >= 3]
    assert merge_fetched(g, window, 3, 6, True, None) == (False, 0)
    assert g.end_index == 2
    assert merge_fetched(g, leader([1, 1, 2, 2, 2, 2]), 1, 6, True, None) == (True, 4)
    assert g.entries == leader([1, 1, 2, 2, 2, 2])

    # Ahead of a new leader whose log is shorter: cut to its end.
    h = log_with([1, 1, 1, 1, 1], "c")
    assert merge_fetched(h, leader([1, 1, 1]), 1, 3, True, None) == (True, 0)
    assert h.end_index == 3

    # The leader compacted what we miss: restart after its base.
    k = log_with([1, 1], "d")
    assert merge_fetched(k, leader([1] * 12)[9:], 3, 12, False, None) == (True, 3)
    assert (k.base_index, k.end_index, k.entry(10)) == (9, 12, (10, 1, 1001))

    # Only entries at least as old as the cutoff are applied.
    m = log_with([], "e")
    assert merge_fetched(m, leader([1, 1, 1, 1]), 1, 4, False, 250) == (True, 2)
    assert m.end_index == 2
