"""The history pruner on a real RS and database (SQLite and PostgreSQL):
retention edges, bounded batches, INPROGRESS jobs kept, leader only, and the parameters."""

from __future__ import annotations

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.db import event_repo, job_repo
from rootservice.db.event_repo import Event
from rootservice.servers.history_pruner import HistoryPruner, Pruned
from tests.support.harness import events, jobs
from tests.unit.rootservice.test_metrics import scrape, v

S = 1_000_000
DAY = 86_400 * S


def _clear_events(rs: RootService) -> None:
    with rs.store.txn() as conn:
        conn.execute(sa.text("DELETE FROM __all_rootservice_event_history"))


def _add_events(rs: RootService, times: list[int]) -> None:
    with rs.store.txn() as conn:
        event_repo.insert_events(
            conn, [Event(t, "server", "test", (("t", t),)) for t in times], rs.store.rs_addr
        )


def _pruner(rs: RootService, **kw: int) -> HistoryPruner:
    return HistoryPruner(rs.settings, rs.term, rs.store, rs.clock, rs.metrics, **kw)


def test_events_older_than_the_retention_go_the_one_at_the_edge_stays(rs: RootService) -> None:
    _clear_events(rs)
    rs.clock.advance(30 * DAY)
    now = rs.clock.now_us()
    keep = rs.settings.event_history_retention
    assert keep == 7 * DAY  # OceanBase's ob_event_history_recycle_interval default
    edge = now - keep
    _add_events(rs, [edge - 10 * DAY, edge - 1, edge, edge + 1, now])
    assert rs.history_pruner.run_once() == Pruned(events=2, jobs=0, batches=2)
    assert [int(e["event_time"]) for e in events(rs)] == [edge, edge + 1, now]
    assert rs.metrics.get("history_pruned_rows_total.event") == 2
    exposed = scrape(rs)
    assert v(exposed, "ob_rs_history_pruned_rows_total", history="event") == 2
    assert ("ob_rs_history_pruned_rows_total", frozenset({("history", "job")})) not in exposed
    # Nothing more to do: one empty batch per table.
    assert rs.history_pruner.run_once() == Pruned(0, 0, 2)


def test_a_backlog_is_pruned_in_bounded_batches_over_rounds(rs: RootService) -> None:
    _clear_events(rs)
    rs.clock.advance(30 * DAY)
    old = rs.clock.now_us() - 20 * DAY
    _add_events(rs, [old + i for i in range(10)])
    pruner = _pruner(rs, batch_rows=3, max_batches=2)
    # At most 2 transactions of 3 rows per table per round, oldest first.
    assert pruner.run_once() == Pruned(events=6, jobs=0, batches=3)
    assert [int(e["event_time"]) for e in events(rs)] == [old + i for i in range(6, 10)]
    assert pruner.run_once() == Pruned(events=4, jobs=0, batches=3)
    assert events(rs) == []


def test_ended_jobs_pruned_inprogress_kept_however_old(rs: RootService) -> None:
    t0 = rs.clock.now_us()
    with rs.store.txn() as conn:
        for port in (1, 2, 3):
            job_repo.create_job(conn, "DELETE_SERVER", "10.0.0.1", port, t0, rs.store.rs_addr)
        job_repo.finish_jobs(conn, "DELETE_SERVER", "10.0.0.1", 1, "SUCCESS", t0)
    rs.clock.advance(10)
    with rs.store.txn() as conn:
        job_repo.finish_jobs(conn, "DELETE_SERVER", "10.0.0.1", 2, "CANCELED", t0 + 10)
    keep = rs.settings.job_history_retention
    assert keep == 30 * DAY
    # Job 1 ended exactly at the edge: kept.
    rs.clock.advance(t0 + keep - rs.clock.now_us())
    assert rs.history_pruner.run_once().jobs == 0
    # One microsecond later job 1 goes; job 2 (ended 10 us later) and INPROGRESS job 3 stay.
    rs.clock.advance(1)
    assert rs.history_pruner.run_once().jobs == 1
    assert [(j["svr_port"], j["job_status"]) for j in jobs(rs)] == [
        (2, "CANCELED"),
        (3, "INPROGRESS"),
    ]
    rs.clock.advance(1000 * DAY)
    assert rs.history_pruner.run_once().jobs == 1
    assert [(j["svr_port"], j["job_status"]) for j in jobs(rs)] == [(3, "INPROGRESS")]
    assert rs.metrics.get("history_pruned_rows_total.job") == 2


def test_only_the_leader_prunes(rs: RootService) -> None:
    _clear_events(rs)
    rs.clock.advance(30 * DAY)
    _add_events(rs, [rs.clock.now_us() - 20 * DAY])
    rs.term.request_step_down("test: deposed")
    assert rs.history_pruner.run_once() == Pruned()
    assert len(events(rs)) == 1


def test_retention_parameters_alter_show_and_bounds(rs: RootService) -> None:
    assert rs.history_pruner in [t for t, _ in rs.leader_tasks()]
    rs.parameters.set([("event_history_retention", "1d"), ("job_history_retention", "90d")])
    assert rs.settings.event_history_retention == DAY
    assert rs.settings.job_history_retention == 90 * DAY
    shown = {r[0]: r for r in rs.parameters.show("%history_retention")}
    assert shown["event_history_retention"][1:4] == ("1d", "7d", "[1d, 180d]")
    assert shown["job_history_retention"][1:4] == ("90d", "30d", "[1d, +inf]")
    with rs.store.read() as conn:
        rows = dict(
            conn.execute(
                sa.text("SELECT name, value FROM __all_sys_parameter WHERE name LIKE '%retention'")
            ).all()
        )
    assert rows == {"event_history_retention": "1d", "job_history_retention": "90d"}
    for name, bad in (("event_history_retention", "23h"), ("event_history_retention", "181d")):
        try:
            rs.parameters.set([(name, bad)])
        except ObError as e:
            assert e.name == "OB_INVALID_CONFIG" and "out of range" in e.message
        else:
            raise AssertionError(f"{name} = {bad} was accepted")
    assert rs.settings.event_history_retention == DAY
