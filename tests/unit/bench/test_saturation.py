"""The benchmark's saturation verdict (tests/bench/saturation.py) on both sides of each
threshold, the ratios it withholds (heartbeat_bench.ratios) and how the report prints them."""

from __future__ import annotations

import os
from collections import namedtuple
from typing import Any

import pytest

from tests.bench import heartbeat_bench as hb
from tests.bench.saturation import (
    ANSWERED_SHARE,
    LOADGEN_CORE,
    MACHINE_BUSY_SHARE,
    SERVER_CORE,
    verdict,
    withheld,
)

# A quiet window: 300 agents at a 2 s period on one usable core, all answered quickly.
QUIET: dict[str, Any] = {
    "busy_cores": 0.30,
    "usable_cores": 1,
    "server_cpu_cores": 0.20,
    "loadgen_cpu_cores": [0.04, 0.04],
    "hb_per_s": 150.0,
    "offered_hb_per_s": 150.0,
    "p99_ms": 12.0,
    "period_s": 2.0,
}


def judge(**changes: Any) -> Any:
    return verdict(**(QUIET | changes))


def test_a_quiet_window_is_ok() -> None:
    v = judge()
    assert v.codes == "ok" and v.reasons == ()
    assert not v.saturated and v.kept_up and not v.server_at_core
    assert v.busy_share == pytest.approx(0.30) and v.answered_share == 1.0


@pytest.mark.parametrize("usable", [1, 2])
def test_the_machine_is_saturated_from_the_busy_share_of_the_usable_cores(usable: int) -> None:
    below = judge(usable_cores=usable, busy_cores=(MACHINE_BUSY_SHARE - 0.01) * usable)
    at = judge(usable_cores=usable, busy_cores=MACHINE_BUSY_SHARE * usable)
    assert not below.machine_saturated and below.codes == "ok"
    assert at.machine_saturated and at.saturated and at.codes == "M"
    assert at.reasons[0].startswith(f"machine {MACHINE_BUSY_SHARE * usable:.2f} of {usable}")
    assert ("usable cores busy" in at.reasons[0]) == (usable == 2)
    # Who filled the cores: QUIET's server 0.20 and generators 0.08, the rest others.
    others = MACHINE_BUSY_SHARE * usable - 0.28
    assert at.reasons[0].endswith(f"server 0.20, load generators 0.08, others {others:.2f})")
    # The same busy cores are not saturation on twice the cores.
    assert not judge(usable_cores=2, busy_cores=MACHINE_BUSY_SHARE).machine_saturated


def test_one_full_load_generator_saturates_the_window() -> None:
    below = judge(loadgen_cpu_cores=[LOADGEN_CORE - 0.01, LOADGEN_CORE - 0.01])
    at = judge(loadgen_cpu_cores=[0.10, LOADGEN_CORE])
    assert not below.loadgen_saturated and below.codes == "ok"
    assert at.loadgen_saturated and at.saturated and at.codes == "G"
    assert at.reasons == (f"load generator 1 at {LOADGEN_CORE:.2f} core (>= 0.85)",)


def test_a_server_at_one_core_is_marked_but_is_not_saturation() -> None:
    below = judge(server_cpu_cores=SERVER_CORE - 0.01)
    at = judge(server_cpu_cores=SERVER_CORE)
    assert not below.server_at_core and below.codes == "ok"
    assert at.server_at_core and at.codes == "S"
    assert not at.saturated and at.kept_up


def test_the_server_kept_up_from_the_answered_share() -> None:
    offered = 200.0
    below = judge(offered_hb_per_s=offered, hb_per_s=(ANSWERED_SHARE - 0.01) * offered)
    at = judge(offered_hb_per_s=offered, hb_per_s=ANSWERED_SHARE * offered)
    assert at.kept_up and at.codes == "ok"
    assert not below.kept_up and below.codes == "L" and not below.saturated
    assert below.reasons == ("answered 188 of 200 hb/s offered (94% < 95%)",)


