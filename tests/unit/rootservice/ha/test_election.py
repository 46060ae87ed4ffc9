"""The RS election on the lease row, driven round by round with a FakeClock standing in for
both the RS's clock and the database's (docs/design/ha.md#fenced-writes), on SQLite and
PostgreSQL. PostgreSQL-only tests cover the row locks: a take-over waits for the old
leader's fenced transactions, and two candidates racing for an empty lease."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from rootservice.api.dispatch import execute_sql
from rootservice.db import event_repo, lease_repo
from rootservice.ha.election import Election, merge_rs_list
from rootservice.ha.handover import Handover
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term, lease_timings
from rootservice.metrics import Metrics
from tests.support.harness import LEASE as HB_LEASE
from tests.support.harness import (
    ROOT,
    SEEDED,
    error_name,
    flush,
    hb,
    heartbeat_all,
    make_rs,
    server_row,
)
from tests.support.harness import events as event_rows

S = 1_000_000
LEASE = 10 * S
RENEW, MARGIN = lease_timings(LEASE)


class RecordingTerm(Term):
    """A Term that records the reasons of the step-downs it accepted."""

    def __init__(self, clock: FakeClock, addr: str) -> None:
        super().__init__(clock, address=lambda: addr, lease_time=lambda: LEASE)
        self.deposed_now: list[str] = []

    def request_step_down(self, reason: str, epoch: int | None = None) -> bool:
        done = super().request_step_down(reason, epoch)
        if done:
            self.deposed_now.append(reason)
        return done


@dataclass
class Node:
    """One RS's election with its callbacks recorded."""

    addr: str
    term: RecordingTerm
    store: MetaStore
    election: Election
    elected: list[int] = field(default_factory=list)
    stepped_down: list[str] = field(default_factory=list)
    fail_take_office: bool = False

    @property
    def deposed_now(self) -> list[str]:
        return self.term.deposed_now

    @property
    def handover(self) -> Handover:
        return Handover(self.election)


def make_node(
    engine: sa.Engine, clock: FakeClock, addr: str, metrics: Metrics | None = None
) -> Node:
    ip, port = addr.rsplit(":", 1)
    term = RecordingTerm(clock, addr)
    store = MetaStore(engine, (ip, int(port)), term)
    node: Node

    def elected(epoch: int) -> None:
        node.elected.append(epoch)
        if node.fail_take_office:
            raise ObError("OB_ERR_SYS", detail="injected")

    node = Node(
        addr,
        term,
        store,
        Election(
            store,
            term,
            clock,
            lease_time=lambda: LEASE,
            on_elected=elected,
            on_step_down=lambda why: node.stepped_down.append(why),
            db_clock=clock,
            metrics=metrics,
        ),
    )
    return node


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def nodes(engine: sa.Engine, clock: FakeClock) -> Iterator[tuple[Node, Node]]:
    yield make_node(engine, clock, "127.0.0.1:2881"), make_node(engine, clock, "127.0.0.1:2882")


def lease_row(engine: sa.Engine) -> lease_repo.RsLease:
    with engine.connect() as conn:
        return lease_repo.read_lease(conn)


def insert_event(node: Node) -> None:
    with node.store.txn() as conn:
        event_repo.insert_events(
            conn, [event_repo.Event(1, "test", "write", (("epoch", node.store.epoch),))], ("x", 1)
        )


def events(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                sa.text("SELECT value1 FROM __all_rootservice_event_history ORDER BY id")
            )
        ]


def test_lease_timings_and_rs_list() -> None:
    assert lease_timings(10 * S) == (2 * S, 2 * S)
    assert lease_timings(2 * S) == (400_000, 400_000)
    assert lease_timings(60 * S) == (2 * S, 12 * S)
    assert merge_rs_list("", "a:1") == ["a:1"]
    assert merge_rs_list("a:1;b:2", "a:1") == ["b:2", "a:1"]
    assert merge_rs_list("a:1;b:2", "c:3") == ["a:1", "b:2", "c:3"]
    many = ";".join(f"h:{i}" for i in range(20))
    assert merge_rs_list(many, "me:1", keep=3) == ["h:18", "h:19", "me:1"]


