"""``make bench-spark`` smoke run (issue 26): the Spark jobs benchmark with ``--quick`` at 5k
replicas, in a process of its own (its SparkSession must not meet the one of
tests/unit/rootservice/balancer/test_spark_jobs.py), on a private PostgreSQL. No figure is
asserted, only counts: the generated cluster, and the three plans computed by Spark, pandas
and SQL agreeing row for row (the bench exits 1 otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench import spark_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_computes_every_plan_alike_on_three_engines(tmp_path: Path) -> None:
    out = tmp_path / "spark.json"
    argv = ["--quick", "--sizes", "5k", "--driver-memory", "1g", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "spark_bench.py"), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    (size,) = doc["results"]
    assert size["replicas_target"] == 5000 and size["replicas"] > 0
    assert size["servers"] > 0 and size["units"] > 0
    assert set(size["plans"]) == set(spark_bench.PLANS)
    for name, plan in size["plans"].items():
        assert plan["agree"], (name, plan)
    # The generated cluster has work for the plans (DELETING servers, lost replicas).
    assert sum(p["rows"] for p in size["plans"].values()) > 0