def test_the_server_kept_up_only_with_its_p99_below_the_period() -> None:
    below = judge(p99_ms=1999.0, period_s=2.0)
    at = judge(p99_ms=2000.0, period_s=2.0)
    assert below.kept_up
    assert not at.kept_up and at.codes == "L"
    assert at.reasons == ("p99 2,000 ms >= the period (2,000 ms)",)


def test_every_flag_at_once_lists_every_reason_in_code_order() -> None:
    v = judge(
        busy_cores=1.0,
        loadgen_cpu_cores=[0.9, 0.9],
        server_cpu_cores=1.0,
        hb_per_s=10.0,
        p99_ms=5000.0,
    )
    assert v.codes == "M,G,S,L"
    assert len(v.reasons) == 6  # machine, two generators, server, answered, p99
    assert v.as_json()["codes"] == "M,G,S,L" and v.as_json()["saturated"] is True


@pytest.mark.parametrize(
    "bad", [{"usable_cores": 0}, {"offered_hb_per_s": 0.0}, {"period_s": -1.0}]
)
def test_bad_input_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        judge(**bad)


def _sat(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = judge(**changes).as_json()
    return out


def test_a_ratio_is_withheld_when_either_window_is_saturated() -> None:
    ok = _sat()
    assert withheld("rs-tls", ok, "echo-tls", ok) is None
    why = withheld("rs-tls", _sat(busy_cores=0.95), "echo-tls", ok)
    assert why is not None and why.startswith("saturated: rs-tls: machine 0.95 of 1")
    why = withheld("rs-tls", ok, "echo-tls", _sat(loadgen_cpu_cores=[0.9, 0.1]))
    assert why == "saturated: echo-tls: load generator 0 at 0.90 core (>= 0.85)"
    why = withheld("rs-tls", ok, "echo-tls", _sat(busy_cores=0.95, p99_ms=3000.0))
    assert why is not None and why.endswith("; echo-tls did not keep up")


def test_a_ratio_is_withheld_when_the_denominator_did_not_keep_up_only() -> None:
    ok = _sat()
    lagging = _sat(hb_per_s=100.0)
    assert withheld("rs-tls", ok, "echo-tls", lagging) == (
        "echo-tls did not keep up: answered 100 of 150 hb/s offered (67% < 95%)"
    )
    # The numerator's own lag or one-core capacity is what the ratio shows.
    assert withheld("rs-tls", lagging, "echo-tls", ok) is None
    assert withheld("rs-tls", _sat(server_cpu_cores=1.0), "echo-tls", ok) is None


def _result(config: str, n: int, us_per_hb: float, p99: float, **sat: Any) -> dict[str, Any]:
    return {
        "config": config,
        "agents": n,
        "server_cpu_us_per_hb": us_per_hb,
        "latency_ms": {"p50": p99 / 2, "p99": p99, "max": p99 * 2},
        "server_rss_mib": 100.0,
        "saturation": _sat(**sat),
    }


def test_ratios_are_none_with_the_reason_where_withheld() -> None:
    rows = hb.ratios(
        [
            _result("rs-tls", 10, 400.0, 8.0),
            _result("echo-tls", 10, 200.0, 4.0, busy_cores=0.97),
            _result("rs", 10, 300.0, 6.0),
            _result("echo", 10, 100.0, 2.0),
        ]
    )
    row = rows[0]
    assert row["rs/echo"]["cpu_per_hb"] == 3.0 and row["rs/echo"]["withheld"] is None
    assert row["rs/echo"]["codes"] == {"rs": "ok", "echo": "ok"}
    tls = row["rs_tls/echo_tls"]
    assert tls["cpu_per_hb"] is None and tls["p99"] is None and tls["rss"] is None
    assert tls["withheld"].startswith("saturated: echo-tls: machine 0.97 of 1")
    assert row["echo_tls/echo"]["withheld"].startswith("saturated: echo-tls:")
    assert row["rs_tls/rs"]["cpu_per_hb"] == pytest.approx(400 / 300)
    assert hb.ratio_cell(tls) == "n/a (saturated: echo-tls M)"
    assert hb.ratio_cell(row["rs/echo"]) == "3.00 / 3.00"
    lag = hb.ratios([_result("rs", 5, 1.0, 1.0), _result("echo", 5, 1.0, 1.0, hb_per_s=1.0)])
    assert hb.ratio_cell(lag[0]["rs/echo"]) == "n/a (echo did not keep up)"


def _run(config: str, busy: float, **sat: Any) -> dict[str, Any]:
    """A measured echo window as heartbeat_bench.measure() returns it, pinned to one core
    of two."""
    return {
        **_result(config, 300, 150.0, 6.0, busy_cores=busy, **sat),
        "server": "echo",
        "hb_per_s": 150.0,
        "expected_hb_per_s": 150.0,
        "errors": {},
        "timeouts": 0,
        "stream_failures": 0,
        "server_cpu_cores": 0.2,
        "loadgen_cpu_cores": [0.04, 0.04],
        "loadgen_rss_mib": [50.0, 50.0],
        "loadgen_send_lag_ms": {"p50": 0.1, "p99": 7.5},
        "usable_busy_cores": busy,
        "usable_cpus": [1],
        "machine_busy_cores": busy + 0.5,
        "machine_cores": 2,
        "other_cpu_cores": 0.0,
        "stalls": [],
    }


def test_the_report_prints_the_verdict_beside_the_figures_and_withholds_the_ratio() -> None:
    text = hb.report([_run("echo", 0.30), _run("echo-tls", 0.95)])
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("config"))
    assert header.split()[:3] == ["config", "N", "verdict"]
    echo_tls = next(line for line in lines if line.startswith("echo-tls "))
    assert echo_tls.split()[:3] == ["echo-tls", "300", "M"]
    assert "0.95/1 of 2" in echo_tls
    assert next(line for line in lines if line.startswith("echo ")).split()[2] == "ok"
    assert any(
        line.startswith("verdict (tests/bench/saturation.py): ok = none of") for line in lines
    )
    assert "n/a (saturated: echo-tls M)" in text
    assert "  echo-tls/echo N=300: saturated: echo-tls: machine 0.95 of 1 usable" in text
    assert (
        "note: echo-tls N=300 [M]: machine 0.95 of 1 usable core busy (95% >= 90%: "
        "server 0.20, load generators 0.08, others 0.67)"
    ) in text
    assert "send lag p99 7.5 ms" in text
    # Unsaturated on both sides: the ratio itself.
    assert "1.00 / 1.00" in hb.report([_run("echo", 0.30), _run("echo-tls", 0.30)])


