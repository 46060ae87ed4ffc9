"""The observer agent over real gRPC: its ObserverService and health service in-process,
its lease loop against RS addresses where nothing listens, and the ``observer-agent``
process itself (start, busy loop, SIGTERM)."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from obcommon.clock import FakeClock, SystemClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from observer_agent.agent import Agent
from observer_agent.service import OBSERVER_SERVICE_NAME, create_server, start_server, stop_server
from observer_agent.settings import AgentSettings
from tests.support import pki
from tests.support.ports import free_port
from tests.support.timescale import scaled

REPO = Path(__file__).resolve().parents[3]


def in_process_agent(tmp_path: Path, clock: object, **over: object) -> Agent:
    values: dict[str, object] = {
        "rs_list": f"127.0.0.1:{free_port()}",
        "rpc_addr": "127.0.0.1:0",
        "sql_port": 2881,
        "zone": "z1",
        "data_dir": tmp_path / "data",
    }
    values.update(over)
    return Agent(AgentSettings.in_process(**values), clock)  # type: ignore[arg-type]


def test_observer_service_and_health_over_grpc(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = in_process_agent(tmp_path, clock)

    async def scenario() -> None:
        server, port = await create_server(agent, "127.0.0.1:0")
        await server.start()
        agent.mark_serving()
        try:
            assert port > 0 and agent.server == f"127.0.0.1:{port}"
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
                empty = await stub.CheckServerEmpty(
                    obrpc_pb2.CheckServerEmptyRequest(rs_epoch=1), timeout=5
                )
                assert empty.is_empty is True
                assert (empty.zone, empty.server, empty.cluster_id, empty.server_id) == (
                    "z1",
                    f"127.0.0.1:{port}",
                    "",
                    0,
                )

                hb = await stub.RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(rs_epoch=1), timeout=5
                )
                assert (hb.version, hb.zone, hb.server, hb.sql_port) == (
                    1,
                    "z1",
                    f"127.0.0.1:{port}",
                    2881,
                )
                assert hb.current_server_time == clock.now_us()
                assert hb.build_version and hb.seq > 0
                assert hb.start_service_time == 0

                # An RS accepts it: identity written, service started.
                now = clock.now_us()
                resp = obrpc_pb2.LeaseResponse(
                    lease_expire_time=now + 10_000_000,
                    heartbeat_expire_time=now + 10_000_000,
                    server_id=42,
                    rs_server_status=obrpc_pb2.IS_WORKING,
                    rs_epoch=3,
                    cluster_id="cluster-x",
                )
                assert agent.handle_response(resp, "127.0.0.1:2882")
                full = await stub.CheckServerEmpty(
                    obrpc_pb2.CheckServerEmptyRequest(rs_epoch=3), timeout=5
                )
                assert (full.is_empty, full.cluster_id, full.server_id, full.zone) == (
                    False,
                    "cluster-x",
                    42,
                    "z1",
                )
                hb2 = await stub.RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(rs_epoch=3), timeout=5
                )
                assert (hb2.cluster_id, hb2.rs_epoch, hb2.start_service_time) == (
                    "cluster-x",
                    3,
                    now,
                )
                assert hb2.seq > hb.seq

                health = health_pb2_grpc.HealthStub(ch)
                for name in ("", OBSERVER_SERVICE_NAME):
                    r = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                    assert r.status == health_pb2.HealthCheckResponse.SERVING
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await health.Check(
                        health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5
                    )
                assert exc.value.code() == grpc.StatusCode.NOT_FOUND

                await agent.health.enter_graceful_shutdown()
                r = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                assert r.status == health_pb2.HealthCheckResponse.NOT_SERVING
        finally:
            await server.stop(None)

    asyncio.run(asyncio.wait_for(scenario(), scaled(20)))


def test_second_agent_on_the_same_port_fails_to_bind(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = in_process_agent(tmp_path / "a", FakeClock())
        server, port = await start_server(first, "127.0.0.1:0")
        try:
            second = in_process_agent(tmp_path / "b", FakeClock(), rpc_addr=f"127.0.0.1:{port}")
            with pytest.raises((RuntimeError, OSError)):
                await create_server(second, f"127.0.0.1:{port}")
        finally:
            await stop_server(first, server, 0)

    asyncio.run(asyncio.wait_for(scenario(), scaled(20)))


def test_lease_loop_round_robins_dead_rs_addresses_and_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    agent = in_process_agent(
        tmp_path,
        SystemClock(),
        rs_list=",".join(dead),
        heartbeat_interval="50ms",
        rpc_timeout="500ms",
        disk_probe_interval="20ms",
    )

    async def scenario() -> bool:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        deadline = time.monotonic() + scaled(10)
        while time.monotonic() < deadline:
            failed = [
                r.getMessage() for r in caplog.records if "cannot get a lease" in r.getMessage()
            ]
            # Each address tried more than once (the repeats are counted, not logged).
            rl = agent.lease.repeat_log
            if all(any(a in m for m in failed) for a in dead) and all(
                rl.suppressed(f"unreachable {a}") >= 1 for a in dead
            ):
                break
            await asyncio.sleep(0.05)
        # A fault injected while running is picked up by the periodic probe.
        (agent.data_dir / "FAULT_DATA_DISK_ERROR").touch()
        while time.monotonic() < deadline and agent.server_status == 0:
            await asyncio.sleep(0.02)
        assert agent.server_status == 1
        stop.set()
        # The stop is taken while the lease attempts keep failing (a hang would time out).
        await asyncio.wait_for(task, scaled(5))
        return task.done() and task.exception() is None

    with caplog.at_level(logging.INFO, logger="observer_agent"):
        stopped = asyncio.run(asyncio.wait_for(scenario(), scaled(20)))
    failed = [r.getMessage() for r in caplog.records if "cannot get a lease" in r.getMessage()]
    assert len(failed) == 2  # one line per address per minute (the rate limit)
    for addr in dead:
        assert any(addr in m and "UNAVAILABLE" in m for m in failed)
    assert agent.accepted_count == 0 and agent.identity is None
    assert agent.resource_info.cpu_total > 0  # refreshed before the first attempt
    assert stopped


class _LineReader:
    """Collects a pipe's lines in a thread so the test can wait with a deadline."""

    def __init__(self, pipe: object) -> None:
        self.lines: list[str] = []
        self._q: queue.Queue[str] = queue.Queue()
        self._t = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._t.start()

    def _pump(self, pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            self._q.put(line)

    def wait_for(self, pred: object, timeout: float) -> bool:
        deadline = time.monotonic() + scaled(timeout)
        while True:
            while not self._q.empty():
                self.lines.append(self._q.get_nowait())
            if pred(self.lines):  # type: ignore[operator]
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def _agent_cmd() -> list[str]:
    return [sys.executable, "-m", "observer_agent.cli"]


def test_observer_agent_process_busy_loops_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    rs = f"127.0.0.1:{free_port()}"
    rpc_port = free_port()
    data = tmp_path / "data"
    cmd = [
        *_agent_cmd(),
        "--rs-list",
        rs,
        "--rpc-addr",
        f"127.0.0.1:{rpc_port}",
        "--sql-port",
        "2881",
        "--zone",
        "z1",
        "--data-dir",
        str(data),
        "--heartbeat-interval",
        "100ms",
        "--rpc-timeout",
        "1s",
        "--certs-dir",
        str(pki.certs_dir(Role.NODE, f"127.0.0.1:{rpc_port}")),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OB_AGENT_")}
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        reader = _LineReader(proc.stderr)
        # Logged once a minute however often it retries (the rate limit).
        ok = reader.wait_for(lambda ls: any("cannot get a lease from " + rs in x for x in ls), 15)
        assert ok, "no connection failures logged:\n" + "".join(reader.lines)
        assert proc.poll() is None  # still busy looping

        # Its gRPC server is up meanwhile (mutual TLS): a client certificate may not ask it...
        with (
            pki.channel(f"127.0.0.1:{rpc_port}", Role.CLIENT, "root") as ch,
            pytest.raises(grpc.RpcError) as refused,
        ):
            obrpc_pb2_grpc.ObserverServiceStub(ch).CheckServerEmpty(
                obrpc_pb2.CheckServerEmptyRequest(), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "needs a rs certificate" in (refused.value.details() or "")
        assert "client 'root'" in (refused.value.details() or "")
        # ...the RS could ADD SERVER it.
        with pki.channel(f"127.0.0.1:{rpc_port}", Role.RS, rs) as ch:
            empty = obrpc_pb2_grpc.ObserverServiceStub(ch).CheckServerEmpty(
                obrpc_pb2.CheckServerEmptyRequest(), timeout=5
            )
            health = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
        assert empty.is_empty and empty.server == f"127.0.0.1:{rpc_port}" and empty.zone == "z1"
        assert health.status == health_pb2.HealthCheckResponse.SERVING

        line = next(x for x in reader.lines if "cannot get a lease" in x)
        # The shared format (obcommon/logs.py): UTC time with microseconds, the level, the
        # component and the server address.
        assert re.match(
            rf"^\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{6}}Z WARNING agent 127\.0\.0\.1:{rpc_port} ",
            line,
        )

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        reader.wait_for(lambda ls: any("stopped" in x for x in ls), 2)
        assert any("stopped" in x for x in reader.lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_observer_agent_console_script_refuses_bad_flags(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "observer-agent"
    assert script.exists(), f"console script missing: {script}"
    r = subprocess.run(
        [
            str(script),
            "--rs-list",
            "127.0.0.1:2882",
            "--rpc-addr",
            "127.0.0.1:70000",
            "--sql-port",
            "2881",
            "--zone",
            "z1",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("observer-agent: error: ") and "70000" in r.stderr
    assert r.stderr.count("\n") == 1


def _offline_agent_args(data_dir: Path) -> list[str]:
    """An agent command line with no RS behind it and no security flag yet."""
    return [
        *_agent_cmd(),
        "--rs-list",
        "127.0.0.1:2882",
        "--rpc-addr",
        f"127.0.0.1:{free_port()}",
        "--sql-port",
        "2881",
        "--zone",
        "z1",
        "--data-dir",
        str(data_dir),
    ]


def test_observer_agent_refuses_to_start_on_a_corrupt_identity(tmp_path: Path) -> None:
    (tmp_path / "identity.json").write_text("{")
    r = subprocess.run(
        [*_offline_agent_args(tmp_path), "--insecure"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1
    assert "malformed identity file" in r.stderr


def test_observer_agent_refuses_to_start_without_certs_dir_or_insecure(tmp_path: Path) -> None:
    base = _offline_agent_args(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OB_AGENT_")}
    r = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--certs-dir" in r.stderr and "--insecure" in r.stderr
    both = [*base, "--insecure", "--certs-dir", str(tmp_path)]
    r = subprocess.run(both, cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "exclude each other" in r.stderr
    empty = tmp_path / "no-certs"
    empty.mkdir()
    r = subprocess.run(
        [*base, "--certs-dir", str(empty)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "cannot read" in r.stderr and "ca.crt" in r.stderr


def test_replica_data_and_log_are_served_to_members_and_announced_learners(
    tmp_path: Path,
) -> None:
    """FetchData / FetchLog answer the RS, the LS's members and the learners the RS
    announced (copies in flight), no other node: a learner taken off the list is refused
    again."""
    port = free_port()
    me, other = f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"
    agent = in_process_agent(
        tmp_path,
        SystemClock(),
        rpc_addr=me,
        certs_dir=pki.certs_dir(Role.NODE, me),
        replica_size=64 * 1024,
    )

    def spec(learners: list[str]) -> obrpc_pb2.ApplyReplicasRequest:
        return obrpc_pb2.ApplyReplicasRequest(
            rs_epoch=1,
            upsert=[
                obrpc_pb2.ReplicaSpec(
                    tenant_id=1001,
                    ls_id=1,
                    unit_id=1,
                    replica_type="FULL",
                    member_list=[me],
                    paxos_replica_number=1,
                    leader=me,
                    term=1,
                    learner_list=learners,
                )
            ],
        )

    async def fetch_data(role: Role, name: str) -> grpc.StatusCode | int:
        sec = pki.security(role, name)
        async with sec.aio_channel(me) as ch:
            try:
                call = obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchData(
                    obrpc_pb2.FetchDataRequest(tenant_id=1001, ls_id=1), timeout=5
                )
                first = await call.read()
                return int(first.total_size)
            except grpc.aio.AioRpcError as e:
                return e.code()

    async def fetch_log(name: str, follower: str | None = None) -> grpc.StatusCode | int:
        async with pki.security(Role.NODE, name).aio_channel(me) as ch:
            try:
                resp = await obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchLog(
                    obrpc_pb2.FetchLogRequest(
                        tenant_id=1001,
                        ls_id=1,
                        from_index=1,
                        max_entries=1,
                        follower=follower or name,
                    ),
                    timeout=5,
                )
                return int(resp.error.code)
            except grpc.aio.AioRpcError as e:
                return e.code()

    async def scenario() -> None:
        server, _ = await create_server(agent, me)
        await server.start()
        agent.mark_serving()
        try:
            async with pki.security(Role.RS, "127.0.0.1:1").aio_channel(me) as ch:
                rs = obrpc_pb2_grpc.ObserverServiceStub(ch)
                # The answer names the agent's run, so the RS can tell a restarted agent's
                # numbers from the previous run's.
                agent.lease.start_service_time = 1_767_225_600_000_000
                first = await rs.ApplyReplicas(spec([]), timeout=10)
                assert not first.error.code and first.replicas_version > 0
                assert first.start_service_time == 1_767_225_600_000_000
                denied = grpc.StatusCode.PERMISSION_DENIED
                # not a member, not announced: refused; the RS is always served
                assert await fetch_data(Role.NODE, other) == denied
                assert await fetch_log(other) == denied
                assert await fetch_data(Role.RS, "127.0.0.1:1") == 64 * 1024
                # announced as a learner: served
                assert not (await rs.ApplyReplicas(spec([other]), timeout=10)).error.code
                assert agent.replicas.allowed_peers(1001, 1) == {me, other}
                assert await fetch_data(Role.NODE, other) == 64 * 1024
                assert await fetch_log(other) == 0
                # ...for itself only: a learner fetching in another node's name is refused
                assert await fetch_log(other, follower=me) == denied
                # taken off the list (the copy ended or was cancelled): refused again
                assert not (await rs.ApplyReplicas(spec([]), timeout=10)).error.code
                assert await fetch_data(Role.NODE, other) == denied
                # a bad learner address is refused like a bad member
                bad = await rs.ApplyReplicas(spec(["not-an-address"]), timeout=10)
                assert bad.error.name == "OB_INVALID_ARGUMENT"
                assert agent.replicas.allowed_peers(1001, 1) == {me}
            assert agent.peer_gate.refused_total == {"not_member": 3, "wrong_name": 1}
        finally:
            await stop_server(agent, server)

    asyncio.run(scenario())
