"""The take-office grace lasts while servers keep coming back (issue 14 item 1,
rootservice/servers/loader.py ``TakeOfficeGrace.holds``): one lease_time, then extended while
a candidate came back within half a lease, never past MAX_GRACE_LEASES leases; both sides of
each boundary, on plain monotonic microseconds."""

from __future__ import annotations

from rootservice.servers.loader import MAX_GRACE_LEASES, TakeOfficeGrace

LEASE = 10_000_000
T0 = 1_000_000_000


def grace(candidates: set[str]) -> TakeOfficeGrace:
    g = TakeOfficeGrace()
    g.begin(T0 + LEASE, set(candidates))
    return g


def test_one_lease_without_returns() -> None:
    g = grace({"a", "b"})
    assert g.holds(T0 + LEASE - 1, LEASE)
    assert not g.holds(T0 + LEASE, LEASE)


def test_extended_while_candidates_come_back_within_half_a_lease() -> None:
    g = grace({"a", "b", "c"})
    g.candidates.discard("a")
    g.returned(T0 + LEASE - 1)
    assert g.holds(T0 + LEASE - 1 + LEASE // 2 - 1, LEASE)
    assert not g.holds(T0 + LEASE - 1 + LEASE // 2, LEASE)


def test_no_extension_once_every_candidate_is_back() -> None:
    g = grace({"a"})
    g.candidates.discard("a")
    g.returned(T0 + LEASE - 1)
    assert not g.holds(T0 + LEASE, LEASE)


def test_never_past_the_cap() -> None:
    g = grace({"a", "b"})
    cap = T0 + MAX_GRACE_LEASES * LEASE
    g.returned(cap - 1)
    assert g.holds(cap - 1, LEASE)
    assert not g.holds(cap, LEASE)
