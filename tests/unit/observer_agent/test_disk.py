"""The data-disk probe (observer_agent.disk): healthy, failing, fault flag, hung."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from observer_agent.agent import Agent
from observer_agent.disk import (
    DATA_DISK_ERROR,
    DISK_PROBE_FILE,
    FAULT_DATA_DISK_ERROR_FILE,
    probe_data_disk,
)
from tests.unit.observer_agent.helpers import make_agent, make_settings


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
