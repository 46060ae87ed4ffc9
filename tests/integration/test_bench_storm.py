"""``make bench-storm`` smoke runs: the storm benchmark's
mass-expiry and reconnect scenarios at N=50 over mutual TLS with a 3 s lease, real RS and
load generator processes. No time is asserted, only that the runs produced their figures and
their counts: every stopped or killed agent expired, no survivor expired, every live agent
back after the restart and none of them shown INACTIVE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench import storm_bench

pytestmark = pytest.mark.integration


def run(tmp_path: Path, scenario: str, *extra: str) -> dict[str, Any]:
    """``storm_bench.main`` on ``scenario`` at N=50, 3 s lease, no warm-up, one load
    generator; returns the JSON it wrote (the run must succeed)."""
    out = tmp_path / "storm.json"
    argv = ["--agents", "50", "--scenarios", scenario, "--lease-time", "3s", "--warmup", "0"]
    argv += ["--procs", "1", "--connect-spread", "0.5", "--out", str(out), *extra]
    assert storm_bench.main(argv) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_quick_mass_expiry_run_produces_its_figures(tmp_path: Path) -> None:
    doc = run(tmp_path, "mass-expiry")
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


def test_quick_reconnect_run_brings_every_agent_back_and_expires_the_killed(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, "reconnect", "--down", "1", "--kill", "2")["results"]["reconnect"]
    assert r["reconnect"]["not_recovered"] == 0 and r["reconnect"]["agents"] == 48
    assert r["restart_to_all_back_ms"] is not None
    assert r["shown_inactive_not_killed"] == 0
    assert r["lease_expire_events_not_killed"] == 0
    assert r["killed"] == 2 and r["killed_shown_inactive"] == 2
    assert r["all_back_to_killed_shown_inactive_ms"] is not None
    # Every stream after the restart was counted, on a full or a resumed handshake.
    assert r["rs_lease_streams_full_tls"] + r["rs_lease_streams_resumed"] >= 48
