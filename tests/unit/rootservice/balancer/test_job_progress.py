"""DeleteJobProgress built from fakes on both databases (docs/design/migration.md): totals fixed at
the first round, progress and bytes from the rows and the copies in flight, one stall report
with its reason, the final extra_info; and the stall reasons from rows alone. No RootService.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.copy_tasks import CopyTask, CopyTasks
from rootservice.balancer.job_progress import DeleteJobProgress, JobProgress, job_info, stall_reason
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.config import RsSettings
from rootservice.db import job_repo, ls_repo, unit_repo
from rootservice.db.tables import all_rootservice_job
from rootservice.db.unit_repo import Unit
from rootservice.metrics import Metrics
from tests.unit.rootservice.balancer.fakes import (
    RS_ADDR,
    FakeEvents,
    FakeLayout,
    FakeLs,
    FakeStore,
    FakeWaker,
    FakeWhitelist,
    info,
    server,
)

A, B, D = "127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3004"
S = 1_000_000
GIB = 1 << 30


def meta(unit_id: int, data_size: int) -> dict[str, Any]:
    return {
        "sql_port": 4001,
        "role": ls_repo.ROLE_FOLLOWER,
        "member_list": "",
        "proposal_id": 1,
        "replica_status": "NORMAL",
        "unit_id": unit_id,
        "zone": "z1",
        "paxos_replica_number": 3,
        "data_size": data_size,
        "required_size": data_size,
    }


class World:
    """A is being deleted: one unit and two replicas (1 GiB each) on it."""

    def __init__(self, engine: sa.Engine) -> None:
        self.clock = FakeClock()
        self.store = FakeStore(engine)
        self.ls = FakeLs()
        self.events = FakeEvents()
        self.servers = FakeWhitelist(server(A, deleting=True), server(B), server(D))
        settings = RsSettings(migration_stall_time="30s")
        metrics = Metrics()
        self.units = UnitMoves(
            servers=self.servers,
            ls=self.ls,
            layout=FakeLayout(),
            store=self.store,
            clock=self.clock,
            metrics=metrics,
            wake=FakeWaker(),
        )
        self.copies = CopyTasks(
            servers=self.servers,
            ls=self.ls,
            events=self.events,
            store=self.store,
            clock=self.clock,
            settings=settings,
            metrics=metrics,
        )
        self.jobs = DeleteJobProgress(
            servers=self.servers,
            ls=self.ls,
            events=self.events,
            store=self.store,
            clock=self.clock,
            settings=settings,
            units=self.units,
            copies=self.copies,
        )
        now = self.clock.now_us()
        with self.store.txn() as conn:
            self.job_id = job_repo.create_job(
                conn, "DELETE_SERVER", "127.0.0.1", 3001, now, RS_ADDR
            )
            unit_repo.insert_units(conn, [Unit(1, 1, 1001, "z1", "127.0.0.1", 3001)], now)
            ls_repo.upsert_ls_meta(
                conn,
                {
                    (1001, 1001, "127.0.0.1", 3001): meta(1, GIB),
                    (1001, 1002, "127.0.0.1", 3001): meta(1, GIB),
                },
                {},
                now,
            )

    def job(self) -> tuple[int, dict[str, Any]]:
        t = all_rootservice_job
        with self.store.read() as conn:
            r = conn.execute(sa.select(t).where(t.c.job_id == self.job_id)).mappings().one()
        return int(r["progress"]), json.loads(r["extra_info"] or "{}")


def test_progress_counts_units_replicas_and_bytes_in_flight(engine: sa.Engine) -> None:
    w = World(engine)
    w.jobs.update_jobs()
    percent, extra = w.job()
    assert percent == 0
    assert (extra["units_total"], extra["replicas_total"], extra["bytes_total"]) == (1, 2, 2 * GIB)
    # the unit moved; half of one replica's bytes arrived on D
    w.clock.advance(10 * S)
    with w.store.txn() as conn:
        unit_repo.start_unit_move(conn, 1, ("127.0.0.1", 3001), ("127.0.0.1", 3004), 0)
        unit_repo.finish_unit_move(conn, 1, 0)
    w.copies.tasks[((1001, 1001), D)] = CopyTask((1001, 1001), D, B, A, w.clock.now_us())
    w.ls.report_table = {
        D: {(1001, 1001): info((1001, 1001), [A, B], in_service=False, bytes_copied=GIB // 2)}
    }
    w.jobs.update_jobs()
    percent, extra = w.job()
    assert percent == 33
    assert (extra["units_moved"], extra["replicas_moved"], extra["bytes_copied"]) == (
        1,
        0,
        GIB // 2,
    )
    assert extra["copied"] == "512M" and extra["eta"] == "30s"  # 1.5 GiB left at 512M / 10 s


def test_a_stall_is_reported_once_with_the_no_room_reason(engine: sa.Engine) -> None:
    w = World(engine)
    w.units.unplaced = {1: "memory: needs 4G, free 1G"}
    w.jobs.update_jobs()
    w.clock.advance(29 * S)
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == ""
    w.clock.advance(1 * S)
    w.jobs.update_jobs()
    w.jobs.update_jobs()
    reason = "unit 1 in zone z1 has no room: memory: needs 4G, free 1G"
    assert w.job()[1]["stalled"] == reason
    [ev] = w.events.named("migration_stalled")
    assert ev.values == (("server", A), ("reason", reason))


def test_the_final_extra_info_shows_everything_moved(engine: sa.Engine) -> None:
    w = World(engine)
    with w.store.txn() as conn:
        w.jobs.finalize_job(conn, "127.0.0.1", 3001)  # no progress kept: nothing written
    assert w.job()[1] == {}
    w.jobs.update_jobs()
    with w.store.txn() as conn:
        w.jobs.finalize_job(conn, "127.0.0.1", 3001)
    extra = w.job()[1]
    assert (extra["units_moved"], extra["replicas_moved"], extra["bytes_copied"]) == (1, 2, 2 * GIB)
    assert (extra["eta"], extra["stalled"], extra["copied"]) == ("", "", "2G")
    assert w.jobs.progress == {}


def test_forget_and_clear_drop_the_kept_progress(engine: sa.Engine) -> None:
    w = World(engine)
    w.jobs.update_jobs()
    assert set(w.jobs.progress) == {A}
    w.jobs.forget(A)
    assert w.jobs.progress == {}
    w.jobs.update_jobs()
    w.jobs.clear()
    assert w.jobs.progress == {}


def test_stall_reasons_from_rows() -> None:
    unit = Unit(7, 1, 1001, "z1", "127.0.0.1", 3001)
    task = CopyTask((1001, 1002), D, B, A, 0)
    failed = {D: {(1001, 1002): info((1001, 1002), [A, B], build_error="disk full")}}
    alive, dead = server(A), server(A, alive=False)
    left = [(1001, 1001), (1001, 1002), (1002, 1001), (1002, 1002)]
    assert stall_reason(
        A, [unit], {7: "cpu"}, [task], failed, alive, planner_failure="no java"
    ) == ("planner failed: no java")
    assert stall_reason(A, [unit], {7: "cpu: needs 4, free 1"}, [task], failed, alive) == (
        "unit 7 in zone z1 has no room: cpu: needs 4, free 1"
    )
    assert stall_reason(A, [unit], {}, [task], failed, alive) == (
        f"LS 1001/1002 copy to {D}: disk full"
    )
    assert stall_reason(A, [], {}, [], {}, dead, leaderless=[(1002, 1001)]) == (
        "1 LS without a leader (1002/1001): no member change can happen"
    )
    assert stall_reason(A, [], {}, [task], {}, dead) == (
        "the server is not alive and some LS has no healthy source"
    )
    assert stall_reason(A, [], {}, [], {}, alive, replicas_left=left) == (
        "4 replica(s) still on the server (1001/1001, 1001/1002, 1002/1001 and 1 more): "
        "waiting for their copies to catch up and for member changes"
    )
    assert stall_reason(A, [], {}, [], {}, alive) == "waiting for member changes"


def test_job_info_is_compact_json() -> None:
    p = JobProgress(2, 4, 3 * GIB, 5, 7, stalled="x")
    assert json.loads(job_info(p, 1, 2, GIB, "5s")) == {
        "units_moved": 1,
        "units_total": 2,
        "replicas_moved": 2,
        "replicas_total": 4,
        "bytes_copied": GIB,
        "bytes_total": 3 * GIB,
        "copied": "1G",
        "eta": "5s",
        "stalled": "x",
        "started_us": 5,
        "last_progress_us": 7,
    }
    assert ", " not in job_info(p, 1, 2, GIB, "")


def new_leader(w: World) -> DeleteJobProgress:
    """The DeleteJobProgress of another RS on the same database (it kept nothing in memory)."""
    return DeleteJobProgress(
        servers=w.servers,
        ls=w.ls,
        events=w.events,
        store=w.store,
        clock=w.clock,
        settings=w.jobs.settings,
        units=w.units,
        copies=w.copies,
    )


def test_progress_survives_a_failover_through_the_job_row(engine: sa.Engine) -> None:
    w = World(engine)
    started = w.clock.now_us()
    w.jobs.update_jobs()
    w.clock.advance(10 * S)
    with w.store.txn() as conn:
        unit_repo.start_unit_move(conn, 1, ("127.0.0.1", 3001), ("127.0.0.1", 3004), 0)
        unit_repo.finish_unit_move(conn, 1, 0)
        ls_repo.delete_ls_meta(conn, [(1001, 1001, "127.0.0.1", 3001)])
    w.jobs.update_jobs()
    assert w.job()[0] == 66
    # a new leader takes office: its first round resumes from the row, not from what is left
    w.clock.advance(5 * S)
    other = new_leader(w)
    other.update_jobs()
    percent, extra = w.job()
    assert percent == 66
    assert (extra["units_total"], extra["replicas_total"], extra["bytes_total"]) == (1, 2, 2 * GIB)
    assert (extra["units_moved"], extra["replicas_moved"], extra["bytes_copied"]) == (1, 1, GIB)
    assert extra["started_us"] == started
    assert other.progress[A].last_change_us == started + 10 * S
    # without the row's baseline the new leader would have seen 0 of (0 units, 1 replica)
    with w.store.txn() as conn:
        job_repo.set_job_progress(conn, w.job_id, 66, "", w.clock.now_us())
    third = new_leader(w)
    third.update_jobs()
    assert w.job()[0] == 0


def test_a_new_leader_finalizes_from_the_row(engine: sa.Engine) -> None:
    w = World(engine)
    w.jobs.update_jobs()
    other = new_leader(w)  # took office, removes the server before its first round
    with w.store.txn() as conn:
        other.finalize_job(conn, "127.0.0.1", 3001)
    extra = w.job()[1]
    assert (extra["units_moved"], extra["replicas_moved"], extra["bytes_copied"]) == (1, 2, 2 * GIB)


def test_a_stall_names_the_log_stream_without_a_leader(engine: sa.Engine) -> None:
    w = World(engine)
    # (1001, 1002) is reported but has no leader; (1001, 1001) has one
    w.ls.report_table = {
        B: {
            (1001, 1001): info((1001, 1001), [A, B], leader=B),
            (1001, 1002): info((1001, 1002), [A, B]),
        }
    }
    w.ls.leaders = {(1001, 1001): B}
    w.jobs.update_jobs()
    w.clock.advance(30 * S)
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == (
        "1 LS without a leader (1001/1002): no member change can happen"
    )


def test_a_stall_names_the_replicas_still_on_the_server(engine: sa.Engine) -> None:
    w = World(engine)
    w.jobs.update_jobs()
    w.clock.advance(30 * S)
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == (
        "2 replica(s) still on the server (1001/1001, 1001/1002): waiting for their copies "
        "to catch up and for member changes"
    )


def test_a_failed_planner_is_the_stall_reason_until_it_works_again(engine: sa.Engine) -> None:
    w = World(engine)
    w.jobs.update_jobs()
    w.jobs.planner_failed("no java on PATH")
    w.clock.advance(29 * S)
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == ""
    w.clock.advance(1 * S)
    w.jobs.update_jobs()
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == "planner failed: no java on PATH"
    # another cause is another event; the same one is not repeated
    w.jobs.planner_failed("JVM crashed")
    w.jobs.update_jobs()
    w.jobs.update_jobs()
    assert [dict(e.values)["reason"] for e in w.events.named("migration_stalled")] == [
        "planner failed: no java on PATH",
        "planner failed: JVM crashed",
    ]
    # the planner works: the stall clears and a fresh stall time starts
    w.jobs.planner_works()
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"] == ""
    w.clock.advance(30 * S)
    w.jobs.update_jobs()
    assert w.job()[1]["stalled"].startswith("2 replica(s) still on the server")