def test_the_migration_creates_an_empty_lease(engine: sa.Engine) -> None:
    assert lease_row(engine) == lease_repo.RsLease(0, "", 0, 0)


def test_first_round_takes_an_empty_lease(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    a, _ = nodes
    assert a.election.run_once()
    assert a.elected == [1] and a.term.epoch == 1 and a.term.leader == a.addr
    now = clock.now_us()
    row = lease_row(a.store.engine)
    assert row.incarnation == a.term.incarnation > 0
    assert row.pg_timeline == (1 if a.store.engine.dialect.name == "postgresql" else None)
    assert dataclasses.replace(row, incarnation=0, pg_system_id=None, pg_timeline=None) == (
        lease_repo.RsLease(1, a.addr, now + LEASE, now)
    )


def test_standby_takes_office_only_after_expiry_by_the_database_clock(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    a, b = nodes
    assert a.election.run_once()
    assert not b.election.run_once()
    assert b.term.leader == a.addr and b.elected == []
    clock.advance(LEASE - 1)
    assert not b.election.run_once()
    clock.advance(1)  # expire_us is exclusive: the lease has run out at exactly expire_us
    assert b.election.run_once()
    assert b.elected == [2] and lease_row(b.store.engine).holder == b.addr
    # The old leader's next renewal finds the new epoch: it steps down at once, and learns
    # who leads.
    assert not a.election.run_once()
    assert a.term.epoch == 0 and a.store.epoch == 0
    assert len(a.deposed_now) == 1 and "epoch 2" in a.deposed_now[0]
    assert a.stepped_down == a.deposed_now
    assert a.term.leader == b.addr
    # ...and stays a standby while the new leader renews.
    for _ in range(20):
        clock.advance(RENEW)
        assert b.election.run_once()
        assert not a.election.run_once()
    assert lease_row(a.store.engine).epoch == 2


def test_renewals_keep_the_lease_for_ever(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    a, b = nodes
    a.term.supervise()
    assert a.election.run_once()
    for _ in range(50):
        clock.advance(RENEW)
        assert a.election.run_once()
        assert not b.election.run_once()
        assert a.term.guard() is None
    assert a.elected == [1] and a.deposed_now == []
    assert lease_row(a.store.engine).expire_us == clock.now_us() + LEASE


def test_no_renewal_within_the_margin_steps_down(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    a, _ = nodes
    a.term.supervise()
    assert a.election.run_once()
    clock.advance(LEASE - MARGIN - 1)
    assert a.term.guard() is None and not a.election.check_lease()
    clock.advance(1)
    assert "not renewed" in (a.term.guard() or "")
    assert a.election.check_lease()
    assert a.term.epoch == 0 and a.store.epoch == 0 and len(a.deposed_now) == 1
    # The clean-up waits for the election thread (the next round).
    assert a.stepped_down == []
    # Nothing can be written any more, without asking the database.
    with pytest.raises(ObError) as e:
        insert_event(a)
    assert e.value.name == "OB_RS_NOT_MASTER" and a.store.rejected_writes == 1
    # The next round cleans up, then, its own lease being the one in the row, takes office
    # again with a new epoch (a fresh term, loaded from scratch).
    assert a.election.run_once()
    assert a.stepped_down == a.deposed_now and a.elected == [1, 2]


def test_unsupervised_leader_ignores_the_margin(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    a, _ = nodes
    assert a.election.run_once()
    clock.advance(10 * LEASE)
    assert a.term.guard() is None and not a.election.check_lease()


DEAD_DB = "sqlite:////nonexistent-dir/none/x.db"


def test_a_failed_renewal_is_retried_while_the_lease_is_trusted(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    # The database refuses one renewal (a dropped connection): the term goes on, and the
    # next round renews it - no step-down, no new epoch, nothing reloaded.
    a, b = nodes
    assert a.election.run_once() and a.elected == [1]
    good = a.store.engine
    a.store.engine = sa.create_engine(DEAD_DB)
    clock.advance(RENEW)
    assert a.election.run_once()
    assert a.term.epoch == 1 and a.deposed_now == [] and a.stepped_down == []
    assert a.election.metrics.get("rs_lease_renewal_failures_total") == 1
    a.store.engine = good
    clock.advance(RENEW)
    # The standby still sees a live lease: the failed renewal wrote nothing, the one before
    # had not run out.
    assert not b.election.run_once() and b.elected == []
    assert a.election.run_once() and a.elected == [1] and a.term.epoch == 1
    assert a.election.metrics.get("rs_lease_renewals_total") == 1
    # Trusted again for a whole lease - margin from this renewal's start.
    assert a.term.trusted_us() == LEASE - MARGIN


@pytest.mark.parametrize("left_us", [1, 0])
def test_failed_renewals_step_down_once_the_lease_is_no_longer_trusted(
    nodes: tuple[Node, Node], clock: FakeClock, left_us: int
) -> None:
    # Both sides of the boundary: with 1 us of trust left a failed renewal is retried; at
    # lease - margin after the last good renewal's start it steps down, and the RS takes
    # office again (its own row, new epoch) once the database is back.
    a, b = nodes
    assert a.election.run_once()
    good = a.store.engine
    a.store.engine = sa.create_engine(DEAD_DB)
    for _ in range(3):
        clock.advance(RENEW)
        assert a.election.run_once()
    clock.advance(LEASE - MARGIN - 3 * RENEW - left_us)
    assert a.term.trusted_us() == left_us
    assert a.election.run_once() == (left_us > 0)
    assert a.election.metrics.get("rs_lease_renewal_failures_total") == (4 if left_us else 3)
    if left_us:
        assert a.term.epoch == 1 and a.deposed_now == []
        return
    assert a.term.epoch == 0 and "renewal failed" in a.deposed_now[0]
    assert a.stepped_down == a.deposed_now
    a.store.engine = good
    assert not b.election.run_once()
    assert a.election.run_once() and a.elected == [1, 2]


def test_a_wildcard_address_never_counts_as_its_own_lease(
    engine: sa.Engine, clock: FakeClock
) -> None:
    # Several hosts may listen on 0.0.0.0:2881: the address is no proof of identity.
    a = make_node(engine, clock, "0.0.0.0:2881")
    assert a.election.run_once()
    assert a.term.request_step_down("test")
    assert not a.election.run_once()
    clock.advance(LEASE)
    assert a.election.run_once() and a.elected == [1, 2]


def test_a_deposed_leader_commits_nothing(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    """The SIGSTOP case in miniature: A is "paused" (no rounds), B takes over after the
    lease, then A "resumes" and writes before its election round notices anything."""
    a, b = nodes
    assert a.election.run_once()
    insert_event(a)
    clock.advance(LEASE)
    assert b.election.run_once()
    insert_event(b)
    # A's write: the fence reads the row FOR KEY SHARE and finds epoch 2.
    for _ in range(3):
        with pytest.raises(ObError) as e:
            insert_event(a)
        assert e.value.name == "OB_RS_NOT_MASTER"
    assert a.store.rejected_writes == 3
    assert a.term.epoch == 0 and len(a.deposed_now) == 1  # one step-down, not three
    assert events(a.store.engine) == ["1", "2"]
    assert not a.election.run_once() and a.stepped_down == a.deposed_now


def test_a_refusal_of_an_old_term_does_not_depose_the_new_one(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    a, _ = nodes
    assert a.election.run_once()
    assert a.election.check_lease() is False
    assert a.term.request_step_down("test", 1)
    assert a.election.run_once() and a.term.epoch == 2
    assert not a.term.request_step_down("a late refusal of epoch 1", 1)
    assert a.term.epoch == 2 and a.store.epoch == 2


def test_failed_take_office_releases_the_lease(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    a, b = nodes
    a.fail_take_office = True
    assert not a.election.run_once()
    assert a.elected == [1] and a.term.epoch == 0 and len(a.stepped_down) == 1
    row = lease_row(a.store.engine)
    assert row.epoch == 1 and row.expire_us == clock.now_us()
    # Released: the standby need not wait for the lease to run out. The fake clock stands
    # still, so without the release no number of rounds could win. Up to three rounds, because
    # PostgreSQL ends a round's session once it idles in its transaction for one renewal
    # interval (2 s here), and a loaded CI machine once left this worker unscheduled that long.
    won = [b.election.run_once() for _ in range(3) if not b.elected]
    assert any(won) and b.elected == [2]


class LateDatabase:
    """The database's clock for :class:`Election`'s ``db_clock``: each reading first runs the
    next of ``steps`` (advance the shared FakeClock: the statement landed that late; swap
    an engine), standing in for a slow database in the middle of a round."""

    def __init__(self, clock: FakeClock, steps: list[Callable[[], None]]) -> None:
        self.clock = clock
        self.steps = steps

    def now_us(self) -> int:
        if self.steps:
            self.steps.pop(0)()
        return self.clock.now_us()


def _late_node(
    engine: sa.Engine, clock: FakeClock, steps: list[Callable[[], None]]
) -> tuple[Node, Metrics]:
    metrics = Metrics()
    node = make_node(engine, clock, "127.0.0.1:2881", metrics)
    node.election.db_clock = LateDatabase(clock, steps)
    node.term.supervise()
    return node, metrics


@pytest.mark.parametrize("late_us", [RENEW + 1, RENEW])
def test_a_take_office_round_slower_than_a_renewal_renews_before_taking_office(
    engine: sa.Engine, clock: FakeClock, late_us: int
) -> None:
    # The take-office statement lands ``late_us`` after the round began. The lease is trusted
    # from the round's start, so past one renewal interval the new leader renews first (one
    # renewal counted) and its trust runs from that renewal; at exactly one interval it
    # takes office on the round's own start.
    a, metrics = _late_node(engine, clock, [lambda: clock.advance(late_us)])
    assert a.election.run_once() and a.elected == [1]
    late = late_us > RENEW
    assert metrics.get("rs_lease_renewals_total") == (1 if late else 0)
    # One microsecond before the round start's trust runs out, and at it.
    clock.advance(LEASE - MARGIN - late_us - 1)
    assert a.term.guard() is None
    clock.advance(1)
    assert (a.term.guard() is None) == late


def test_a_late_take_office_whose_renewal_fails_ends_the_term_unserved(
    engine: sa.Engine, clock: FakeClock
) -> None:
    # The slow round won; the renewal right after it cannot reach the database: the term
    # ends before anything was loaded or served (on_elected never ran), cleaned up in the
    # same round.
    a, _ = _late_node(engine, clock, [])
    dead = sa.create_engine(DEAD_DB)

    def slow_then_lost() -> None:
        clock.advance(RENEW + 1)
        a.store.engine = dead

    a.election.db_clock = LateDatabase(clock, [slow_then_lost])
    assert not a.election.run_once()
    assert a.elected == [] and a.term.epoch == 0
    assert len(a.deposed_now) == 1 and "renewal failed" in a.deposed_now[0]
    assert a.stepped_down == a.deposed_now
    assert lease_row(engine).epoch == 1


def test_release_on_a_clean_stop(nodes: tuple[Node, Node], clock: FakeClock) -> None:
    a, b = nodes
    assert a.election.run_once()
    assert a.election.release()
    assert a.term.epoch == 0 and a.stepped_down == ["stopping"]
    assert not a.election.release()
    assert b.election.run_once() and b.elected == [2]


def test_a_writer_that_never_took_office_is_refused(nodes: tuple[Node, Node]) -> None:
    # Epoch 0 equals the placeholder row of a fresh database: it must still not pass.
    a, _ = nodes
    with pytest.raises(ObError):
        insert_event(a)
    with a.store.engine.begin() as conn, pytest.raises(ObError):
        lease_repo.check_epoch(conn, 0)


# --- PostgreSQL: row locks -----------------------------------------------------------------


def _pg_only(engine: sa.Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks: PostgreSQL only (SQLite serialises whole transactions)")


def _open_fenced_write(
    a: Node,
) -> tuple[threading.Thread, threading.Event, threading.Event, list[str]]:
    """A fenced transaction of ``a`` on a thread that sets ``inside`` once it checked the
    epoch, then holds the lease row until ``release`` (at most 30 s) and commits one event;
    ``outcome`` gets "committed" or the ObError's name."""
    inside = threading.Event()
    release = threading.Event()
    outcome: list[str] = []

    def slow_write() -> None:
        try:
            with a.store.txn() as conn:
                inside.set()
                release.wait(30)
                event_repo.insert_events(
                    conn, [event_repo.Event(1, "test", "write", (("e", 1),))], ("x", 1)
                )
            outcome.append("committed")
        except ObError as e:
            outcome.append(e.name)

    t = threading.Thread(target=slow_write)
    t.start()
    return t, inside, release, outcome


def test_take_over_waits_for_the_old_leaders_fenced_transaction(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    a, b = nodes
    _pg_only(a.store.engine)
    assert a.election.run_once()
    clock.advance(LEASE)
    t, inside, release, outcome = _open_fenced_write(a)
    try:
        assert inside.wait(10)
        # A's transaction holds the row FOR KEY SHARE: B's round hits its lock timeout.
        assert not b.election.run_once()
        assert lease_row(b.store.engine).epoch == 1
        assert b.election.metrics.get("rs_election_errors_total") == 1
    finally:
        release.set()
        t.join(10)
    # A's write began under epoch 1 while epoch 1 was current, so it commits; the bump
    # comes after it.
    assert outcome == ["committed"]
    assert b.election.run_once() and b.elected == [2]


def test_a_renewal_held_past_its_lock_timeout_is_retried_not_a_step_down(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    """Another session holds the lease row FOR UPDATE (as a standby's round does, here for
    longer than the renewal's lock and statement timeouts): the renewal is cancelled by
    PostgreSQL, a passing error, so the leader keeps its term and the next round renews."""
    a, b = nodes
    _pg_only(a.store.engine)
    assert a.election.run_once()
    with b.store.engine.connect() as other, other.begin():
        lease_repo.read_lease(other, lock=True)
        clock.advance(RENEW)
        assert a.election.run_once(), a.deposed_now
    assert a.deposed_now == [] and a.term.epoch == 1
    assert a.election.metrics.get("rs_lease_renewal_failures_total") == 1
    clock.advance(RENEW)
    assert a.election.run_once() and a.elected == [1]
    assert a.election.metrics.get("rs_lease_renewals_total") == 1


def test_the_leaders_renewal_does_not_wait_for_its_own_fenced_transactions(
    nodes: tuple[Node, Node], clock: FakeClock
) -> None:
    """A fenced transaction longer than a renewal round (a big BOOTSTRAP, a slow database)
    must not make the leader depose itself: the renewal's UPDATE keeps the epoch, so it need
    not wait for the transactions that checked it (they lock the row FOR KEY SHARE), while a
    take-over's FOR UPDATE still waits for them (the test above)."""
    a, _ = nodes
    _pg_only(a.store.engine)
    assert a.election.run_once()
    t, inside, release, outcome = _open_fenced_write(a)
    try:
        assert inside.wait(10)
        clock.advance(RENEW)
        assert a.election.run_once(), a.deposed_now
        assert a.deposed_now == []
        assert a.election.metrics.get("rs_lease_renewals_total") == 1
        # Renewed while the fenced transaction still holds its lock.
        assert t.is_alive() and outcome == []
        assert lease_row(a.store.engine).renew_us == clock.now_us()
    finally:
        release.set()
        t.join(30)
    assert outcome == ["committed"]


def test_fenced_transactions_limit_idle_time(engine: sa.Engine, clock: FakeClock) -> None:
    _pg_only(engine)
    a = make_node(engine, clock, "127.0.0.1:2881")
    a.store.idle_timeout_us = lambda: 3 * S
    assert a.election.run_once()
    with a.store.txn() as conn:
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "3s"
    with a.store.read() as conn:
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "0"


def test_election_rounds_bound_their_waits(engine: sa.Engine, clock: FakeClock) -> None:
    """A round never waits long for the lease row, nor holds it long if this process is
    paused mid-round (PostgreSQL ends an idle transaction's session); a renewal's idle bound
    ends before its lease could run out."""
    _pg_only(engine)
    a = make_node(engine, clock, "127.0.0.1:2881")
    seen: list[dict[str, str]] = []
    names = ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")

    def spy(conn: sa.Connection) -> int:
        seen.append({n: str(conn.exec_driver_sql(f"SHOW {n}").scalar()) for n in names})
        return clock.now_us()

    a.election.rounds.db_now = spy  # type: ignore[method-assign]
    assert a.election.run_once()
    clock.advance(RENEW)
    assert a.election.run_once()
    # Taking office: 2 s each (the renew interval of the 10 s lease). Renewing: the idle
    # bound is lease - margin - renew = 6 s, so a leader starved of CPU for a few seconds
    # keeps its session (its lock is gone before its lease could run out).
    assert seen == [dict.fromkeys(names, "2s"), {**dict.fromkeys(names, "2s"), names[2]: "6s"}]


def race_rounds(elections: list[Election]) -> list[bool]:
    """One round of each election, all released at the same instant from their own threads;
    returns who won."""
    barrier = threading.Barrier(len(elections))
    won = [False] * len(elections)

    def race(i: int) -> None:
        barrier.wait(10)
        won[i] = elections[i].run_once()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(elections))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return won


def test_candidates_racing_for_an_empty_lease_elect_exactly_one(
    engine: sa.Engine, clock: FakeClock
) -> None:
    _pg_only(engine)
    trials = 10
    for trial in range(trials):
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE __all_service_epoch SET svr_ip = '', svr_port = 0, lease_expire_time = 0"
            )
        racers = [make_node(engine, clock, f"127.0.0.1:{3000 + i}") for i in range(4)]
        won = race_rounds([r.election for r in racers])
        assert sum(won) == 1, f"trial {trial}: {won}"
        winner = racers[won.index(True)]
        assert lease_row(engine).holder == winner.addr
        assert lease_row(engine).epoch == trial + 1
        assert all(r.term.leader == winner.addr for r in racers if r is not winner)


# --- the RootService around the election (in-process, FakeClock, no timers running) ----------


def test_step_down_drops_state_stops_timers_and_a_new_term_loads_afresh(
    db_url: str, tmp_path: Path
) -> None:
    rs = make_rs(db_url, tmp_path)
    rs.timers.enabled = True
    rs.timers.scheduler.start(paused=True)  # jobs are registered but never run
    try:
        rs.timers.start(rs.leader_tasks())
        term_jobs = {j.id for j in rs.timers.scheduler.get_jobs()}
        assert {"heartbeat_checker", "persist_queue", "check_all_server"} <= term_jobs
        heartbeat_all(rs)
        flush(rs)
        rs.persist.add_event(event_repo.Event(rs.clock.now_us(), "test", "queued_by_term_1"))
        dropped: list[str] = []
        rs.office.forget.append(lambda: dropped.append("component"))

        assert rs.term.request_step_down("test")
        # At once: a follower that writes nothing.
        assert rs.term.state is RsState.NOT_MASTER and rs.store.epoch == 0
        assert error_name(rs.heartbeats.receive_hb, hb(*SEEDED[0])) == "OB_RS_NOT_MASTER"
        for statement in (
            f"ALTER SYSTEM START SERVER '{SEEDED[0][0]}'",
            "ALTER SYSTEM SET lease_time = '9s'",
        ):
            assert execute_sql(rs, statement, ROOT).error.name == "OB_RS_NOT_MASTER"
        assert dropped == []

        # The election round cleans up (timers, memory, queue), then - the lease row naming
        # this RS - takes office again with a new epoch and a fresh load.
        assert rs.election.run_once()
        assert dropped == ["component"]
        assert rs.store.epoch == 2 and rs.term.state is RsState.FULL_SERVICE
        counts = rs.whitelist.counts()
        assert counts["servers"] == len(SEEDED) and counts["alive"] == 0
        assert {j.id for j in rs.timers.scheduler.get_jobs()} == term_jobs
        flush(rs)
        assert event_rows(rs, "queued_by_term_1") == []
        assert [e["value1"] for e in event_rows(rs, "rs_take_office")] == ["1", "2"]
    finally:
        rs.shutdown()


def test_a_new_term_never_writes_a_live_server_inactive_during_the_grace(
    db_url: str, tmp_path: Path
) -> None:
    rs = make_rs(db_url, tmp_path)
    try:
        heartbeat_all(rs)
        flush(rs)
        assert {server_row(rs, s)["status"] for s, _ in SEEDED} == {"ACTIVE"}
        rs.term.request_step_down("test")
        assert rs.election.run_once() and rs.whitelist.counts()["alive"] == 0
        flush(rs)
        # Not proven alive yet, but the table keeps showing them ACTIVE during the grace,
        # and CheckAllServerTask does not "repair" that.
        rs.check_all_server.run_once()
        flush(rs)
        assert {server_row(rs, s)["status"] for s, _ in SEEDED} == {"ACTIVE"}
        (first, zone), *rest = SEEDED
        rs.heartbeats.receive_hb(hb(first, zone))
        rs.clock.advance(HB_LEASE - 1)
        assert rs.lease_checker.run_once() == 0
        flush(rs)
        assert {server_row(rs, s)["status"] for s, _ in SEEDED} == {"ACTIVE"}
        # The grace is over: those that never heartbeated become INACTIVE, with an event.
        rs.clock.advance(1)
        rs.heartbeats.receive_hb(hb(first, zone))
        assert rs.lease_checker.run_once() == len(rest)
        flush(rs)
        assert server_row(rs, first)["status"] == "ACTIVE"
        assert {server_row(rs, s)["status"] for s, _ in rest} == {"INACTIVE"}
        expired = {e["value1"] for e in event_rows(rs, "lease_expire")}
        assert expired == {s for s, _ in rest}
    finally:
        rs.shutdown()


class RenewalMachine(RuleBasedStateMachine):
    """One RS's rounds against a database that comes and goes, beside a pure model of what
    :meth:`LeaseRenewal.renew` promises: a leader keeps its term through failed renewals until
    ``lease_time - margin`` after its last good renewal's start, steps down at the first
    failed round past that, and takes office again (a new term; the row is its own) at the
    first round that reaches the database."""

    engine: sa.Engine
    examples = 0

    @initialize()
    def start(self) -> None:
        # Each example starts an hour of fake time after the last, so the row left by the
        # previous example (same address, so "its own") never looks like another's live lease.
        RenewalMachine.examples += 1
        self.clock = FakeClock(start_us=1_767_225_600_000_000 + RenewalMachine.examples * 3_600 * S)
        self.node = make_node(self.engine, self.clock, "127.0.0.1:2881")
        self.good = self.node.store.engine
        self.dead = sa.create_engine(DEAD_DB)
        self.up = True
        self.leader = False
        self.renewed = 0
        self.terms = 0

    def teardown(self) -> None:
        if hasattr(self, "dead"):
            self.dead.dispose()

    @rule(up=st.booleans())
    def database(self, up: bool) -> None:
        self.up = up
        self.node.store.engine = self.good if up else self.dead

    @rule(us=st.one_of(st.integers(0, 3 * RENEW), st.sampled_from([RENEW, LEASE - MARGIN])))
    def advance(self, us: int) -> None:
        self.clock.advance(us)

    @rule()
    def round(self) -> None:
        now = self.clock.monotonic_us()
        got = self.node.election.run_once()
        if self.up:
            if not self.leader:
                self.terms += 1
            self.leader, self.renewed = True, now
        elif self.leader and now - self.renewed >= LEASE - MARGIN:
            self.leader = False
        assert got == self.leader

    @invariant()
    def agrees(self) -> None:
        assert (self.node.term.epoch != 0) == self.leader
        assert len(self.node.elected) == self.terms
        if self.leader:
            assert self.node.term.trusted_us() == max(
                0, LEASE - MARGIN - (self.clock.monotonic_us() - self.renewed)
            )


def test_renewals_through_database_failures_match_the_model(engine: sa.Engine) -> None:
    RenewalMachine.engine = engine
    run_state_machine_as_test(
        RenewalMachine,
        settings=settings(max_examples=40, stateful_step_count=30, deadline=None),
    )
