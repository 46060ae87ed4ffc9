"""DeleteJobProgress built from fakes on both databases (SPEC.md section 9): totals fixed at
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
    assert w.job()[1]["stalled"] == "unit 1: no room (memory: needs 4G, free 1G)"
    [ev] = w.events.named("migration_stalled")
    assert ev.values == (("server", A), ("reason", "unit 1: no room (memory: needs 4G, free 1G)"))


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
    assert stall_reason(A, [unit], {7: "cpu"}, [task], failed, alive) == "unit 7: no room (cpu)"
    assert stall_reason(A, [unit], {}, [task], failed, alive) == (f"LS 1002 copy to {D}: disk full")
    assert stall_reason(A, [], {}, [task], {}, dead) == (
        "the server is not alive and some LS has no healthy source"
    )
    assert stall_reason(A, [], {}, [], {}, alive) == (
        "waiting for replicas to catch up and for member changes"
    )


def test_job_info_is_compact_json() -> None:
    p = JobProgress(2, 4, 3 * GIB, 0, 0, stalled="x")
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
    }
    assert ", " not in job_info(p, 1, 2, GIB, "")
