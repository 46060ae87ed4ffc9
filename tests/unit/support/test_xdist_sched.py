"""tests/support/xdist_sched.py: the file groups of ``make test`` and its longest-first order,
checked on a real ``pytest -n 2 --dist loadgroup`` run of two test files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.support.xdist_sched import FILE_GROUPS, POSTGRESQL_UNGROUPED, file_group

ROOT = Path(__file__).resolve().parents[3]
GROUPED = "tests/unit/support/test_ports.py"
OTHER = "tests/unit/sql/test_parser.py"


def test_file_group_by_the_path_of_the_node_id() -> None:
    assert file_group(f"{GROUPED}::test_a_bad_range_is_refused") == FILE_GROUPS[GROUPED]
    assert file_group(f"{GROUPED}::TestX::test_y[a::b]") == FILE_GROUPS[GROUPED]
    assert file_group("tests/unit/sql/test_parser.py::test_x") is None
    # Every file of the table exists: a renamed file would silently lose its group.
    for path in FILE_GROUPS:
        assert (ROOT / path).is_file(), path


def test_postgresql_variants_of_some_files_leave_their_group() -> None:
    (path,) = POSTGRESQL_UNGROUPED
    assert file_group(f"{path}::test_x[postgresql]") is None
    assert file_group(f"{path}::test_x[sqlite]") == FILE_GROUPS[path] == "cpu"
    assert path in FILE_GROUPS


def test_a_grouped_file_runs_on_one_worker_and_first(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-v",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "--no-loadscope-reorder",
            "--basetemp",
            str(tmp_path / "bt"),
            # Collected first (sql < support) but ranked after the grouped file.
            OTHER,
            GROUPED,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    by_worker: dict[str, list[str]] = defaultdict(list)
    for m in re.finditer(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", proc.stdout, re.M):
        by_worker[m.group(1)].append(m.group(2))
    grouped_workers = {w for w, ids in by_worker.items() for i in ids if i.startswith(GROUPED)}
    assert len(grouped_workers) == 1, dict(by_worker)
    (worker,) = grouped_workers
    ran = by_worker[worker]
    n_grouped = sum(1 for i in ran if i.startswith(GROUPED))
    assert n_grouped >= 5
    # The group was the first unit handed out: its worker started with all of it.
    assert all(i.startswith(GROUPED) for i in ran[:n_grouped]), ran
    assert any(i.startswith(OTHER) for ids in by_worker.values() for i in ids)
