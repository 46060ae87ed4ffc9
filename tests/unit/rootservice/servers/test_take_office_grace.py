"""The take-office grace, per server (
rootservice/servers/loader.py ``TakeOfficeGrace``, rootservice/servers/lease_checker.py).

No lease expires for one lease_time after the take office. After it, a server that came back
is judged on its own lease (its grace ended with its first heartbeat), while the candidates
still away keep their rows as long as one came back within half a lease, never past
MAX_GRACE_LEASES leases. Both sides of each boundary: first on plain monotonic microseconds,
then on a real in-process RS with a fake clock (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rootservice.app import RootService
from rootservice.servers.loader import MAX_GRACE_LEASES, TakeOfficeGrace
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import (
    events,
    flush,
    hb,
    hb_status,
    make_rs,
    seed_cluster,
    server_row,
)

LEASE = 10_000_000
T0 = 1_000_000_000


def grace(candidates: set[str]) -> TakeOfficeGrace:
    g = TakeOfficeGrace()
    g.begin(T0 + LEASE, set(candidates))
    return g


def test_no_expiry_in_the_first_lease() -> None:
    g = grace(set())
    assert g.first_lease(T0 + LEASE - 1)
    assert not g.first_lease(T0 + LEASE)


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


# --- on a real RS with a fake clock ----------------------------------------------------------

#: 22 servers: enough returns, each within half a lease of the last, to reach the cap.
MANY = [(f"127.0.0.1:{3001 + i}", f"z{i % 3 + 1}") for i in range(22)]


@pytest.fixture
def restarted(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS that has just taken office again over a table showing every server of MANY
    ACTIVE: all of them are take-office candidates. The clock stands at the take office."""
    rs = make_rs(db_url, tmp_path, seed=False)
    try:
        seed_cluster(rs, MANY)
        rs.identity.bootstrapped = True
        rs.office.do_restart()
        for server, zone in MANY:
            rs.heartbeats.receive_hb(hb(server, zone))
        flush(rs)
        # What a step-down and a take office do to memory (RootOffice._drop_server_state,
        # then do_restart's load).
        rs.whitelist.clear()
        rs.take_office_grace.clear()
        rs.server_loader.load(take_office=True)
        assert rs.take_office_grace.candidates == {s for s, _ in MANY}
        yield rs
    finally:
        rs.shutdown()


def back(rs: RootService, i: int) -> int:
    """Server ``MANY[i]`` heartbeats now; returns the monotonic time."""
    rs.heartbeats.receive_hb(hb(*MANY[i]))
    return rs.clock.monotonic_us()


def to(rs: RootService, mono: int) -> None:
    rs.clock.advance(mono - rs.clock.monotonic_us())


def shown(rs: RootService, i: int) -> str:
    flush(rs)
    row = server_row(rs, MANY[i][0])
    assert row is not None
    return str(row["status"]).upper()


def test_a_server_back_is_judged_on_its_own_lease_while_others_are_held(
    restarted: RootService,
) -> None:
    rs = restarted
    office = rs.clock.monotonic_us()
    to(rs, office + LEASE // 2)
    last = back(rs, 0)  # server 0 comes back, then dies
    # Two more come back, each within half a lease of the last: the grace holds the rest.
    to(rs, office + LEASE - 1)
    back(rs, 1)
    to(rs, office + LEASE * 3 // 2 - 2)
    back(rs, 2)
    to(rs, last + LEASE - 1)
    rs.lease_checker.run_once()
    assert hb_status(rs, MANY[0][0]) is HeartbeatStatus.ALIVE
    to(rs, last + LEASE)
    rs.lease_checker.run_once()
    assert rs.take_office_grace.holds(rs.clock.monotonic_us(), LEASE)
    assert hb_status(rs, MANY[0][0]) is HeartbeatStatus.LEASE_EXPIRED
    assert shown(rs, 0) == "INACTIVE"
    # A server that has not come back is still held: its row as the table had it.
    assert MANY[-1][0] in rs.take_office_grace.candidates
    assert shown(rs, len(MANY) - 1) == "ACTIVE"


def test_a_server_never_back_is_expired_half_a_lease_after_the_last_return(
    restarted: RootService,
) -> None:
    rs = restarted
    office = rs.clock.monotonic_us()
    to(rs, office + LEASE - 2)
    for i in range(len(MANY) - 1):
        back(rs, i)
    last_return = rs.clock.monotonic_us()
    never = MANY[-1][0]
    to(rs, last_return + LEASE // 2 - 1)
    rs.lease_checker.run_once()
    assert never in rs.take_office_grace.candidates
    assert shown(rs, len(MANY) - 1) == "ACTIVE"
    to(rs, last_return + LEASE // 2)
    rs.lease_checker.run_once()
    assert rs.take_office_grace.candidates == set()
    assert shown(rs, len(MANY) - 1) == "INACTIVE"
    assert [e["value1"] for e in events(rs, "lease_expire")] == [never]


def test_the_grace_is_still_capped_at_max_grace_leases(restarted: RootService) -> None:
    rs = restarted
    office = rs.clock.monotonic_us()
    cap = office + MAX_GRACE_LEASES * LEASE
    never = len(MANY) - 1
    # One return every LEASE / 2 - 1 from the first lease's end on: it would hold for ever.
    i = 0
    t = office + LEASE - 1
    while t < cap - 1:
        to(rs, t)
        back(rs, i)
        rs.lease_checker.run_once()
        i += 1
        t += LEASE // 2 - 1
    to(rs, cap - 1)
    back(rs, i)
    assert i < never, "not enough servers to reach the cap"
    rs.lease_checker.run_once()
    assert shown(rs, never) == "ACTIVE"
    to(rs, cap)
    rs.lease_checker.run_once()
    assert MANY[never][0] not in rs.take_office_grace.candidates
    assert shown(rs, never) == "INACTIVE"


def test_a_candidate_whose_first_request_waits_in_the_queue_is_not_expired(
    restarted: RootService,
) -> None:
    """The grace ends while the first request of one candidate waits in the RS's own lease
    queue (an overloaded RS has not handled it yet): that candidate keeps its row and stays a
    candidate, tick after tick; one with nothing waiting is written INACTIVE. Once handled,
    the waiting one is alive and was never expired."""
    rs = restarted
    office = rs.clock.monotonic_us()
    waiting, silent = MANY[0], MANY[1]
    for i in range(2, len(MANY)):
        back(rs, i)
    req = hb(*waiting)
    answers: list[object] = []
    rs.lease_queue.submit(
        waiting[0], lambda w: rs.heartbeats.receive_hb(req, None, w), answers.append, first=True
    )
    cap = office + MAX_GRACE_LEASES * LEASE
    to(rs, cap)  # past every grace
    for _ in range(3):
        rs.lease_checker.run_once()
        rs.clock.advance(rs.settings.heartbeat_check_interval)
    assert rs.take_office_grace.candidates == {waiting[0]}
    assert shown(rs, 0) == "ACTIVE"
    assert shown(rs, 1) == "INACTIVE"
    assert rs.lease_queue.run_turn() == 1 and len(answers) == 1
    rs.lease_checker.run_once()
    assert hb_status(rs, waiting[0]) is HeartbeatStatus.ALIVE
    assert rs.take_office_grace.candidates == set()
    # The others came back at the take office and sent nothing since: they expired too.
    expired = [e["value1"] for e in events(rs, "lease_expire")]
    assert silent[0] in expired and waiting[0] not in expired
    assert rs.metrics.get("leases_expired_total") == len(expired)
