"""The replication fault switches (observer_agent.replicas.faults)."""

from __future__ import annotations

import asyncio
import logging
import statistics
from pathlib import Path

from obcommon.clock import SystemClock
from observer_agent.replicas.faults import (
    FAULT_APPLY_HOLD_FILE,
    FAULT_COPY_SLOW_FILE,
    FAULT_COPY_STALL_FILE,
    FAULT_REPLICATION_DELAY_FILE,
    FREEZE_POLL_S,
    FaultSwitches,
)
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import end_index, nodes, spec, upsert


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


def test_apply_hold_fault_is_read_in_milliseconds(tmp_path: Path) -> None:
    switches = FaultSwitches(tmp_path, 0.1, logging.getLogger("test"))
    assert switches.apply_hold_s() == 0.0  # no file, no hold
    (tmp_path / FAULT_APPLY_HOLD_FILE).write_text("1500\n")
    assert switches.apply_hold_s() == 1.5
    (tmp_path / FAULT_APPLY_HOLD_FILE).write_text("soon")
    assert switches.apply_hold_s() == 0.0  # malformed: ignored


def test_copy_switches_are_read_again_after_the_poll_interval_only(tmp_path: Path) -> None:
    """A copy asks for its switches at every piece: the files are read when the last read is
    FREEZE_POLL_S old or older (both sides of that boundary), not at each question."""
    now = [100.0]
    faults = FaultSwitches(tmp_path, 0.1, logging.getLogger("t"), monotonic=lambda: now[0])
    assert (faults.copy_delay_s(), faults.copy_stalled()) == (0.0, False)
    (tmp_path / FAULT_COPY_STALL_FILE).touch()
    (tmp_path / FAULT_COPY_SLOW_FILE).write_text("250\n")
    now[0] += FREEZE_POLL_S * 0.99
    assert (faults.copy_delay_s(), faults.copy_stalled()) == (0.0, False)  # not read again yet
    now[0] = 100.0 + FREEZE_POLL_S
    assert (faults.copy_delay_s(), faults.copy_stalled()) == (0.25, True)
    (tmp_path / FAULT_COPY_STALL_FILE).unlink()
    now[0] += FREEZE_POLL_S
    assert faults.copy_stalled() is False
