"""``tests/bench/agent_reconnect.py`` smoke run (every benchmark has one):
three real agents, the RS killed for 3 s and restarted on the same port and database. No
time is asserted, only its counts: every agent's first granted lease after the restart was
found in its log, the figures exist and no server was shown INACTIVE meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import agent_reconnect

pytestmark = pytest.mark.integration


def test_quick_run_finds_every_agent_back(tmp_path: Path) -> None:
    r = agent_reconnect.run(3, 3.0, tmp_path)
    assert r["agents"] == 3 and r["back"] == 3, r
    for key in ("rs_restart_to_healthy_s", "max_s", "p50_s", "min_s", "spread_s"):
        assert r[key] is not None, key
    # The take-office grace holds the servers whose agents are still coming back.
    assert r["inactive_seen"] == 0, r
