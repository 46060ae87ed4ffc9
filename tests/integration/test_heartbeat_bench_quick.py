"""``heartbeat_bench --quick`` end to end, with real processes: N=200
simulated agents against the real RS over mutual TLS and against the bare echo server over
the same TLS, in one run. Only counts are asserted (every agent answered and alive, no
error, the expired batch detected, the ratio computed), never a time: speed is measured by
``make bench`` itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import heartbeat_bench as hb

pytestmark = pytest.mark.integration

N = 200  # --quick


def test_quick_bench_counts(tmp_path: Path) -> None:
    out = tmp_path / "hb.json"
    # --scrape-interval 0: one measured window per configuration (the scraped ones are
    # covered by tests/integration/test_prometheus.py).
    argv = ["--quick", "--servers", "rs-tls,echo-tls", "--scrape-interval", "0", "--out", str(out)]
    assert hb.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["failures"] == []
    by = {r["config"]: r for r in doc["results"]}
    assert set(by) == {"rs-tls", "echo-tls"}
    for r in by.values():
        assert r["agents"] == N
        assert r["connect"]["connections"] == N and r["connect"]["connect_failures"] == 0
        assert r["connect"]["unanswered"] == 0
        assert r["responses"] > 0
        assert r["errors"] == {} and r["timeouts"] == 0 and r["stream_failures"] == 0
    rs = by["rs-tls"]
    # The RS holds every agent's lease and refused none.
    assert rs["rs_alive"] == N and rs["rs_servers"] == N
    assert rs["rs_refused"] == 0 and rs["rs_heartbeats_per_s"] > 0
    assert rs["rs_hb_handle_us"]["count"] > 0
    # The silenced batch (N/10 agents) is detected as expired, all of it.
    expiry = rs["expiry"]
    assert expiry["batch"] == N // 10 and expiry["detected"] == N // 10
    assert expiry["alive_after"] == N - N // 10
    assert [set(x) for x in doc["ratios"]] == [{"agents", "round", "rs_tls/echo_tls"}]