def test_busy_cores_are_counted_over_the_usable_cpus_only() -> None:
    cpu = namedtuple("cpu", "user system idle iowait steal guest guest_nice")
    per_cpu = [cpu(10.0, 5.0, 100.0, 1.0, 2.0, 3.0, 0.0), cpu(1.0, 0.5, 50.0, 0, 0, 0, 0)]
    # Idle, iowait, steal and guest (already inside user) are not busy.
    assert hb.busy_seconds(per_cpu) == 16.5
    assert hb.busy_seconds(per_cpu, [1]) == 1.5
    assert hb.busy_seconds(per_cpu, [0, 7]) == 15.0  # a CPU the machine lacks adds nothing
    assert hb.usable_cpus() == sorted(os.sched_getaffinity(0))


def test_the_report_names_each_round_and_prints_the_median_with_its_spread() -> None:
    """``--repeat 2``: each run is shown with its round, the ratio table has a row per round
    and the median row gives the CPU ratio's spread."""
    runs = [
        _run("echo", 0.30) | {"round": 1},
        _run("echo-tls", 0.30, hb_per_s=150.0) | {"round": 1, "server_cpu_us_per_hb": 300.0},
        _run("echo", 0.30) | {"round": 2},
        _run("echo-tls", 0.30) | {"round": 2, "server_cpu_us_per_hb": 165.0},
    ]
    text = hb.report(runs)
    assert "echo-tls #1" in text and "echo #2" in text
    assert "2.00 / 1.00" in text and "1.10 / 1.00" in text
    assert "1.55 / 1.00 (CPU 1.10-2.00, 2 rounds)" in text
