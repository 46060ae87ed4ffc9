"""``make chaos`` smoke run: tests/chaos/chaos.py with ``--quick`` (6 agents,
one trial of each fault, a 2 s lease, agents on free ports), in a process of its own as
``make chaos`` runs it. No figure is asserted, only the report's counts: every kind of
trial ran, one server was deleted, and nothing was lost, resurrected, shown INACTIVE during
a take-office grace or left with other than one leader (chaos.py exits 1 otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("kill9", "sigstop", "delete_kill9", "pg_restart", "pg_outage")


def test_quick_chaos_run_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "chaos" / "chaos.py"), "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    counts = json.loads(out.read_text())
    assert counts["agents"] == 6 and counts["trials"] == len(KINDS)
    assert counts["kinds"] == dict.fromkeys(KINDS, 1)
    # kill9, sigstop, delete_kill9 and pg_outage each end with a take office; a PostgreSQL
    # restart may be survived by the leader.
    assert counts["failovers"] + counts["leader_survived_pg_restarts"] == len(KINDS)
    assert counts["deleted"] == 1
    assert counts["lost"] == 0 and counts["resurrected"] == 0
    assert counts["inactive_in_grace"] == 0 and counts["trials_without_one_leader"] == 0
    assert counts["table_polls"] > 0
