"""``make bench-storm`` smoke run (issue 14): the storm benchmark's mass-expiry scenario at
N=50 over mutual TLS with a 3 s lease, real RS and load generator processes. No figure is
asserted, only that the run produced them (and that the RS saw every stopped agent expire,
which is a count, not a time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import storm_bench

pytestmark = pytest.mark.integration


def test_quick_mass_expiry_run_produces_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "storm.json"
    status = storm_bench.main(
        [
            "--agents",
            "50",
            "--scenarios",
            "mass-expiry",
            "--lease-time",
            "3s",
            "--warmup",
            "0",
            "--procs",
            "1",
            "--connect-spread",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    doc = json.loads(out.read_text())
    r = doc["results"]["mass-expiry"]
    assert r["stopped"] == 15 and r["rs_detected"] == 15
    for key in (
        "lease_end_to_rs_detected_all_ms",
        "lease_end_to_db_all_inactive_ms",
        "survivors_p99_ms",
        "survivors_expired",
    ):
        assert r[key] is not None, key
    figures = {row[1] for row in doc["table"]}
    assert "lease end -> __all_server all INACTIVE ms" in figures
