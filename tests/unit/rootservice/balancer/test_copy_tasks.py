"""CopyTasks built from fakes (docs/design/migration.md, disaster recovery): the per-destination
throttle, retries from another member, resends of forgotten copies, task ends and CANCEL
DELETE's drops. No database and no RootService."""

from __future__ import annotations

from typing import Any

import pytest

from obcommon.clock import FakeClock
from rootservice.balancer.copy_tasks import (
    COPY_FAILED,
    COPY_READY,
    COPY_REPLACED,
    CopyTasks,
    CopyWatch,
)
from rootservice.config import RsSettings
from rootservice.metrics import Metrics
from rootservice.servers.status import HeartbeatStatus
from tests.unit.rootservice.balancer.fakes import (
    FakeEvents,
    FakeGate,
    FakeLs,
    FakeWaker,
    FakeWhitelist,
    NoDbStore,
    info,
    plan,
    server,
)

A, B, C, D = (f"127.0.0.1:300{i}" for i in range(1, 5))
MS = 1000


def row(key: tuple[int, int], src: str | None, dest: str | None, old: str = A) -> dict[str, Any]:
    def split(s: str | None) -> tuple[str | None, int | None]:
        if s is None:
            return None, None
        ip, _, port = s.rpartition(":")
        return ip, int(port)

    (si, sp), (di, dp), (oi, op) = split(src), split(dest), split(old)
    return {
        "tenant_id": key[0],
        "ls_id": key[1],
        "src_svr_ip": si,
        "src_svr_port": sp,
        "dest_svr_ip": di,
        "dest_svr_port": dp,
        "old_svr_ip": oi,
        "old_svr_port": op,
        "reason": "server deleting",
    }


class World:
    """A (deleting) holds a replica of each LS with B and C; B leads; D is the destination."""

    def __init__(self, keys: list[tuple[int, int]], *, a_alive: bool = True) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.events = FakeEvents()
        self.ls = FakeLs()
        a = server(A, deleting=True, hb=None if a_alive else HeartbeatStatus.PERMANENT_OFFLINE)
        self.servers = FakeWhitelist(a, server(B, "z2"), server(C, "z3"), server(D))
        for k in keys:
            self.ls.plans[k] = plan(k, {D: 1, B: 2, C: 3})
            for s in (A, B, C):
                self.ls.report_table.setdefault(s, {})[k] = info(k, [A, B, C], leader=B)
            self.ls.leaders[k] = B
        self.copies = CopyTasks(
            servers=self.servers,
            ls=self.ls,
            events=self.events,
            store=NoDbStore(),
            clock=self.clock,
            settings=RsSettings(migration_concurrency_per_server=2, rpc_timeout="200ms"),
            metrics=self.metrics,
        )

    def report_on_d(self, k: tuple[int, int], **kw: Any) -> None:
        self.ls.report_table.setdefault(D, {})[k] = info(k, [A, B, C], **kw)


KEYS = [(1001, 1001), (1001, 1002), (1001, 1003)]


def test_at_most_the_concurrency_limit_builds_on_one_destination() -> None:
    w = World(KEYS)
    assert w.copies.hand_out([row(k, B, D) for k in KEYS]) == 2
    assert [spec.copy_from for _, [spec] in w.ls.applied] == [B, B]
    # each destination was made a learner on its source first
    assert w.ls.announced == [(KEYS[0], D, B), (KEYS[1], D, B)]
    assert len(w.copies) == 2 and len(w.events.named("migrate_replica")) == 2
    assert w.metrics.get("replica_tasks_total") == 2
    # both build on D: the third waits
    for k in KEYS[:2]:
        w.report_on_d(k, in_service=False, copy_from=B)
    assert w.copies.hand_out([row(k, B, D) for k in KEYS]) == 0
    # one is built: the third goes
    w.report_on_d(KEYS[0], in_service=True, copy_from=B)
    assert w.copies.hand_out([row(k, B, D) for k in KEYS]) == 1
    assert w.ls.applied[-1][1][0].ls_id == KEYS[2][1]


