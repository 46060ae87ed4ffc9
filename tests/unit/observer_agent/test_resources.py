"""What a node reports about its resources (observer_agent.resources): psutil, the overrides,
the log disk."""

from __future__ import annotations

from pathlib import Path

from obcommon.clock import FakeClock
from observer_agent.agent import Agent
from observer_agent.resources import collect_resource_info
from tests.unit.observer_agent.replicas.helpers import settings


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


def test_resource_overrides(tmp_path: Path) -> None:
    info = collect_resource_info(tmp_path, 3 << 30, cpu_count=2.5, memory_limit=1 << 30)
    assert (info.cpu_total, info.mem_total, info.log_disk_total) == (2.5, 1 << 30, 3 << 30)
    assert 0 <= info.mem_in_use <= 1 << 30
    agent = Agent(settings(tmp_path, cpu_count=3, memory_limit="2G"), FakeClock())
    agent.refresh_resources()
    assert (agent.resource_info.cpu_total, agent.resource_info.mem_total) == (3.0, 2 << 30)
