"""``make bench-storm`` smoke run (issue 14): the storm benchmark's mass-expiry scenario at
N=50 over mutual TLS with a 3 s lease, real RS and load generator processes. No figure is
asserted, only that the run produced them and its counts: the RS and ``__all_server`` saw
every stopped agent expire, and no surviving agent expired with them."""

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
    # Every stopped server reached __all_server as INACTIVE, and none of the 35 that kept
    # renewing was expired with them (the scenario's point; counts, not times).
    assert r["db_inactive_seen"] == 15
    assert r["survivors_expired"] == 0
    # The two detection figures exist only when every stopped server was seen (else None).
    for key in ("lease_end_to_rs_detected_all_ms", "lease_end_to_db_all_inactive_ms"):
        assert r[key] is not None, key
    figures = {row[1] for row in doc["table"]}
    assert "lease end -> __all_server all INACTIVE ms" in figures
