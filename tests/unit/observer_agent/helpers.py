"""Shared helpers of the observer agent's unit tests: an agent on a FakeClock with hand-made
lease responses, and polling / running coroutines."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from obcommon.clock import FakeClock
from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2
from observer_agent.agent import Agent
from observer_agent.settings import AgentSettings
from tests.support.timescale import scale, scaled

RS1 = "127.0.0.1:2882"


RS2 = "127.0.0.2:2882"


ME = "127.0.0.1:3882"
LEASE_US = 10_000_000


def make_settings(data_dir: Path, **over: object) -> AgentSettings:
    values: dict[str, object] = {
        "rs_list": f"{RS1},{RS2}",
        "rpc_addr": ME,
        "sql_port": 3881,
        "zone": "z1",
        "data_dir": data_dir,
    }
    values.update(over)
    return AgentSettings.in_process(**values)


def make_agent(tmp_path: Path, clock: FakeClock | None = None, **over: object) -> Agent:
    return Agent(make_settings(tmp_path / "data", **over), clock or FakeClock())


def ok_response(
    clock: FakeClock,
    *,
    expire_delta: int = LEASE_US,
    epoch: int = 1,
    server_id: int = 5,
    cluster_id: str = "cluster-a",
    status: obrpc_pb2.RsServerStatus.ValueType = obrpc_pb2.IS_WORKING,
    rs_list: list[str] | None = None,
) -> obrpc_pb2.LeaseResponse:
    now = clock.now_us()
    return obrpc_pb2.LeaseResponse(
        version=1,
        lease_expire_time=now + expire_delta,
        heartbeat_expire_time=now + expire_delta,
        server_id=server_id,
        rs_server_status=status,
        rs_epoch=epoch,
        rs_list=rs_list or [],
        cluster_id=cluster_id,
    )


def refusal(name: str, *, epoch: int = 0, leader_hint: str = "") -> obrpc_pb2.LeaseResponse:
    resp = obrpc_pb2.LeaseResponse(rs_epoch=epoch, leader_hint=leader_hint)
    error_to_proto(ObError(name, detail=f"server {ME}"), resp.error)
    return resp


POLL_S = 0.02


async def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` every 20 ms, at most ``timeout_s`` scaled by the run's wait factor
    (tests/support/timescale.py), and as many polls as fit in that."""
    limit_s = scaled(timeout_s)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    for _ in range(math.ceil(limit_s / POLL_S) + 1):
        if cond():
            return
        if loop.time() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    raise AssertionError(
        f"timed out after {limit_s:.1f}s ({timeout_s}s x {scale():g}) waiting for {what}"
    )


def run(coro: Any, timeout_s: float = 30) -> Any:
    """Run ``coro`` to its end, cancelled after ``timeout_s`` scaled by the run's wait
    factor."""
    return asyncio.run(asyncio.wait_for(coro, scaled(timeout_s)))