def test_a_failed_copy_is_sent_again_from_another_healthy_member() -> None:
    w = World(KEYS[:1], a_alive=False)
    k = KEYS[0]
    assert w.copies.hand_out([row(k, B, D)]) == 1
    w.report_on_d(k, in_service=False, copy_from=B, build_error="checksum mismatch")
    assert w.copies.hand_out([row(k, B, D)]) == 1
    assert w.ls.applied[-1][1][0].copy_from == C  # A is offline for good, B failed
    assert w.ls.announced[-1] == (k, D, C)
    task = w.copies.tasks[(k, D)]
    assert (task.src, task.attempts, task.tried) == (C, 2, {B})
    assert len(w.events.named("migrate_replica")) == 1


def test_a_stalled_copy_is_sent_again_from_another_healthy_member() -> None:
    # The lag detector found its bytes still for twice agent_lag_timeout.
    w = World(KEYS[:1], a_alive=False)
    k = KEYS[0]
    assert w.copies.restart_stalled(k, D) is False  # nothing in flight: nothing marked
    assert w.copies.hand_out([row(k, B, D)]) == 1
    w.report_on_d(k, in_service=False, copy_from=B)
    assert w.copies.hand_out([row(k, B, D)]) == 0  # building: nothing to send
    assert w.copies.restart_stalled(k, D) is True
    assert w.copies.stalled() == {(k, D)}
    assert w.copies.hand_out([row(k, B, D)]) == 1
    assert w.ls.applied[-1][1][0].copy_from == C  # A is offline for good, B stalled
    task = w.copies.tasks[(k, D)]
    assert (task.src, task.attempts, task.tried) == (C, 2, {B})
    assert w.copies.stalled() == frozenset()
    # Once: the resent copy is building again, and is left alone.
    w.report_on_d(k, in_service=False, copy_from=C)
    assert w.copies.hand_out([row(k, C, D)]) == 0


def test_a_stalled_mark_on_a_copy_that_finished_sends_nothing() -> None:
    w = World(KEYS[:1], a_alive=False)
    k = KEYS[0]
    assert w.copies.hand_out([row(k, B, D)]) == 1
    w.report_on_d(k, in_service=False, copy_from=B)
    assert w.copies.restart_stalled(k, D) is True
    w.report_on_d(k, in_service=True, copy_from=B)  # it finished meanwhile
    assert w.copies.hand_out([row(k, B, D)]) == 0
    assert w.copies.stalled() == frozenset()


def test_a_copy_the_destination_forgot_is_resent_after_the_rpc_timeout() -> None:
    w = World(KEYS[:1])
    k = KEYS[0]
    assert w.copies.hand_out([row(k, B, D)]) == 1
    assert w.copies.hand_out([row(k, B, D)]) == 0  # just sent: no report yet
    w.clock.advance(200 * MS)
    assert w.copies.hand_out([row(k, B, D)]) == 1
    assert w.copies.tasks[(k, D)].started_us == w.clock.monotonic_us()
    assert len(w.events.named("migrate_replica")) == 1


@pytest.mark.parametrize(
    "case", ["no source", "no destination", "dead destination", "no leader", "refused"]
)
def test_rows_that_cannot_be_handed_out_are_skipped(case: str) -> None:
    w = World(KEYS[:1])
    k = KEYS[0]
    r = row(k, None if case == "no source" else B, None if case == "no destination" else D)
    if case == "dead destination":
        w.servers.servers[D] = server(D, alive=False)
    if case == "no leader":
        w.ls.leaders.clear()
    if case == "refused":
        w.ls.refuse.add(D)
    assert w.copies.hand_out([r]) == 0
    assert len(w.copies) == 0 and not w.events.events


def test_a_task_ends_when_the_old_replica_left_the_member_list() -> None:
    w = World(KEYS[:1])
    k = KEYS[0]
    w.copies.hand_out([row(k, B, D)])
    assert [t.key for t in w.copies.from_server(A)] == [k]
    for s in (B, C, D):
        w.ls.report_table.setdefault(s, {})[k] = info(k, [B, C, D], leader=B)
    assert w.copies.hand_out([]) == 0
    assert len(w.copies) == 0 and w.copies.from_server(A) == []


