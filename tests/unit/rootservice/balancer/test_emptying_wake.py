"""EmptyingWake: the steps of a replica move heard from the tenant layer wake
the task of the next step, and only while a server is being emptied. Fakes only; the whole
chain through a RootService is in test_migration_manager.py."""

from __future__ import annotations

from rootservice.balancer.emptying_wake import EmptyingWake
from rootservice.servers.status import HeartbeatStatus
from tests.unit.rootservice.balancer.fakes import FakeWaker, FakeWhitelist, server

A, B, C = (f"127.0.0.1:300{i}" for i in range(1, 4))


def test_nothing_is_woken_while_no_server_is_being_emptied() -> None:
    waker = FakeWaker()
    wake = EmptyingWake(servers=FakeWhitelist(server(A), server(B)), wake=waker)
    wake.copy_built(B)
    wake.rows_deleted(frozenset({A}))
    assert waker.woken == []


def test_each_step_wakes_the_task_of_the_next_one() -> None:
    waker = FakeWaker()
    servers = FakeWhitelist(server(A, deleting=True), server(B), server(C))
    wake = EmptyingWake(servers=servers, wake=waker)
    wake.copy_built(B)
    assert waker.woken == ["ls_reconciler"]
    wake.replica_dropped(A)
    assert waker.woken[-1] == "ls_meta_sync"
    wake.rows_deleted(frozenset({C}))  # rows of a server that stays: nothing to finish
    assert len(waker.woken) == 2
    wake.rows_deleted(frozenset({A, C}))
    assert waker.woken[2:] == ["balancer", "empty_server_checker"]
    # a permanently offline server's rows (the lost-replica cleanup) count too
    servers.servers[C].hb_status = HeartbeatStatus.PERMANENT_OFFLINE
    wake.rows_deleted(frozenset({C}))
    assert waker.woken[4:] == ["balancer", "empty_server_checker"]
