"""``make bench-lease-path`` smoke runs: 50 streams, 2 rounds, profiled, then with the caches
evicted before each renewal (``--cold``). No figure is asserted, only that every renewal was
answered and counted, and that the profile names the lease path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench import lease_path_bench

pytestmark = pytest.mark.integration


def _smoke(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """Run the bench on 50 streams for 2 rounds with ``extra`` arguments; its JSON, after
    checking that every renewal was answered and counted."""
    out = tmp_path / "lease_path.json"
    assert (
        lease_path_bench.main(["--agents", "50", "--rounds", "2", *extra, "--out", str(out)]) == 0
    )
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["agents"] == 50 and doc["heartbeats"] == 100 and doc["refused"] == 0
    return doc


def test_quick_run_answers_every_renewal_and_profiles_the_lease_path(tmp_path: Path) -> None:
    doc = _smoke(tmp_path, "--profile")
    assert doc["cpu_us_per_heartbeat"] > 0
    assert "receive_hb" in doc["profile"]


def test_cold_run_times_every_renewal_after_evicting_the_caches(tmp_path: Path) -> None:
    doc = _smoke(tmp_path, "--cold")
    assert doc["cold_us_p50"] > 0 and doc["cold_us_mean"] > 0
    assert "cpu_us_per_heartbeat" not in doc
