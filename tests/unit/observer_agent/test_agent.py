"""Unit tests of the observer agent's decisions (SPEC.md section 5), driven by a FakeClock
and hand-made LeaseResponse messages: no network, no sleeping."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from obcommon.clock import FakeClock
from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2
from observer_agent import identity as identity_mod
from observer_agent.agent import Agent
from observer_agent.cli import main
from observer_agent.disk import (
    DATA_DISK_ERROR,
    DISK_PROBE_FILE,
    FAULT_DATA_DISK_ERROR_FILE,
    probe_data_disk,
)
from observer_agent.identity import (
    ClusterIdentity,
    IdentityError,
    identity_path,
    load_identity,
    write_identity,
)
from observer_agent.resources import collect_resource_info
from observer_agent.settings import DEFAULT_BUILD_VERSION, AgentSettings

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


# ---------------------------------------------------------------- acceptance


def test_heartbeat_expire_time_equal_to_now_is_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, expire_delta=0), RS1) is False
    assert agent.lease_expire_time == 0
    assert agent.identity is None
    assert agent.refused_count == 1


def test_heartbeat_expire_time_one_microsecond_after_now_is_accepted(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, expire_delta=1), RS1) is True
    assert agent.lease_expire_time == clock.now_us() + 1
    assert agent.server_id == 5
    assert agent.rs_server_status == obrpc_pb2.IS_WORKING
    assert agent.registered is True


def test_past_heartbeat_expire_time_is_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    resp = ok_response(clock)
    clock.advance(LEASE_US + 1)
    assert agent.handle_response(resp, RS1) is False


def test_lower_epoch_refused_equal_and_higher_accepted_highest_remembered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.highest_epoch == 5
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        assert not agent.handle_response(ok_response(clock, epoch=4), RS2)
    assert "rs_epoch 4 is lower than epoch 5" in caplog.text
    assert agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.handle_response(ok_response(clock, epoch=6), RS1)
    assert agent.highest_epoch == 6
    assert not agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.highest_epoch == 6
    assert agent.build_lease_request().rs_epoch == 6


def test_refusal_does_not_raise_the_epoch(tmp_path: Path) -> None:
    # An RS of another cluster (or a liar) must not be able to fence our own RS out.
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, epoch=2), RS1)
    assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST", epoch=99), RS2)
    assert agent.highest_epoch == 2
    assert agent.handle_response(ok_response(clock, epoch=2), RS1)


def test_refusal_is_logged_with_the_oceanbase_error_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(tmp_path)
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        for _ in range(3):
            assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = f"lease refused by {RS1}: ERROR 4630 (HY000): OB_SERVER_NOT_IN_WHITE_LIST: "
    assert len([m for m in lines if m.startswith(expected)]) == 3
    assert agent.last_refusal is not None and agent.last_refusal.code == -4630
    assert agent.registered is False


def test_round_robin_and_leader_hint(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    assert [agent.next_rs_address() for _ in range(3)] == [RS1, RS2, RS1]
    agent.handle_response(refusal("OB_RS_NOT_MASTER", leader_hint="10.9.9.9:2882"), RS1)
    assert agent.next_rs_address() == "10.9.9.9:2882"
    assert agent.next_rs_address() == RS2  # round robin goes on afterwards
    agent.handle_response(refusal("OB_RS_NOT_MASTER", leader_hint="garbage"), RS1)
    assert agent.next_rs_address() == RS1


def test_rs_list_from_response_is_adopted_with_ours_as_fallback(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, rs_list=["10.0.0.7:2882", "bad"]), RS1)
    assert agent.rs_list == ["10.0.0.7:2882", RS1, RS2]
    assert agent.handle_response(ok_response(clock, rs_list=[]), RS1)
    assert agent.rs_list == ["10.0.0.7:2882", RS1, RS2]


def test_rs_server_status_is_tracked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    agent.handle_response(ok_response(clock), RS1)
    with caplog.at_level(logging.INFO, logger="observer_agent"):
        agent.handle_response(ok_response(clock, status=obrpc_pb2.IS_STOPPED), RS1)
    assert agent.rs_server_status == obrpc_pb2.IS_STOPPED
    assert "IS_STOPPED (was IS_WORKING)" in caplog.text


# ---------------------------------------------------------------- identity


def test_identity_written_once_on_first_accept(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    path = identity_path(agent.data_dir)
    assert not path.exists()
    assert agent.check_server_empty().is_empty is True
    # An accepted response without ids does not make the server a member.
    assert agent.handle_response(ok_response(clock, server_id=0, cluster_id=""), RS1)
    assert not path.exists()
    assert agent.handle_response(ok_response(clock, server_id=5), RS1)
    assert json.loads(path.read_text()) == {
        "cluster_id": "cluster-a",
        "server_id": 5,
        "zone": "z1",
        "server": ME,
    }
    first_stat = path.stat()
    clock.advance(2_000_000)
    assert agent.handle_response(ok_response(clock, server_id=5), RS1)
    assert path.stat().st_mtime_ns == first_stat.st_mtime_ns
    assert path.stat().st_ino == first_stat.st_ino
    assert sorted(p.name for p in agent.data_dir.iterdir() if "identity" in p.name) == [
        "identity.json"
    ]
    empty = agent.check_server_empty()
    assert (empty.is_empty, empty.cluster_id, empty.server_id, empty.zone, empty.server) == (
        False,
        "cluster-a",
        5,
        "z1",
        ME,
    )
    assert agent.build_lease_request().cluster_id == "cluster-a"


def test_different_cluster_id_is_refused_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, cluster_id="cluster-a"), RS1)
    before = identity_path(agent.data_dir).read_text()
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        assert not agent.handle_response(ok_response(clock, cluster_id="cluster-b", epoch=9), RS2)
        assert not agent.handle_response(ok_response(clock, cluster_id="", epoch=1), RS2)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "'cluster-b'" in errors[0].getMessage()
    assert identity_path(agent.data_dir).read_text() == before
    assert agent.highest_epoch == 1  # the foreign RS's epoch was not learnt


def test_identity_kept_across_restart_and_foreign_cluster_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    write_identity(tmp_path / "data", ClusterIdentity("cluster-a", 3, "z1", ME))
    agent = make_agent(tmp_path, clock)
    assert agent.identity == ClusterIdentity("cluster-a", 3, "z1", ME)
    assert agent.server_id == 3
    req = agent.build_lease_request()
    assert req.cluster_id == "cluster-a"
    assert not agent.handle_response(ok_response(clock, cluster_id="cluster-b"), RS1)
    assert agent.handle_response(ok_response(clock, cluster_id="cluster-a", server_id=3), RS1)


def test_identity_write_is_atomic_when_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(identity_mod.os, "replace", broken_replace)
    assert agent.handle_response(ok_response(clock), RS1) is False
    assert agent.identity is None
    assert list(agent.data_dir.glob("*identity*")) == []  # no half-written file, no temp left
    monkeypatch.undo()
    assert agent.handle_response(ok_response(clock), RS1) is True
    assert load_identity(agent.data_dir) == ClusterIdentity("cluster-a", 5, "z1", ME)


def test_write_identity_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(identity_mod.os, "fsync", spy)
    write_identity(tmp_path, ClusterIdentity("c", 1, "z1", ME))
    assert synced == [False, True]  # the temp file first, then the directory after the rename


def test_malformed_identity_file_is_an_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    identity_path(data).write_text("{not json")
    with pytest.raises(IdentityError):
        load_identity(data)
    with pytest.raises(IdentityError):
        make_agent(tmp_path)
    with pytest.raises(ValueError):
        write_identity(data, ClusterIdentity("", 1, "z1", ME))


# ---------------------------------------------------------------- start_service_time


def test_start_service_time_set_after_first_accept_and_kept(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.build_lease_request().start_service_time == 0
    # Accepted but the gRPC server is not up yet: not in service.
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == 0
    assert agent.consume_heartbeat_now() is False
    agent.mark_serving()
    clock.advance(1_000)
    started = clock.now_us()
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == started
    assert agent.consume_heartbeat_now() is True  # the next heartbeat goes at once...
    assert agent.consume_heartbeat_now() is False  # ...once
    assert agent.build_lease_request().start_service_time == started
    # A refusal, an RS restart (new epoch) and later renewals keep it.
    clock.advance(5_000_000)
    agent.handle_response(refusal("OB_RS_NOT_MASTER"), RS1)
    assert agent.handle_response(ok_response(clock, epoch=2), RS2)
    assert agent.start_service_time == started
    assert agent.consume_heartbeat_now() is False


def test_start_service_time_needs_an_identity(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    agent.mark_serving()
    assert agent.handle_response(ok_response(clock, server_id=0, cluster_id=""), RS1)
    assert agent.start_service_time == 0
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == clock.now_us()


# ---------------------------------------------------------------- lease request


def test_lease_request_fields(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, build_version="9.9.9", log_disk_size=1 << 30)
    agent.refresh_resources()
    req = agent.build_lease_request()
    assert req.version == 1
    assert (req.zone, req.server, req.sql_port) == ("z1", ME, 3881)
    assert req.build_version == "9.9.9"
    assert req.current_server_time == clock.now_us()
    assert (req.start_service_time, req.server_status, req.rs_epoch, req.cluster_id) == (
        0,
        0,
        0,
        "",
    )
    assert req.resource_info.cpu_total > 0
    assert req.resource_info.log_disk_total == 1 << 30
    clock.advance(7)
    req2 = agent.build_lease_request()
    assert req2.seq > req.seq > 0
    assert req2.current_server_time == req.current_server_time + 7
    assert (
        make_agent(tmp_path / "other").build_lease_request().build_version == DEFAULT_BUILD_VERSION
    )


# ---------------------------------------------------------------- disk probe


def test_disk_probe_ok_on_a_tmp_dir(tmp_path: Path) -> None:
    assert probe_data_disk(tmp_path) is None
    assert (tmp_path / DISK_PROBE_FILE).stat().st_size == 4096


def test_disk_probe_fails_on_io_error(tmp_path: Path) -> None:
    (tmp_path / DISK_PROBE_FILE).mkdir()  # cannot be opened for writing
    reason = probe_data_disk(tmp_path)
    assert reason is not None and "probe I/O" in reason


def test_disk_fault_flag_sets_and_clears_status_bit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(tmp_path)
    assert agent.probe_disk_now() is True
    assert agent.build_lease_request().server_status == 0
    flag = agent.data_dir / FAULT_DATA_DISK_ERROR_FILE
    flag.touch()
    with caplog.at_level(logging.INFO, logger="observer_agent"):
        assert agent.probe_disk_now() is False
        assert agent.probe_disk_now() is False
        assert agent.build_lease_request().server_status & DATA_DISK_ERROR
        flag.unlink()
        assert agent.probe_disk_now() is True
    assert agent.build_lease_request().server_status == 0
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if m.startswith("data disk error")]) == 1  # transitions only
    assert len([m for m in messages if m.startswith("data disk recovered")]) == 1


def test_hung_disk_probe_counts_as_failure(tmp_path: Path) -> None:
    release = threading.Event()

    def hung_probe(data_dir: Path) -> str | None:
        release.wait(10)
        return None

    agent = Agent(
        make_settings(tmp_path), FakeClock(), disk_probe=hung_probe, disk_probe_timeout_us=50_000
    )

    async def scenario() -> tuple[bool, bool]:
        first = await asyncio.wait_for(agent.probe_disk_async(), 5)
        second = await asyncio.wait_for(agent.probe_disk_async(), 5)  # still stuck: no new thread
        return first, second

    try:
        assert asyncio.run(scenario()) == (False, False)
        assert agent.server_status == DATA_DISK_ERROR
        assert agent.disk_error is not None and "hung" in agent.disk_error
    finally:
        release.set()


def test_async_probe_ok_and_resource_refresh(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)

    async def scenario() -> tuple[bool, bool]:
        return (
            await asyncio.wait_for(agent.probe_disk_async(), 5),
            await asyncio.wait_for(agent.refresh_resources_async(), 5),
        )

    assert asyncio.run(scenario()) == (True, True)
    assert agent.resource_info.mem_total > 0


# ---------------------------------------------------------------- resources


def test_resource_info_from_psutil(tmp_path: Path) -> None:
    info = collect_resource_info(tmp_path, None)
    assert info.cpu_total >= 1
    assert info.mem_total > 0 and 0 < info.mem_in_use <= info.mem_total
    assert info.data_disk_total > 0 and 0 < info.data_disk_in_use <= info.data_disk_total
    assert info.log_disk_total == info.data_disk_total * 30 // 100
    assert info.log_disk_in_use == 0
    assert (
        info.cpu_assigned,
        info.mem_assigned,
        info.log_disk_assigned,
        info.data_disk_assigned,
    ) == (0, 0, 0, 0)


def test_resource_info_log_disk_size_and_clog_usage(tmp_path: Path) -> None:
    (tmp_path / "clog" / "sub").mkdir(parents=True)
    (tmp_path / "clog" / "a").write_bytes(b"x" * 10_000)
    (tmp_path / "clog" / "sub" / "b").write_bytes(b"y" * 2_345)
    info = collect_resource_info(tmp_path, 5 << 30)
    assert info.log_disk_total == 5 << 30
    assert info.log_disk_in_use == 12_345


# ---------------------------------------------------------------- settings / CLI


def test_settings_parse_durations_and_rs_list(tmp_path: Path) -> None:
    s = make_settings(
        tmp_path, rs_list=" 10.0.0.1:2882 , host-b:2882,10.0.0.1:2882", heartbeat_interval="100ms"
    )
    assert s.rs_list == ["10.0.0.1:2882", "host-b:2882"]
    assert s.heartbeat_interval == 100_000
    assert s.rpc_timeout == 2_000_000
    assert s.disk_probe_interval == 5_000_000
    assert s.resource_refresh_interval == 10_000_000


def test_settings_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OB_AGENT_RS_LIST", "10.0.0.1:2882,10.0.0.2:2882")
    monkeypatch.setenv("OB_AGENT_ZONE", "z7")
    monkeypatch.setenv("OB_AGENT_HEARTBEAT_INTERVAL", "1s")
    s = AgentSettings(rpc_addr=ME, sql_port=2881, data_dir=tmp_path)  # type: ignore[call-arg]
    assert s.rs_list == ["10.0.0.1:2882", "10.0.0.2:2882"]
    assert (s.zone, s.heartbeat_interval) == ("z7", 1_000_000)


def test_in_process_settings_allow_port_0_and_ignore_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OB_AGENT_ZONE", "from-env")
    monkeypatch.setenv("OB_AGENT_HEARTBEAT_INTERVAL", "1s")
    s = AgentSettings.in_process(
        rs_list=[RS1], rpc_addr="127.0.0.1:0", sql_port=1, zone="z1", data_dir=tmp_path
    )
    assert (s.rpc_port, s.zone, s.heartbeat_interval) == (0, "z1", 2_000_000)
    with pytest.raises(ValidationError, match="port 0 is out of range"):
        AgentSettings(
            rs_list=[RS1], rpc_addr="127.0.0.1:0", sql_port=1, zone="z1", data_dir=tmp_path
        )


GOOD = ["--rs-list", RS1, "--rpc-addr", ME, "--sql-port", "2881", "--zone", "z1"]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"--rs-list": "not-an-address"}, "--rs-list"),
        ({"--rs-list": ""}, "--rs-list"),
        ({"--rs-list": "127.0.0.1:70000"}, "out of range"),
        ({"--rpc-addr": "127.0.0.1:70000"}, "out of range"),
        ({"--rpc-addr": "127.0.0.1:0"}, "out of range"),
        ({"--rpc-addr": "localhost:2882"}, "IPv4"),
        ({"--rpc-addr": "0.0.0.0:2882"}, "0.0.0.0"),
        ({"--sql-port": "70000"}, "--sql-port"),
        ({"--sql-port": "0"}, "--sql-port"),
        ({"--zone": ""}, "zone must not be empty"),
        ({"--zone": "   "}, "zone must not be empty"),
        ({"--heartbeat-interval": "2"}, "not a duration"),
        ({"--heartbeat-interval": "0s"}, "heartbeat_interval = 0us is out of range"),
        ({"--heartbeat-interval": "2h"}, "heartbeat_interval = 2h is out of range"),
        ({"--rpc-timeout": "1d"}, "rpc_timeout"),
        ({"--disk-probe-interval": "soon"}, "--disk-probe-interval"),
        ({"--log-level": "LOUD"}, "log_level"),
        ({"--log-disk-size": "0"}, "--log-disk-size"),
    ],
)
def test_cli_bad_settings_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: dict[str, str], needle: str
) -> None:
    args = dict(zip(GOOD[::2], GOOD[1::2], strict=True))
    args["--data-dir"] = str(tmp_path)
    args.update(override)
    argv = [x for kv in args.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("observer-agent: error: ")
    assert needle in err
    assert err.count("\n") == 1


def test_cli_missing_flag_and_unknown_flag_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*GOOD[:-2], "--data-dir", str(tmp_path)]) == 2  # no --zone
    err = capsys.readouterr().err
    assert "--zone: is required" in err and err.count("\n") == 1
    assert main([*GOOD, "--data-dir", str(tmp_path), "--frobnicate", "1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --frobnicate" in err and err.count("\n") == 1
    assert main([*GOOD, "--data-dir", str(tmp_path), "--sql-port", "abc"]) == 2
    assert "--sql-port" in capsys.readouterr().err