def test_cancel_forgets_the_copies_and_drops_partial_replicas_on_their_destinations() -> None:
    w = World(KEYS[:2])
    w.copies.hand_out([row(k, B, D) for k in KEYS[:2]])
    w.report_on_d(KEYS[0], in_service=False, copy_from=B)
    w.report_on_d(KEYS[1], in_service=True)  # a replica of its own: it stays
    drops = w.copies.cancel_to({D})
    assert len(w.copies) == 0 and w.ls.dropped == {}  # the calls are drop()'s
    w.copies.drop(drops)
    assert w.ls.dropped == {D: [KEYS[0]]}


def test_cancel_drops_a_copy_sent_but_not_reported_yet() -> None:
    w = World(KEYS[:1])
    w.copies.hand_out([row(KEYS[0], B, D)])
    w.copies.drop(w.copies.cancel_to({D}))
    assert w.ls.dropped == {D: [KEYS[0]]}


def test_stale_rows_are_not_handed_out() -> None:
    # The plan saw the unit on D; a CANCEL DELETE moved it back to A since.
    w = World(KEYS[:2])
    w.ls.plans[KEYS[0]] = plan(KEYS[0], {A: 1, B: 2, C: 3})
    del w.ls.plans[KEYS[1]]  # the log stream is gone
    assert w.copies.hand_out([row(k, B, D) for k in KEYS[:2]]) == 0
    assert w.ls.applied == [] and len(w.copies) == 0
    assert w.copies.last_stale == 2 and w.metrics.get("stale_plan_rows_total") == 2
    # a permanently offline old server that is still the unit's server is no premise broken
    w.servers.servers[A] = server(A, deleting=True, hb=HeartbeatStatus.PERMANENT_OFFLINE)
    w.ls.plans[KEYS[0]] = plan(KEYS[0], {A: 1, D: 1, B: 2, C: 3})
    assert w.copies.hand_out([row(KEYS[0], B, D)]) == 1 and w.copies.last_stale == 0


class CancellingLs(FakeLs):
    """An LS layer whose ApplyReplicas lets a CANCEL DELETE land while the call is out."""

    copies: CopyTasks

    def apply(self, srv: str, upsert: Any = (), drop: Any = ()) -> Any:
        super().apply(srv, upsert, drop)
        self.cancel_drops = self.copies.cancel_to({srv})
        return None


def test_a_copy_cancelled_while_it_is_sent_is_dropped_again() -> None:
    w = World(KEYS[:1])
    ls = CancellingLs()
    ls.plans, ls.report_table, ls.leaders = w.ls.plans, w.ls.report_table, w.ls.leaders
    w.copies.ls = ls
    ls.copies = w.copies
    assert w.copies.hand_out([row(KEYS[0], B, D)]) == 0
    # the cancel found the task being sent; the hand-out dropped what it had just sent
    assert ls.cancel_drops == {D: [KEYS[0]]}
    assert ls.dropped == {D: [KEYS[0]]} and len(w.copies) == 0
    assert not w.events.named("migrate_replica")


def test_clear_forgets_every_copy() -> None:
    w = World(KEYS[:1])
    w.copies.hand_out([row(KEYS[0], B, D)])
    w.copies.clear()
    assert len(w.copies) == 0


def test_a_copy_whose_source_cannot_be_told_is_not_sent() -> None:
    # The source would refuse the learner's FetchData: the copy waits for the next round.
    w = World(KEYS[:1])
    w.ls.refuse.add(B)
    assert w.copies.hand_out([row(KEYS[0], B, D)]) == 0
    assert w.ls.applied == [] and len(w.copies) == 0
    w.ls.refuse.clear()
    assert w.copies.hand_out([row(KEYS[0], B, D)]) == 1
    assert w.ls.announced == [(KEYS[0], D, B)]


class FakeContents:
    """What the empty-server checker would find: ``full`` servers still hold something."""

    def __init__(self, *full: str) -> None:
        self.full = set(full)

    def has_units(self, server: str, /) -> bool:
        return server in self.full

    def has_replicas(self, server: str, /) -> bool:
        return server in self.full


