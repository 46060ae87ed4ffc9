"""``make bench-parse`` smoke run: tests/bench/parse_bench.py with ``--quick``. No
figure is asserted, only counts: every case ran its repeats and each gave the right answer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import parse_bench


def test_quick_run_answers_every_case_right(tmp_path: Path) -> None:
    out = tmp_path / "parse.json"
    assert parse_bench.main(["--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["repeats"] == 2
    assert set(doc["results"]) == set(parse_bench.CASES)
    for name, r in doc["results"].items():
        assert r["runs"] == 2 and r["correct"] == 2, name
