"""ALTER SYSTEM SWITCH ROOTSERVICE LEADER's handover in the election
(:meth:`rootservice.ha.handover.Handover.hand_over`), driven round by round with a FakeClock
standing in for both the RS's clock and the database's, on SQLite and PostgreSQL: the
successor takes office at its next round, the others do not compete until the reservation
runs out, a dead successor leaves a normal election after it, and every refusal leaves the
leader in office."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from tests.unit.rootservice.ha.test_election import LEASE, RENEW, Node, lease_row, make_node


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def trio(engine: sa.Engine, clock: FakeClock) -> Iterator[tuple[Node, Node, Node]]:
    """Leader a (epoch 1), standbys b and c that have each run a round."""
    a, b, c = (make_node(engine, clock, f"127.0.0.1:{p}") for p in (2881, 2882, 2883))
    assert a.election.run_once()
    assert not b.election.run_once() and not c.election.run_once()
    yield a, b, c


class Flush:
    """The ``before_resigning`` callback: records whether the term was still in office."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.epochs: list[int] = []

    def __call__(self) -> None:
        self.epochs.append(self.node.term.epoch)


def test_the_successor_takes_office_at_once_and_the_others_do_not_compete(
    trio: tuple[Node, Node, Node], clock: FakeClock
) -> None:
    a, b, c = trio
    flush = Flush(a)
    assert a.handover.hand_over(b.addr, flush) == 1
    # The queued changes were written while still in office; then a stepped down.
    assert flush.epochs == [1]
    assert a.term.epoch == 0 and a.stepped_down == [f"handing the office over to {b.addr}"]
    assert a.term.leader == b.addr
    row = lease_row(a.store.engine)
    assert (row.epoch, row.holder, row.successor) == (1, a.addr, b.addr)
    assert row.expire_us == clock.now_us() and row.handover_expire_us == clock.now_us() + LEASE
    # Neither the old leader nor c takes the free lease: it is reserved for b.
    clock.advance(RENEW)
    assert not a.election.run_once() and not c.election.run_once()
    assert c.term.leader == b.addr and c.elected == [] and a.elected == [1]
    # b takes office at its next round, well before the old lease would have run out.
    assert b.election.run_once()
    assert b.elected == [2]
    row = lease_row(a.store.engine)
    assert (row.epoch, row.holder, row.successor, row.handover_expire_us) == (2, b.addr, "", 0)
    for _ in range(3):
        clock.advance(RENEW)
        assert b.election.run_once()
        assert not a.election.run_once() and not c.election.run_once()
    assert c.term.leader == b.addr == a.term.leader


def test_a_successor_that_dies_leaves_a_normal_election_after_the_reservation(
    trio: tuple[Node, Node, Node], clock: FakeClock
) -> None:
    a, b, c = trio
    a.handover.hand_over(b.addr, Flush(a))
    # b never runs another round. Both sides of the reservation's end.
    clock.advance(LEASE - 1)
    assert not c.election.run_once() and not a.election.run_once()
    clock.advance(1)
    assert c.election.run_once()
    assert c.elected == [2] and lease_row(c.store.engine).successor == ""
    # b comes back: a standby like any other.
    assert not b.election.run_once()
    assert b.term.leader == c.addr


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ("127.0.0.1:2881", "OB_OP_NOT_ALLOW"),  # the leader itself
        ("127.0.0.1:2999", "OB_ENTRY_NOT_EXIST"),  # never a root service
    ],
)
def test_refusals_leave_the_leader_in_office(
    trio: tuple[Node, Node, Node], clock: FakeClock, target: str, code: str
) -> None:
    a, _, _ = trio
    before = lease_row(a.store.engine)
    flush = Flush(a)
    with pytest.raises(ObError) as e:
        a.handover.hand_over(target, flush)
    assert e.value.name == code
    assert flush.epochs == [] and a.term.epoch == 1 and a.stepped_down == []
    assert lease_row(a.store.engine) == before


def test_a_standby_not_seen_within_a_lease_is_refused(
    trio: tuple[Node, Node, Node], clock: FakeClock
) -> None:
    a, b, c = trio
    # b's last round is exactly one lease old: still alive; c's one microsecond more.
    clock.advance(1)
    assert not b.election.run_once()
    clock.advance(LEASE)
    assert a.election.run_once()
    with pytest.raises(ObError) as e:
        a.handover.hand_over(c.addr, Flush(a))
    assert e.value.name == "OB_OP_NOT_ALLOW" and "not alive" in e.value.message
    assert a.term.epoch == 1
    assert a.handover.hand_over(b.addr, Flush(a)) == 1
    assert b.election.run_once()


def test_only_the_leader_hands_over(trio: tuple[Node, Node, Node]) -> None:
    a, b, c = trio
    with pytest.raises(ObError) as e:
        b.handover.hand_over(c.addr, Flush(b))
    assert e.value.name == "OB_RS_NOT_MASTER"
    assert a.term.epoch == 1 and lease_row(a.store.engine).successor == ""


def test_a_handover_after_losing_the_lease_is_refused(
    trio: tuple[Node, Node, Node], clock: FakeClock
) -> None:
    a, b, c = trio
    # b took the lease while a (paused, unsupervised) still believes it leads.
    clock.advance(LEASE)
    assert b.election.run_once() and b.elected == [2]
    assert not c.election.run_once()  # seen alive
    assert a.term.epoch == 1
    with pytest.raises(ObError) as e:
        a.handover.hand_over(c.addr, Flush(a))
    assert e.value.name == "OB_RS_NOT_MASTER"
    row = lease_row(a.store.engine)
    assert (row.epoch, row.holder, row.successor) == (2, b.addr, "")
    # a stepped down before recording: it stands by.
    assert a.term.epoch == 0
