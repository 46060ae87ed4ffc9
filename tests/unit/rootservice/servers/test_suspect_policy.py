"""The SUSPECT policy (rootservice.servers.suspect_policy): pure functions on
monotonic microseconds, both sides of each boundary."""

from __future__ import annotations

from rootservice.servers.suspect_policy import (
    SUSPECT_CAP_US,
    SuspectState,
    decayed,
    on_expiry,
    on_return,
    restored,
)

S = 1_000_000
BASE = 30 * S
T0 = 1_000 * S


def test_a_return_is_suspect_for_exactly_the_suspect_time() -> None:
    first = on_expiry(SuspectState(), T0, BASE)
    assert first.suspect_time_us == BASE and first.down_since_mono_us == T0
    st = on_return(first, T0 + 11 * S, BASE)
    assert st.is_suspect(T0 + 11 * S)
    assert st.is_suspect(T0 + 11 * S + BASE - 1)
    assert not st.is_suspect(T0 + 11 * S + BASE)
    assert st.down_since_mono_us == 0


def test_a_repeat_within_the_watch_window_doubles_up_to_the_cap() -> None:
    st = on_return(on_expiry(SuspectState(), T0, BASE), T0, BASE)
    # The watch window is [return, return + 2p): its last microsecond is a repeat...
    assert on_expiry(st, T0 + 2 * BASE - 1, BASE).suspect_time_us == 2 * BASE
    # ... its end is not (a clean window after the suspect period: p stays at the floor).
    assert on_expiry(st, T0 + 2 * BASE, BASE).suspect_time_us == BASE
    p, t = BASE, T0
    for _ in range(10):
        st = on_return(on_expiry(st, t + S, BASE), t + 12 * S, BASE)
        t += 12 * S
        p = min(2 * p, SUSPECT_CAP_US)
        assert st.suspect_time_us == p
        assert st.until_mono_us - t == p
    assert p == SUSPECT_CAP_US == 300 * S


def test_clean_windows_halve_down_to_the_floor() -> None:
    cap = SUSPECT_CAP_US
    # Suspect 300 s, then clean windows of 300 s, 150 s, 75 s, 37.5 s.
    assert decayed(cap, 2 * cap - 1, BASE) == cap
    assert decayed(cap, 2 * cap, BASE) == cap // 2
    assert decayed(cap, 2 * cap + cap // 2 - 1, BASE) == cap // 2
    assert decayed(cap, 2 * cap + cap // 2, BASE) == cap // 4
    assert decayed(cap, 2 * cap + cap // 2 + cap // 4 + cap // 8, BASE) == BASE
    assert decayed(cap, 10 * cap, BASE) == BASE
    # Through on_expiry: a return at the cap, then a long clean run, then one expiry.
    st = SuspectState(cap, T0, T0 + cap)
    assert on_expiry(st, T0 + 2 * cap, BASE).suspect_time_us == cap // 2
    assert on_expiry(st, T0 + 2 * cap - 1, BASE).suspect_time_us == cap  # repeat: capped


def test_a_changed_suspect_time_applies_at_once_and_restore_clamps() -> None:
    st = on_return(on_expiry(SuspectState(), T0, BASE), T0, BASE)
    assert on_return(st, T0, 60 * S).until_mono_us == T0 + 60 * S
    r = restored(10 * S, T0, BASE)
    assert r.is_suspect(T0 + 10 * S - 1) and not r.is_suspect(T0 + 10 * S)
    assert r.suspect_time_us == BASE
    assert restored(900 * S, T0, BASE).suspect_time_us == SUSPECT_CAP_US
