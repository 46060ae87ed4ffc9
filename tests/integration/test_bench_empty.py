"""``make bench-empty`` smoke run: the emptying benchmark with ``--quick``
(200 MiB in 4 log streams) on a real RS and real agents over mutual TLS. No time is asserted
(speed is the benchmark's to measure), only its counts: one copy per log stream to the
destination, each of a log stream's bytes, all over the bulk HTTPS path, the job ended and
the checksums equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import empty_bench

pytestmark = pytest.mark.integration


def test_quick_run_counts_its_copies(tmp_path: Path) -> None:
    out = tmp_path / "empty.json"
    status = empty_bench.main(["--quick", "--dir", str(tmp_path), "--out", str(out)])
    assert status == 0
    r = json.loads(out.read_text())
    assert r["ls"] == 4 and r["size_bytes"] == 4 * r["per_ls"] == 4 * (50 << 20)
    assert r["checksums_ok"] is True
    copies = r["copies"]
    assert sorted(c["ls_id"] for c in copies) == [1001, 1002, 1003, 1004]
    assert [c["bytes"] for c in copies] == [r["per_ls"]] * 4
    assert {c["over"] for c in copies} == {"https"}
    assert all(c["start"] <= c["data"] <= c["done"] for c in copies)
    assert set(r["job"]) >= {"success_s", "gone_s"}
