"""The agent's side of the lag detector: the applied command number every
lease request reports, the apply freeze (answered, not applied), ``DumpStacks`` showing where
a frozen command waits, and the disk probe's latency with the slow-fsync switch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import grpc

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from observer_agent.agent import Agent
from observer_agent.commands import AppliedCommands, dump_stacks
from observer_agent.disk import FAULT_FSYNC_SLOW_FILE
from observer_agent.replicas.faults import FAULT_APPLY_FREEZE_FILE
from observer_agent.service import create_server
from tests.support.timescale import scaled
from tests.unit.observer_agent.helpers import make_settings
from tests.unit.observer_agent.test_service import in_process_agent


async def _until(cond: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_commands_are_reported_applied_and_a_freeze_holds_them(tmp_path: Path) -> None:
    agent = in_process_agent(tmp_path, FakeClock())
    freeze = agent.data_dir / FAULT_APPLY_FREEZE_FILE

    def applied() -> int:
        return agent.build_lease_request().applied_command_seq

    async def scenario() -> None:
        server, port = await create_server(agent, "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
                await stub.RequestHeartbeat(obrpc_pb2.RequestHeartbeatRequest(command_seq=5))
                await _until(lambda: applied() == 5, "command 5 applied")
                freeze.touch()
                # Frozen: the call is still answered (heartbeats go on), the command waits.
                hb = await stub.RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(command_seq=9), timeout=5
                )
                assert hb.server == agent.server
                dump = await stub.DumpStacks(obrpc_pb2.DumpStacksRequest(), timeout=5)
                assert "hold_apply" in dump.event_loop
                assert any(t.name == "MainThread" for t in dump.threads)
                assert applied() == 5
                freeze.unlink()
                await _until(lambda: applied() == 9, "command 9 applied once thawed")
        finally:
            await server.stop(None)

    asyncio.run(asyncio.wait_for(scenario(), scaled(20)))


def test_applied_commands_keep_the_highest() -> None:
    a = AppliedCommands()
    a.applied(7)
    a.applied(3)
    a.applied(0)
    assert a.highest == 7


def test_a_dump_names_each_thread_and_the_chain_a_task_waits_in() -> None:
    async def inner() -> None:
        await asyncio.sleep(10)

    async def outer() -> None:
        await inner()

    async def scenario() -> obrpc_pb2.DumpStacksResponse:
        t = asyncio.ensure_future(outer())
        await asyncio.sleep(0)
        try:
            return dump_stacks()
        finally:
            t.cancel()

    dump = asyncio.run(scenario())
    block = next(b for b in dump.event_loop.split("Stack for ") if "in outer" in b)
    assert block.index("in outer") < block.index("in inner") < block.index("in sleep")
    assert {t.name for t in dump.threads} >= {"MainThread"}


def test_the_probe_latency_grows_while_it_runs_and_the_slow_fsync_switch_adds_to_it(
    tmp_path: Path,
) -> None:
    agent = Agent(make_settings(tmp_path), FakeClock())
    (agent.data_dir / FAULT_FSYNC_SLOW_FILE).write_text("50")
    assert agent.probe_disk_now()
    assert agent.disk.last_latency_us >= 50_000  # the switch sleeps 50 ms after the fsync
    assert agent.build_lease_request().disk_probe_latency_us >= 50_000

    release = threading.Event()
    started = threading.Event()

    def hung(data_dir: Path) -> str | None:
        started.set()
        release.wait(10)
        return None

    slow = Agent(make_settings(tmp_path / "b"), FakeClock(), disk_probe=hung)

    async def scenario() -> None:
        probe = asyncio.ensure_future(slow.probe_disk_async())
        await _until(started.is_set, "the probe started")
        first = slow.disk.probe_latency_us
        await _until(lambda: slow.disk.probe_latency_us > first, "the latency grows")
        release.set()
        assert await probe

    try:
        asyncio.run(asyncio.wait_for(scenario(), scaled(20)))
    finally:
        release.set()