def test_outcomes_name_the_copies_the_balancer_has_to_act_on() -> None:
    w = World(KEYS)
    assert w.copies.outcomes() == frozenset()
    w.copies.hand_out([row(k, B, D) for k in KEYS[:2]])
    w.report_on_d(KEYS[0], in_service=False, copy_from=B, bytes_copied=10)
    assert w.copies.outcomes() == frozenset()  # building: nothing to do yet
    w.report_on_d(KEYS[0], in_service=True, copy_from=B)
    w.report_on_d(KEYS[1], in_service=False, copy_from=B, build_error="checksum mismatch")
    assert w.copies.outcomes() == {(KEYS[0], D, COPY_READY), (KEYS[1], D, COPY_FAILED)}
    for s in (B, C, D):
        w.ls.report_table.setdefault(s, {})[KEYS[0]] = info(KEYS[0], [B, C, D], leader=B)
    assert (KEYS[0], D, COPY_REPLACED) in w.copies.outcomes()


def test_copy_watch_wakes_the_balancer_once_per_new_outcome() -> None:
    w = World(KEYS)
    waker, gate = FakeWaker(), FakeGate()
    watch = CopyWatch(
        copies=w.copies, servers=w.servers, contents=FakeContents(A), wake=waker, term=gate
    )
    assert watch.run_once() == 0 and waker.woken == []
    w.copies.hand_out([row(k, B, D) for k in KEYS[:2]])
    w.report_on_d(KEYS[0], in_service=False, copy_from=B)
    assert watch.run_once() == 0
    w.report_on_d(KEYS[0], in_service=True, copy_from=B)
    assert watch.run_once() == 1 and waker.woken == ["balancer"]
    assert watch.run_once() == 0  # seen already
    w.report_on_d(KEYS[1], in_service=True, copy_from=B)
    assert watch.run_once() == 1 and waker.woken == ["balancer"] * 2
    gate.in_service = False  # a standby wakes nothing, and forgets what it saw
    assert watch.run_once() == 0
    gate.in_service = True
    assert watch.run_once() == 1


def test_copy_watch_wakes_the_empty_server_checker_once_the_deleting_server_is_empty() -> None:
    w = World(KEYS[:1])
    waker = FakeWaker()
    contents = FakeContents()
    watch = CopyWatch(
        copies=w.copies, servers=w.servers, contents=contents, wake=waker, term=FakeGate()
    )
    w.copies.hand_out([row(KEYS[0], B, D)])
    w.report_on_d(KEYS[0], in_service=False, copy_from=B)
    assert watch.run_once() == 0  # a copy from A is in flight
    for s in (B, C, D):
        w.ls.report_table.setdefault(s, {})[KEYS[0]] = info(KEYS[0], [B, C, D], leader=B)
    contents.full.add(A)  # its unit has not left yet
    assert watch.run_once() == 1 and waker.woken == ["balancer"]  # the move is complete
    w.copies.hand_out([])  # the balancer's round ends the task
    assert watch.run_once() == 0
    contents.full.clear()
    assert watch.run_once() == 1 and waker.woken[-1] == "empty_server_checker"
    assert watch.run_once() == 0  # once per server


def test_copy_watch_wakes_the_balancer_when_a_skipped_leaderless_ls_is_led_again() -> None:
    """A row skipped because its LS had no leader (its leader moving off the
    DELETING server) is handed out as soon as the LS is led again, not at the next
    ``balancer_interval``."""
    w = World(KEYS[:2])
    waker = FakeWaker()
    watch = CopyWatch(
        copies=w.copies, servers=w.servers, contents=FakeContents(A), wake=waker, term=FakeGate()
    )
    del w.ls.leaders[KEYS[1]]
    assert w.copies.hand_out([row(k, B, D) for k in KEYS[:2]]) == 1
    assert w.copies.leaderless == {KEYS[1]}
    assert watch.run_once() == 0 and waker.woken == []  # still no leader
    w.ls.leaders[KEYS[1]] = C
    assert watch.run_once() == 1 and waker.woken == ["balancer"]
    assert watch.run_once() == 0  # once
    assert w.copies.hand_out([row(k, B, D) for k in KEYS[:2]]) == 1
    assert w.copies.leaderless == frozenset()
