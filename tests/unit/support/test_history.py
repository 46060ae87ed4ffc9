"""The partition scenarios' history checker (tests/support/history.py), fed histories with
each fault it exists to catch planted, and the same histories without it."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.support.history import (
    History,
    LeaderSeen,
    Statement,
    check,
    read_logs,
    read_replica_logs,
)

S = 1_000_000
LEASE, CHECK, SLACK = 3 * S, S // 10, 2 * S


def _run(h: History) -> list[str]:
    return check(h, lease_us=LEASE, check_us=CHECK, slack_us=SLACK)


def _clean() -> History:
    """a1 cut from the RS from 10 s to 20 s, seen INACTIVE at 14 s, ACTIVE again at 22 s;
    a2 ACTIVE throughout; one statement answered OK and in effect."""
    h = History()
    h.cut("a1", 10 * S)
    for t in range(0, 25):
        a1 = "INACTIVE" if 14 <= t < 22 else "ACTIVE"
        h.samples.append((t * S, {"a1": a1, "a2": "ACTIVE"}))
        if t == 20:
            h.healed(20 * S)
    h.statements.append(Statement(12 * S, "ALTER SYSTEM ADD ZONE 'z9'", "OK", lambda: True))
    return h


def test_a_clean_history_passes() -> None:
    assert _run(_clean()) == []


def test_a_server_inactive_while_its_link_was_whole_is_a_false_expiry() -> None:
    h = _clean()
    h.samples[5][1]["a2"] = "INACTIVE"
    [problem] = _run(h)
    assert "a2 shown INACTIVE at 5000000" in problem and "false expiry" in problem


def test_inactive_within_one_lease_of_the_heal_is_not_a_false_expiry_but_after_it_is() -> None:
    h = _clean()
    # 21 s: 1 s after the heal, within lease + check: the old expiry may still show.
    assert _run(h) == []
    h.samples[23] = (23 * S + CHECK + 1, {"a1": "INACTIVE", "a2": "ACTIVE"})
    problems = _run(h)
    assert problems and "a1 shown INACTIVE" in problems[0]


def test_a_cut_never_seen_inactive_is_a_missed_expiry() -> None:
    h = _clean()
    h.samples = [(t, {**st, "a1": "ACTIVE"}) for t, st in h.samples]
    [problem] = _run(h)
    assert "a1 cut from the RS" in problem and "missed expiry" in problem


def test_a_cut_shorter_than_lease_check_and_slack_needs_no_expiry() -> None:
    h = History()
    h.cut("a1", 10 * S)
    h.healed(10 * S + LEASE + CHECK + SLACK)
    h.samples = [(t * S, {"a1": "ACTIVE"}) for t in range(0, 20)]
    assert _run(h) == []
    h = History()
    h.cut("a1", 10 * S)
    h.healed(10 * S + LEASE + CHECK + SLACK + 1)
    h.samples = [(t * S, {"a1": "ACTIVE"}) for t in range(0, 20)]
    assert "missed expiry" in _run(h)[0]


def test_a_server_not_active_at_the_end_is_reported() -> None:
    h = _clean()
    h.samples.append((30 * S, {"a1": "ACTIVE", "a2": "STOPPED"}))
    [problem] = _run(h)
    assert problem.startswith("a2 is STOPPED at the end")


def test_a_lost_ok_and_a_hang_are_reported() -> None:
    h = _clean()
    h.statements.append(Statement(13 * S, "ALTER SYSTEM ADD ZONE 'z8'", "OK", lambda: False))
    h.statements.append(Statement(14 * S, "ALTER SYSTEM ADD ZONE 'z7'", "HANG"))
    h.statements.append(Statement(15 * S, "ALTER SYSTEM ADD ZONE 'z6'", "OB_ENTRY_EXIST"))
    problems = _run(h)
    assert len(problems) == 2
    assert "'z8'" in problems[0] and "not in effect" in problems[0]
    assert "'z7'" in problems[1] and "no clear answer" in problems[1]


# --- fencing: terms taken and tokens obeyed, read from the processes' logs -----------------

RS1_LOG = """\
2026-11-29T07:00:00.000000Z INFO rs 10.0.0.11:2882 rootservice.ha.election: won the RS lease with epoch 1 (incarnation a1) (previous: epoch 0 held by nobody)
2026-11-29T07:00:10.000000Z ERROR rs 10.0.0.11:2882 rootservice.ha.term: stepping down from epoch 1: lease of epoch 1 not renewed for 2400 ms
"""
RS2_LOG = """\
2026-11-29T07:00:11.000000Z INFO rs 10.0.0.12:2882 rootservice.ha.election: won the RS lease with epoch 2 (incarnation b2) (previous: epoch 1 held by 10.0.0.11:2882)
"""
AGENT_LOG = """\
2026-11-29T07:00:01.000000Z INFO agent 10.0.0.13:2882 observer_agent.fence: obeying the root service of epoch 1 (incarnation a1) (was epoch 0 (incarnation 0))
2026-11-29T07:00:12.000000Z INFO agent 10.0.0.13:2882 observer_agent.fence: obeying the root service of epoch 2 (incarnation b2) (was epoch 1 (incarnation a1))
"""
# The same epoch taken again by the deposed RS, with another incarnation, and obeyed.
DOUBLED_RS1 = (
    "2026-11-29T07:00:13.000000Z INFO rs 10.0.0.11:2882 rootservice.ha.election: won the RS "
    "lease with epoch 2 (incarnation c3) (previous: epoch 1 held by 10.0.0.11:2882)\n"
)
DOUBLED_AGENT = (
    "2026-11-29T07:00:14.000000Z INFO agent 10.0.0.13:2882 observer_agent.fence: obeying the "
    "root service of epoch 2 (incarnation c3) (was epoch 2 (incarnation b2))\n"
)


def _recorded(rs1: str = RS1_LOG, agent: str = AGENT_LOG) -> History:
    h = _clean()
    read_logs(h, {"rs1": rs1, "rs2": RS2_LOG}, {"a1": agent})
    return h


def test_the_logs_give_each_term_its_end_and_each_obeyed_token() -> None:
    h = _recorded()
    t0 = 1_795_935_600 * S  # 2026-11-29T07:00:00Z
    assert [(t.at_us - t0, t.rs, t.epoch, t.incarnation) for t in h.took] == [
        (0, "rs1", 1, 0xA1),
        (11 * S, "rs2", 2, 0xB2),
    ]
    assert h.ends == [(t0 + 10 * S, "rs1")]
    assert [(o.at_us - t0, o.epoch) for o in h.obeyed] == [(1 * S, 1), (12 * S, 2)]
    assert _run(h) == []


def test_a_doubled_fencing_token_and_a_lost_ok_are_each_reported() -> None:
    h = _recorded(RS1_LOG + DOUBLED_RS1, AGENT_LOG + DOUBLED_AGENT)
    h.statements.append(Statement(12 * S, "ALTER SYSTEM ADD ZONE 'z8'", "OK", lambda: False))
    problems = _run(h)
    text = "\n".join(problems)
    assert len(problems) == 4, text
    assert "'z8'" in problems[0] and "answered OK" in problems[0]
    assert "epoch 2 taken 2 times" in problems[1] and "doubled fencing token" in problems[1]
    # rs2's term (epoch 2, b2) has not ended when rs1 takes epoch 2 again.
    assert "rs2 (epoch 2 (incarnation b2)) and rs1 (epoch 2 (incarnation c3))" in problems[2]
    assert "two root services at once" in problems[2]
    assert problems[3].startswith("a1 obeyed epoch 2 (incarnation c3)")
    assert "two root services with one epoch" in problems[3]


def test_two_overlapping_terms_a_lower_epoch_obeyed_and_an_unknown_token_are_reported() -> None:
    # rs1 never steps down: its term overlaps rs2's.
    h = _recorded(RS1_LOG.splitlines(keepends=True)[0])
    [problem] = _run(h)
    assert "rs1 (epoch 1 (incarnation a1)) and rs2 (epoch 2 (incarnation b2)) both acted" in problem
    # A killed RS ends its term: recorded, no overlap.
    h.ended("rs1", 1_795_935_600 * S + 10 * S)
    assert _run(h) == []
    h = _recorded(
        agent=AGENT_LOG
        + "2026-11-29T07:00:15.000000Z INFO agent x observer_agent.fence: obeying the root "
        "service of epoch 1 (incarnation a1) (was epoch 2 (incarnation b2))\n"
        + "2026-11-29T07:00:16.000000Z INFO agent x observer_agent.fence: obeying the root "
        "service of epoch 3 (incarnation d4) (was epoch 2 (incarnation b2))\n"
    )
    problems = _run(h)
    assert len(problems) == 2, problems
    assert "a1 obeyed epoch 1 (incarnation a1)" in problems[0] and "after epoch 2" in problems[0]
    assert "epoch 3 (incarnation d4)" in problems[1] and "no RS took" in problems[1]


def test_a_hang_with_its_reason_is_no_clear_answer() -> None:
    h = _clean()
    h.statements.append(Statement(14 * S, "ALTER SYSTEM ADD ZONE 'z7'", "HANG (DEADLINE_EXCEEDED)"))
    [problem] = _run(h)
    assert "'z7'" in problem and "no clear answer" in problem


def _ls_history() -> History:
    """LS 1002_1001: a1 leads term 1 (entries 1-3), then a2 term 2 from 10 s (entries 4-5);
    all three members hold the same log at the end (a1 cut its own tail after the switch)."""
    h = _clean()
    h.leaders += [LeaderSeen(t * S, "1002_1001", 1, "a1") for t in range(0, 9)]
    h.leaders += [LeaderSeen(t * S, "1002_1001", 2, "a2") for t in range(10, 25)]
    log = [(1, 1, 1 * S), (2, 1, 5 * S), (3, 1, 8 * S), (4, 2, 11 * S), (5, 2, 12 * S)]
    for srv in ("a1", "a2", "a3"):
        h.logs[(srv, "1002_1001")] = list(log)
    return h


def test_log_streams_with_one_leader_per_term_and_agreeing_logs_pass() -> None:
    h = _ls_history()
    # A member that has not fetched the last entry yet is behind, not divergent.
    h.logs[("a3", "1002_1001")].pop()
    assert _run(h) == []


def test_two_leaders_of_one_term_are_reported() -> None:
    h = _ls_history()
    h.leaders.append(LeaderSeen(12 * S, "1002_1001", 2, "a3"))
    [problem] = _run(h)
    assert problem.startswith("LS 1002_1001 term 2 led by 2 servers: a2 (seen at 10000000), a3")


def test_a_deposed_leaders_entry_kept_by_a_member_is_reported() -> None:
    # a1, cut off, went on appending in term 1 after a2's term 2 began at 10 s, and a3
    # took that entry instead of a2's: the entry a1 wrote at 13 s is kept at index 4.
    h = _ls_history()
    deposed = [(1, 1, 1 * S), (2, 1, 5 * S), (3, 1, 8 * S), (4, 1, 13 * S)]
    h.logs[("a3", "1002_1001")] = deposed
    problems = _run(h)
    assert len(problems) == 2, problems
    assert problems[0] == (
        "a3 LS 1002_1001: entry 4 of term 1 written at 13000000, after term 2 began at "
        "10000000 (a deposed leader's entry kept)"
    )
    assert problems[1].startswith("LS 1002_1001 entry 4 differs between members: ")
    # Entries of term 1 written before term 2 began are the old leader's, legitimately kept.
    h.logs[("a3", "1002_1001")] = deposed[:3]
    assert _run(h) == []


def test_a_log_whose_terms_go_down_is_reported() -> None:
    h = _ls_history()
    h.logs[("a2", "1002_1001")] = [(1, 1, S), (2, 2, 11 * S), (3, 1, 12 * S)]
    problems = _run(h)
    assert any("entry 3 has term 1 after term 2 at entry 2" in p for p in problems), problems


def test_replica_logs_are_read_from_the_data_directories(tmp_path: Path) -> None:
    rec = struct.Struct("<qqq")
    d = tmp_path / "clog" / "1002_1001"
    d.mkdir(parents=True)
    body = rec.pack(0, 0, 0) + rec.pack(1, 1, 5) + rec.pack(2, 2, 7)
    (d / "log").write_bytes(body + rec.pack(3, 2, 9)[:10])  # a torn last record
    h = History()
    read_replica_logs(h, {"a1": tmp_path})
    assert h.logs == {("a1", "1002_1001"): [(1, 1, 5), (2, 2, 7)]}
