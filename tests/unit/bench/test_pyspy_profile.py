"""The summary of a py-spy profile (tests/bench/pyspy_profile.py, ``heartbeat_bench --profile``): own and inclusive shares from py-spy's raw collapsed stacks."""

from __future__ import annotations

from tests.bench.pyspy_profile import render, summarise

RAW = """\
main (a.py);loop (a.py);handle (b.py);check (c.py) 6
main (a.py);loop (a.py);handle (b.py) 2
main (a.py);loop (a.py);recurse (d.py);recurse (d.py) 2
not a stack line
"""


def test_shares_of_own_and_inclusive_samples() -> None:
    s = summarise(RAW, top=3)
    assert s["samples"] == 10
    assert s["self"] == [["check (c.py)", 0.6], ["handle (b.py)", 0.2], ["recurse (d.py)", 0.2]]
    # A frame twice on one stack (recursion) counts once.
    incl = dict(summarise(RAW, top=10)["inclusive"])
    assert incl["main (a.py)"] == 1.0 and incl["handle (b.py)"] == 0.8
    assert incl["recurse (d.py)"] == 0.2


def test_an_empty_profile_and_a_failed_one_render() -> None:
    assert summarise("") == {"samples": 0, "self": [], "inclusive": []}
    text = render("rs-tls", 5000, {**summarise(RAW), "server_cpu_us_per_hb": 250.0})
    assert "rs-tls N=5,000: 10 samples, 250 us CPU/heartbeat" in text
    assert "60.0%  check (c.py)" in text
    assert render("rs", 10, {"error": "py-spy not installed"}).endswith("py-spy not installed")
