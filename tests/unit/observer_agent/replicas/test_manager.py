"""The ReplicaManager (observer_agent.replicas.manager): replicas created by ApplyReplicas,
reloaded and verified after a restart."""

from __future__ import annotations

import asyncio
import json
import shutil
import zlib
from pathlib import Path

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2
from observer_agent.agent import Agent
from tests.support.timescale import scaled
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import KEY, LS, SMALL, T, settings, spec, upsert


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
            await asyncio.wait_for(task, scaled(10))

    after = run(restart())
    assert after.in_service and after.data_checksum == info.data_checksum
    assert (rdir / "data").stat().st_size == SMALL
    assert zlib.crc32((rdir / "data").read_bytes()) == info.data_checksum


def test_a_replica_whose_files_vanish_under_the_running_agent_is_forgotten(
    tmp_path: Path,
) -> None:
    """A replica's files removed: ``rm -r DATA_DIR/replicas/<ls>`` while the agent runs. Reporting the
    replica from memory would hide the loss from the RS: the files check forgets it (its log
    goes too) and the report no longer lists it; an intact replica is left alone."""
    clock = FakeClock()
    data = tmp_path / "data"
    members = ["127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"]

    async def scenario() -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int]]:
        agent = Agent(settings(data), clock)
        try:
            resp = await agent.replicas.apply(upsert(spec(members, members[1], 3)), 0)
            assert resp.error.code == 0 and resp.replicas[0].in_service
            untouched = await agent.replicas.check_files()
            shutil.rmtree(data / "replicas" / f"{T}_{LS}")
            gone = await agent.replicas.check_files()
            return untouched, gone, [r.ls_id for r in agent.build_lease_request().replicas]
        finally:
            await agent.replicas.stop()

    untouched, gone, reported = run(scenario())
    assert untouched == [] and gone == [KEY] and reported == []
    assert not (data / "clog" / f"{T}_{LS}").exists()
    # A restart finds nothing to load either.
    assert Agent(settings(data), clock).replicas.keys() == []


def test_the_report_says_where_the_kept_log_starts(tmp_path: Path) -> None:
    """``log_base_index``: the last entry the replica no longer keeps (GV$OB_LOG_STAT's
    BEGIN_LSN on the RS), 0 before any compaction."""
    clock = FakeClock()
    members = ["127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"]

    async def go() -> tuple[obrpc_pb2.ReplicaInfo, obrpc_pb2.ReplicaInfo]:
        agent = Agent(settings(tmp_path / "data"), clock)
        try:
            await agent.replicas.apply(upsert(spec(members, members[1], 3)), 0)
            rep = agent.replicas.get(T, LS)
            assert rep is not None
            rep.log.keep = 4  # compacted at 8 entries: not by these appends
            rep.log.append([(i, 3, i) for i in range(1, 8)])
            before = rep.info(members[0])
            rep.log.compact()
            return before, rep.info(members[0])
        finally:
            await agent.replicas.stop()

    before, after = run(go())
    assert (before.log_base_index, before.log_end_index) == (0, 7)
    assert (after.log_base_index, after.log_end_index) == (3, 7)


def test_lease_requests_and_apply_answers_number_their_reports_in_order(tmp_path: Path) -> None:
    """Both RPCs carry the agent's replica report with one counter (replicas_version): the
    RS ignores a lease request numbered below an ApplyReplicas answer it took."""
    clock = FakeClock()
    members = ["127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"]

    async def steps() -> list[int]:
        agent = Agent(settings(tmp_path / "data"), clock)
        try:
            before = agent.build_lease_request()
            answer = await agent.replicas.apply(upsert(spec(members, members[1], 3)), 0)
            after = agent.build_lease_request()
            assert not before.replicas and len(answer.replicas) == len(after.replicas) == 1
            return [before.replicas_version, answer.replicas_version, after.replicas_version]
        finally:
            await agent.replicas.stop()

    assert run(steps()) == [1, 2, 3]
