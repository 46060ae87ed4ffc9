"""The benchmark's certificates (tests/bench/bench_pki.py) and its ratio table
(heartbeat_bench.ratios)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_pem
from obcommon.security.tls import TransportSecurity
from tests.bench.bench_pki import BenchPki
from tests.bench.heartbeat_bench import ratios


def test_node_certificates_name_each_agent_and_are_written_once(tmp_path: Path) -> None:
    pki = BenchPki.create(tmp_path / "pki")
    pki.add_nodes(range(20000, 20003))
    for port in range(20000, 20003):
        ident = identity_of_pem((pki.nodes_dir / str(port) / "node.crt").read_bytes())
        assert ident is not None
        assert (ident.role, ident.name) == (Role.NODE, f"127.0.0.1:{port}")
    before = (pki.nodes_dir / "20001" / "node.crt").read_bytes()
    pki.add_nodes(range(20001, 20005))  # 20001-20002 exist: kept; 20003-20004 added
    assert (pki.nodes_dir / "20001" / "node.crt").read_bytes() == before
    assert sorted(pki.ports) == list(range(20000, 20005))
    assert (pki.nodes_dir / "20004" / "node.key").stat().st_mode & 0o077 == 0


def test_server_dir_serves_as_rs_and_reads_metrics_as_root(tmp_path: Path) -> None:
    pki = BenchPki.create(tmp_path / "pki")
    d = pki.server_dir(tmp_path / "srv", "127.0.0.1:2882")
    rs_ident = identity_of_pem((d / "rs.crt").read_bytes())
    root_ident = identity_of_pem((d / "client.root.crt").read_bytes())
    assert rs_ident is not None and (rs_ident.role, rs_ident.name) == (Role.RS, "127.0.0.1:2882")
    assert root_ident is not None and (root_ident.role, root_ident.name) == (Role.CLIENT, "root")
    # What `rootservice serve --certs-dir` and the benchmark's RsClient read (checks pairs).
    assert not TransportSecurity.from_flags(d, False, Role.RS).insecure
    assert not TransportSecurity.from_flags(d, False, Role.CLIENT, "root").insecure
    assert (d / "ca.crt").read_bytes() == (pki.nodes_dir / "ca.crt").read_bytes()


def _result(config: str, n: int, us_per_hb: float, p99: float) -> dict[str, Any]:
    return {
        "config": config,
        "agents": n,
        "server_cpu_us_per_hb": us_per_hb,
        "latency_ms": {"p50": p99 / 2, "p99": p99, "max": p99 * 2},
        "server_rss_mib": 100.0,
        "saturation": {"saturated": False, "kept_up": True, "codes": "ok", "reasons": []},
    }


def test_ratios_pair_configurations_of_the_same_n() -> None:
    results = [
        _result("rs-tls", 10, 120.0, 6.0),
        _result("rs", 10, 100.0, 4.0),
        _result("echo", 10, 50.0, 2.0),
        _result("rs", 20, 80.0, 1.0),  # alone at N=20: no ratio row
    ]
    rows = ratios(results)
    assert [r["agents"] for r in rows] == [10]
    row = rows[0]
    assert row["rs_tls/rs"]["cpu_per_hb"] == 1.2
    assert row["rs_tls/rs"]["p99"] == 1.5
    assert row["rs/echo"]["cpu_per_hb"] == 2.0
    assert "echo_tls/echo" not in row and "rs_tls/echo_tls" not in row


def test_ratio_with_a_zero_denominator_is_none() -> None:
    rows = ratios([_result("rs", 5, 100.0, 3.0), _result("echo", 5, 0.0, 0.0)])
    assert rows[0]["rs/echo"]["cpu_per_hb"] is None
    assert rows[0]["rs/echo"]["p99"] is None


def test_rounds_give_a_ratio_each_then_their_median() -> None:
    """``--repeat``: a row per round, then per N the median of the rounds that showed the
    ratio, with its spread; a withheld round does not count."""
    results = [
        _result("rs-tls", 10, 120.0, 6.0) | {"round": 1},
        _result("echo-tls", 10, 100.0, 4.0) | {"round": 1},
        _result("rs-tls", 10, 150.0, 6.0) | {"round": 2},
        _result("echo-tls", 10, 100.0, 4.0) | {"round": 2},
        _result("rs-tls", 10, 110.0, 6.0) | {"round": 3},
        _result("echo-tls", 10, 100.0, 4.0) | {"round": 3},
        _result("rs-tls", 10, 500.0, 6.0) | {"round": 4},
        _result("echo-tls", 10, 100.0, 4.0) | {"round": 4},
    ]
    results[6]["saturation"] = {
        "saturated": True,
        "kept_up": True,
        "codes": "M",
        "reasons": ["the machine was busy"],
    }
    rows = ratios(results)
    assert [r["round"] for r in rows] == [1, 2, 3, 4, "median"]
    assert [r["rs_tls/echo_tls"]["cpu_per_hb"] for r in rows[:3]] == [1.2, 1.5, 1.1]
    assert rows[3]["rs_tls/echo_tls"]["withheld"] is not None
    median = rows[4]["rs_tls/echo_tls"]
    assert median["cpu_per_hb"] == 1.2 and median["rounds"] == 3
    assert (median["min"], median["max"]) == (1.1, 1.5)
    assert median["p99"] == 1.5 and median["withheld"] is None


def test_one_round_has_no_median_row() -> None:
    rows = ratios([_result("rs", 5, 100.0, 3.0), _result("echo", 5, 50.0, 1.0)])
    assert [r["round"] for r in rows] == [1]
