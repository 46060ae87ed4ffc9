"""The partition scenarios' history checker (tests/support/history.py), fed histories with
each fault it exists to catch planted, and the same histories without it."""

from __future__ import annotations

from tests.support.history import History, Statement, check

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
