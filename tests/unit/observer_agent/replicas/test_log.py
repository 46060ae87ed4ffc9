"""The applied log (observer_agent.replicas.log): compaction and the merge of a leader's
entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from observer_agent.replicas.log import ReplicaLog, merge_fetched


def test_log_compaction_keeps_end_index_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "clog" / "1_1" / "log"
    log = ReplicaLog.open(path, keep=10)
    assert (log.end_index, log.end_ts, log.size_bytes) == (0, 0, 24)
    ends = []
    for i in range(1, 96):
        log.append([(i, 1, 1000 + i)])
        ends.append(log.end_index)
        assert len(log.entries) < 20
    assert ends == list(range(1, 96))
    assert log.base_index >= 95 - 20 and log.entry(95) == (95, 1, 1095)
    assert log.entry(log.base_index) is None
    assert log.read(1, 3)[0][0] == log.base_index + 1
    log.close()
    again = ReplicaLog.open(path, keep=10)
    assert (again.base_index, again.entries) == (log.base_index, log.entries)
    assert path.stat().st_size == again.size_bytes
    with pytest.raises(ValueError, match="does not follow"):
        again.append([(97, 1, 0)])
    # A torn last record is cut off on load.
    again.close()
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    torn = ReplicaLog.open(path, keep=10)
    assert torn.end_index == 95 and path.stat().st_size == torn.size_bytes
    # Truncation below the compacted base keeps a consistent, empty log there.
    torn.truncate(90)
    assert (torn.end_index, torn.end_ts) == (90, 1090)
    torn.truncate(5)
    assert (torn.end_index, torn.entries) == (5, [])
    torn.close()
    assert ReplicaLog.open(path, keep=10).end_index == 5


def test_merge_fetched_truncates_divergence_rebases_and_applies_the_cutoff(
    tmp_path: Path,
) -> None:
    def log_with(terms: list[int], name: str) -> ReplicaLog:
        log = ReplicaLog.open(tmp_path / name / "log")
        log.append([(i + 1, t, 100 * (i + 1) + t) for i, t in enumerate(terms)])
        return log

    def leader(terms: list[int]) -> list[tuple[int, int, int]]:
        return [(i, t, 100 * i + t) for i, t in enumerate(terms, start=1)]

    # A follower that took entries 4..5 at term 1 while the leader has 4.. at term 2.
    theirs = [1, 1, 1, 2, 2, 2]
    f = log_with([1, 1, 1, 1, 1], "a")
    assert merge_fetched(f, leader(theirs), 1, 6, True, None) == (True, 3)
    assert f.entries == leader(theirs)
    assert ReplicaLog.open(tmp_path / "a" / "log").entries == f.entries

    # The window [3, 5] starts inside the divergence: cut it, look further back next time.
    g = log_with([1, 1, 1, 1, 1], "b")
    window = [e for e in leader([1, 1, 2, 2, 2, 2]) if e[0] >= 3]
    assert merge_fetched(g, window, 3, 6, True, None) == (False, 0)
    assert g.end_index == 2
    assert merge_fetched(g, leader([1, 1, 2, 2, 2, 2]), 1, 6, True, None) == (True, 4)
    assert g.entries == leader([1, 1, 2, 2, 2, 2])

    # Ahead of a new leader whose log is shorter: cut to its end.
    h = log_with([1, 1, 1, 1, 1], "c")
    assert merge_fetched(h, leader([1, 1, 1]), 1, 3, True, None) == (True, 0)
    assert h.end_index == 3

    # The leader compacted what we miss: restart after its base.
    k = log_with([1, 1], "d")
    assert merge_fetched(k, leader([1] * 12)[9:], 3, 12, False, None) == (True, 3)
    assert (k.base_index, k.end_index, k.entry(10)) == (9, 12, (10, 1, 1001))

    # Only entries at least as old as the cutoff are applied.
    m = log_with([], "e")
    assert merge_fetched(m, leader([1, 1, 1, 1]), 1, 4, False, 250) == (True, 2)
    assert m.end_index == 2
