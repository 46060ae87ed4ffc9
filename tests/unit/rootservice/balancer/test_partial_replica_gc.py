"""The ``partial_replica_gc`` task (rootservice.balancer.partial_replica_gc): a replica
being built that no plan, member list or copy in flight wants is dropped once two more
reports of its server still show it; everything wanted stays. Fakes, no database."""

from __future__ import annotations

from obcommon.clock import FakeClock
from rootservice.balancer.copy_tasks import CopyTask, CopyTasks
from rootservice.balancer.partial_replica_gc import GC_REPORTS, PartialReplicaGc
from rootservice.config import RsSettings
from rootservice.metrics import Metrics
from tests.unit.rootservice.balancer.fakes import (
    FakeEvents,
    FakeGate,
    FakeLs,
    FakeWhitelist,
    NoDbStore,
    info,
    plan,
    server,
)

A, B, C, D, E = (f"127.0.0.1:300{i}" for i in range(1, 6))
K = (1001, 1001)


class Counts:
    """Report counts by server, moved by the test."""

    def __init__(self) -> None:
        self.seq: dict[str, int] = {}

    def report_seq(self, key: str, /) -> int:
        return self.seq.get(key, 0)

    def report(self, key: str, n: int = 1) -> None:
        self.seq[key] = self.seq.get(key, 0) + n


class World:
    """LS K planned on D, B, C (D the unit's new server, a move from A under way); B leads
    with members A, B, C. E is a server the LS has nothing to do with."""

    def __init__(self) -> None:
        self.ls = FakeLs()
        self.ls.plans[K] = plan(K, {D: 1, B: 2, C: 3})
        for s in (A, B, C):
            self.ls.report_table.setdefault(s, {})[K] = info(K, [A, B, C], leader=B)
        self.ls.leaders[K] = B
        self.counts = Counts()
        self.events = FakeEvents()
        self.metrics = Metrics()
        self.gate = FakeGate()
        self.copies = CopyTasks(
            servers=FakeWhitelist(server(A), server(B), server(C), server(D), server(E)),
            ls=self.ls,
            events=self.events,
            store=NoDbStore(),
            clock=FakeClock(),
            settings=RsSettings(),
            metrics=self.metrics,
        )
        self.gc = PartialReplicaGc(
            ls=self.ls,
            counts=self.counts,
            copies=self.copies,
            term=self.gate,
            events=self.events,
            metrics=self.metrics,
            clock=FakeClock(),
        )

    def partial_on(self, srv: str, **kw: object) -> None:
        self.ls.report_table.setdefault(srv, {})[K] = info(
            K,
            [A, B, C],
            in_service=False,
            copy_from=B,
            **kw,  # type: ignore[arg-type]
        )


def test_an_unwanted_partial_replica_is_dropped_after_two_more_reports() -> None:
    w = World()
    w.partial_on(E)
    w.counts.report(E)  # the report that shows it
    assert w.gc.run_once() == 0
    for _ in range(GC_REPORTS - 1):
        w.counts.report(E)
        assert w.gc.run_once() == 0 and w.ls.dropped == {}
    w.counts.report(E)
    assert w.gc.run_once() == 1
    assert w.ls.dropped == {E: [K]}
    [event] = w.events.named("drop_partial_replica")
    assert dict(event.values)["server"] == E
    assert w.metrics.get("partial_replicas_dropped_total") == 1


def test_runs_without_new_reports_drop_nothing() -> None:
    w = World()
    w.partial_on(E)
    for _ in range(10):
        assert w.gc.run_once() == 0
    assert w.ls.dropped == {}


def test_a_replica_built_by_copy_and_in_service_is_still_partial_until_planned() -> None:
    w = World()
    w.ls.report_table[E] = {K: info(K, [A, B, C], in_service=True, copy_from=B)}
    w.gc.run_once()
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 1 and w.ls.dropped == {E: [K]}


def test_wanted_replicas_stay() -> None:
    w = World()
    w.partial_on(D)  # the unit's new server: a planned member being built
    # A member of the leader's list (a member being rebuilt), not planned any more.
    w.partial_on(A)
    # A copy in flight to E (the plan moved on since: the hand-out's task decides).
    w.partial_on(E)
    w.copies.tasks[(K, E)] = CopyTask(K, E, B, A, 0)
    # A replica in service of a member (C leads nothing here but is in the member list).
    w.ls.report_table.setdefault(C, {})[K] = info(K, [A, B, C], leader=B)
    # An LS the layout no longer names.
    w.ls.report_table.setdefault(D, {})[(1002, 1001)] = info((1002, 1001), [D], in_service=False)
    for s in (A, C, D, E):
        w.counts.report(s, 1 + GC_REPORTS)
    w.gc.run_once()
    for s in (A, C, D, E):
        w.counts.report(s, 1 + GC_REPORTS)
    assert w.gc.run_once() == 0 and w.ls.dropped == {}
    # The task ends (forgotten, as a cancel forgets it): E's copy is now unwanted.
    del w.copies.tasks[(K, E)]
    assert w.gc.run_once() == 0
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 1 and w.ls.dropped == {E: [K]}


def test_a_replica_wanted_again_in_between_starts_its_count_afresh() -> None:
    w = World()
    w.partial_on(E)
    w.gc.run_once()
    w.counts.report(E, GC_REPORTS - 1)
    w.gc.run_once()
    w.copies.tasks[(K, E)] = CopyTask(K, E, B, A, 0)  # handed out again
    w.gc.run_once()
    del w.copies.tasks[(K, E)]
    w.counts.report(E)
    assert w.gc.run_once() == 0  # a fresh count, not the old one
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 1


def test_a_standby_drops_nothing_and_forgets_what_it_saw() -> None:
    w = World()
    w.partial_on(E)
    w.gc.run_once()
    w.gate.in_service = False
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 0 and w.ls.dropped == {}
    w.gate.in_service = True
    assert w.gc.run_once() == 0  # counted again from this report on
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 1


def test_a_replica_in_service_that_nothing_wants_is_dropped_too() -> None:
    """A replica created afresh (no copy) on a server no plan or member list names, as a
    spec computed before a CANCEL MIGRATE UNIT can leave one."""
    w = World()
    w.ls.report_table[E] = {K: info(K, [A, B, C, E], in_service=True)}
    w.gc.run_once()
    w.counts.report(E, GC_REPORTS)
    assert w.gc.run_once() == 1 and w.ls.dropped == {E: [K]}
