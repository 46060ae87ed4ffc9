"""The agent's settings (observer_agent.settings): durations, sizes, the RS list, the
environment, in-process settings and the replica flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from obcommon.sizes import parse_size
from observer_agent.cli import load_settings, main
from observer_agent.settings import AgentSettings
from tests.unit.observer_agent.helpers import ME, RS1, make_settings
from tests.unit.observer_agent.replicas.helpers import copy_settings, settings


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


def test_max_concurrent_copies_setting(tmp_path: Path) -> None:
    argv = ["--rs-list=127.0.0.1:2882", "--rpc-addr=127.0.0.1:2883", "--sql-port=2881"]
    argv += ["--zone=z1", f"--data-dir={tmp_path}"]
    assert load_settings(argv).max_concurrent_copies == 2
    assert load_settings([*argv, "--max-concurrent-copies=5"]).max_concurrent_copies == 5
    assert main([*argv, "--max-concurrent-copies=0"]) == 2
    with pytest.raises(ValueError, match="max_concurrent_copies"):
        copy_settings(tmp_path, max_concurrent_copies=0)


def test_reconnect_backoff_settings(tmp_path: Path) -> None:
    """100 ms / 2 s by default, words accepted, the cap not below the base."""
    base = {"rs_list": "127.0.0.1:2882", "rpc_addr": "127.0.0.1:3882", "sql_port": 1, "zone": "z1"}
    s = AgentSettings.in_process(**base, data_dir=tmp_path)
    assert (s.reconnect_backoff_base, s.reconnect_backoff_cap) == (100_000, 2_000_000)
    s = AgentSettings.in_process(
        **base, data_dir=tmp_path, reconnect_backoff_base="50ms", reconnect_backoff_cap="15s"
    )
    assert (s.reconnect_backoff_base, s.reconnect_backoff_cap) == (50_000, 15_000_000)
    with pytest.raises(ValidationError, match="reconnect_backoff_cap"):
        AgentSettings.in_process(
            **base, data_dir=tmp_path, reconnect_backoff_base="1s", reconnect_backoff_cap="500ms"
        )
