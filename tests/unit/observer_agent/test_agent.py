"""The Agent composing its parts: its periodic jobs run off the event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.timescale import scaled
from tests.unit.observer_agent.helpers import make_agent


def test_async_probe_ok_and_resource_refresh(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)

    async def scenario() -> tuple[bool, bool]:
        return (
            await asyncio.wait_for(agent.probe_disk_async(), scaled(5)),
            await asyncio.wait_for(agent.refresh_resources_async(), scaled(5)),
        )

    assert asyncio.run(scenario()) == (True, True)
    assert agent.resource_info.mem_total > 0
