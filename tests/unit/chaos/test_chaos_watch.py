"""The chaos run's watch (tests/chaos/chaos.py): fed the ``__all_server`` polls it exists to
judge, without processes. A server missing without a DELETE is lost, a deleted one shown
other than DELETING is resurrected; a server whose DELETE SERVER is on its way, or a poll
that began before the answer, is not judged (the race a clean-clone run reported as
"servers lost 1": the statement woke the empty-server checker, which removed the agent
before the harness had read the answer)."""

from __future__ import annotations

import time

import sqlalchemy as sa

from tests.chaos.chaos import Watch

A, B = "127.0.0.1:3001", "127.0.0.1:3002"


def _watch() -> Watch:
    return Watch(sa.create_engine("sqlite://"), [A, B])


def test_a_server_missing_without_a_delete_is_lost() -> None:
    w = _watch()
    w.judge({A: "ACTIVE"}, time.monotonic_ns(), 1)
    assert w.lost == {B} and not w.resurrected


def test_a_server_gone_while_its_delete_is_on_its_way_is_not_lost() -> None:
    w = _watch()
    w.deleting(B)
    w.judge({A: "ACTIVE"}, time.monotonic_ns(), 1)
    w.deleted_now(B)
    w.judge({A: "ACTIVE"}, time.monotonic_ns(), 2)
    assert not w.lost and not w.resurrected and w.polls == 2


def test_a_poll_begun_before_the_answer_does_not_judge_the_deleted_server() -> None:
    w = _watch()
    w.deleting(B)
    began = time.monotonic_ns()
    w.deleted_now(B)
    # Read before the DELETE committed: still ACTIVE, not a resurrection.
    w.judge({A: "ACTIVE", B: "ACTIVE"}, began, 1)
    assert not w.resurrected
    # A poll begun after the answer that still shows it ACTIVE is one.
    w.judge({A: "ACTIVE", B: "ACTIVE"}, time.monotonic_ns(), 2)
    assert w.resurrected == {B}


def test_deleting_and_gone_are_fine_after_the_answer() -> None:
    w = _watch()
    w.deleting(B)
    w.deleted_now(B)
    w.judge({A: "ACTIVE", B: "DELETING"}, time.monotonic_ns(), 1)
    w.judge({A: "ACTIVE"}, time.monotonic_ns(), 2)
    assert not w.lost and not w.resurrected
    # The other server is still judged meanwhile.
    w.judge({A: "INACTIVE"}, time.monotonic_ns(), 3)
    assert [(s, st) for _, s, st in w.not_active] == [(A, "INACTIVE")]
